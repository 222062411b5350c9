// Package msgpb holds the Pulsar message model that the broker stores and
// reads: MessageMetadata (what a producer puts before a payload),
// SingleMessageMetadata (one member of a batch), BrokerEntryMetadata and the
// small types they use. It sits below the protocol layer so that the broker can
// parse and build entries without importing protocol/pulsar; the commands that
// refer to these types are in protocol/pulsar/pulsarpb.
//
// message.pb.go is generated from message.proto by `make proto`; edit the
// .proto, never the generated file. Field numbers and defaults are wire format,
// identical to Apache Pulsar's.
package msgpb
