package pulsar

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/msgpb"
	"github.com/magnetar-io/magnetar/protocol/pulsar/frame"
	pb "github.com/magnetar-io/magnetar/protocol/pulsar/pulsarpb"
)

// BenchmarkPublishAndDispatch: a producer SENDs a batch of 1, 10 or 100
// messages of 1 KiB, and an exclusive consumer on the same topic gets it
// (MESSAGE), through the server over loopback down to an in-process
// bookie (fsync off). A batch is stored and dispatched as sent, so the
// allocations per SEND must not grow with the messages in it:
// "allocs/record" is the heap allocations of the whole process per
// message (issue 10: no per-record allocation). The publish latency
// histogram is on, as in magnetar standalone and broker.
func BenchmarkPublishAndDispatch(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprint("records=", n), func(b *testing.B) {
			s := startServer(b, func(c *Config) {
				c.MaxMessageSize = 1 << 20
				c.PublishLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "publish_latency_seconds",
					Buckets: prometheus.ExponentialBuckets(0.0001, 1.25, 45)})
			})
			c := dial(b, s)
			c.send(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
				ClientVersion: proto.String("bench"), ProtocolVersion: proto.Int32(21)}})
			c.read()
			const topic = "persistent://public/default/bench"
			c.producer(topic, 1)
			c.send(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
				Topic: proto.String(topic), Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Exclusive.Enum(),
				ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(2)}})
			if f := c.read(); f.Cmd.GetType() != pb.BaseCommand_SUCCESS {
				b.Fatalf("subscribe: %v", f.Cmd.GetType())
			}
			c.send(&pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{
				ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(1 << 31)}})

			var batch []byte
			value := make([]byte, 1024)
			for range n {
				smd, _ := proto.Marshal(&msgpb.SingleMessageMetadata{PayloadSize: proto.Int32(int32(len(value)))})
				batch = binary.BigEndian.AppendUint32(batch, uint32(len(smd)))
				batch = append(batch, smd...)
				batch = append(batch, value...)
			}
			send, err := frame.AppendPayloadCommand(nil,
				&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1),
					SequenceId: proto.Uint64(0), NumMessages: proto.Int32(int32(n))}},
				&msgpb.MessageMetadata{ProducerName: proto.String("bench"), SequenceId: proto.Uint64(0),
					PublishTime: proto.Uint64(uint64(time.Now().UnixMilli())), NumMessagesInBatch: proto.Int32(int32(n))},
				batch)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(batch)))
			b.ReportAllocs()
			b.ResetTimer()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			start := ms.Mallocs
			for range b.N {
				c.write(send)
				for got := 0; got < 2; { // the receipt and the message, in either order
					switch f := c.read(); f.Cmd.GetType() {
					case pb.BaseCommand_SEND_RECEIPT, pb.BaseCommand_MESSAGE:
						got++
					case pb.BaseCommand_ACTIVE_CONSUMER_CHANGE:
					default:
						b.Fatalf("got %v", f.Cmd.GetType())
					}
				}
			}
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.Mallocs-start)/float64(b.N*n), "allocs/record")
		})
	}
}
