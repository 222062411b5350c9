// Package pulsarpb holds the commands of the Pulsar binary protocol:
// BaseCommand (the envelope every frame carries), one message per command
// type, and the shared enums (ServerError, ProtocolVersion, ...). The message
// model it refers to (MessageMetadata, KeyValue, ...) is in broker/msgpb.
//
// pulsar.pb.go is generated from pulsar.proto by `make proto`; edit the
// .proto, never the generated file. Field numbers, labels and defaults are
// wire format, identical to Apache Pulsar's, so the official clients work
// unmodified.
package pulsarpb
