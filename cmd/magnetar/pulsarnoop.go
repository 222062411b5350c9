package main

import (
	"bufio"
	"fmt"
	"log/slog"
	"net"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/protocol/pulsar/frame"
	pb "github.com/magnetar-io/magnetar/protocol/pulsar/pulsarpb"
)

// noopPulsar is the least a Pulsar broker can do for producers: it answers
// CONNECT, lookups and PRODUCER, and acknowledges each SEND at once,
// storing nothing. `perf all` publishes to it, in the benchmark's process
// like kfake, to measure what pulsar-client-go and the machine take before
// any broker does any work: Magnetar's Pulsar publish latency cannot be
// lower.
// Anything but a producer's commands is answered with an ERROR.
//
// With a store (startNoopPulsar's store argument; `perf all` runs it so
// in a child process, `magnetar perf noop-broker`), it is the least a
// broker that acknowledges after fsync can do: each SEND's message is
// written to the store's file and its receipt sent once a group commit
// has made it durable (noopStore). Magnetar does that and more (an
// index, entry logs, a cache, a second copy of each message).
type noopPulsar struct {
	*noopListener
	store *noopStore // nil: receipts at once
}

// noopMaxMessage is the message size the no-op broker announces; it
// accepts frames of that plus frame.FramePadding.
const noopMaxMessage = 5 << 20

// startNoopPulsar listens on a free loopback port and serves until Close.
// With a store, receipts wait for it; Close does not close it.
func startNoopPulsar(log *slog.Logger, store *noopStore) (*noopPulsar, error) {
	s := &noopPulsar{store: store}
	l, err := listenNoop("no-op Pulsar broker", log, s.serve)
	if err != nil {
		return nil, err
	}
	s.noopListener = l
	return s, nil
}

// URL is the service URL to give the client.
func (s *noopPulsar) URL() string { return "pulsar://" + s.Addr() }

// serve answers one connection's commands in order. Replies are gathered
// in a buffer and written when no more input is waiting, as a broker
// answering several SENDs per wakeup does.
func (s *noopPulsar) serve(nc net.Conn) error {
	c := &noopConn{c: nc}
	br := bufio.NewReaderSize(nc, 64<<10)
	r := frame.NewReader(br, noopMaxMessage+frame.FramePadding)
	var out []byte
	var seq uint64 // entry ids of the receipts
	for {
		f, err := r.ReadFrame()
		if err != nil {
			return err
		}
		cmd := f.Cmd
		var reply *pb.BaseCommand
		switch cmd.GetType() {
		case pb.BaseCommand_CONNECT:
			reply = &pb.BaseCommand{Type: pb.BaseCommand_CONNECTED.Enum(), Connected: &pb.CommandConnected{
				ServerVersion:   proto.String("magnetar-perf-noop"),
				ProtocolVersion: proto.Int32(min(cmd.Connect.GetProtocolVersion(), 21)),
				MaxMessageSize:  proto.Int32(noopMaxMessage),
			}}
		case pb.BaseCommand_PING:
			reply = &pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}}
		case pb.BaseCommand_PONG:
		case pb.BaseCommand_PARTITIONED_METADATA:
			reply = &pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA_RESPONSE.Enum(),
				PartitionMetadataResponse: &pb.CommandPartitionedTopicMetadataResponse{
					RequestId: proto.Uint64(cmd.PartitionMetadata.GetRequestId()), Partitions: proto.Uint32(0),
					Response: pb.CommandPartitionedTopicMetadataResponse_Success.Enum()}}
		case pb.BaseCommand_LOOKUP:
			reply = &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: &pb.CommandLookupTopicResponse{
				RequestId: proto.Uint64(cmd.LookupTopic.GetRequestId()), Response: pb.CommandLookupTopicResponse_Connect.Enum(),
				BrokerServiceUrl: proto.String(s.URL()), Authoritative: proto.Bool(true), ProxyThroughServiceUrl: proto.Bool(false)}}
		case pb.BaseCommand_PRODUCER:
			p := cmd.Producer
			name := p.GetProducerName()
			if name == "" {
				name = fmt.Sprintf("noop-%d", p.GetProducerId())
			}
			reply = &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pb.CommandProducerSuccess{
				RequestId: proto.Uint64(p.GetRequestId()), ProducerName: proto.String(name), LastSequenceId: proto.Int64(-1)}}
		case pb.BaseCommand_SEND:
			sc := cmd.Send
			rc := frame.Receipt{ProducerID: sc.GetProducerId(), SequenceID: sc.GetSequenceId(), Ledger: 1, Entry: seq, Partition: -1}
			seq++
			if s.store == nil {
				out = frame.AppendSendReceipt(out, rc)
			} else if err := s.store.add(c, f.HeadersAndPayload, frame.AppendSendReceipt(nil, rc)); err != nil {
				return err
			}
		case pb.BaseCommand_CLOSE_PRODUCER:
			reply = &pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{
				RequestId: proto.Uint64(cmd.CloseProducer.GetRequestId())}}
		default: // answered, as the broker does, when there is a request to answer
			if id, ok := frame.RequestID(cmd); ok {
				reply = &pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{
					RequestId: proto.Uint64(id), Error: pb.ServerError_NotAllowedError.Enum(),
					Message: proto.String(fmt.Sprintf("the no-op broker of perf all serves producers only, not %s", cmd.GetType()))}}
			}
		}
		if reply != nil {
			if out, err = frame.AppendCommand(out, reply); err != nil {
				return err
			}
		}
		if len(out) > 0 && br.Buffered() == 0 {
			if err := c.write(out); err != nil {
				return err
			}
			out = out[:0]
		}
	}
}
