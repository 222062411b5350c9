package pulsar_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestCompression: for every codec pulsar-client-go v0.19.0 has (LZ4,
// ZLIB, ZSTD, SNAPPY), single messages and batches produced compressed are
// consumed decompressed, byte for byte.
func TestCompression(t *testing.T) {
	codecs := []struct {
		name string
		typ  pulsar.CompressionType
	}{
		{"LZ4", pulsar.LZ4},
		{"ZLIB", pulsar.ZLib},
		{"ZSTD", pulsar.ZSTD},
		{"SNAPPY", pulsar.SNAPPY},
	}
	for _, codec := range codecs {
		for _, batched := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/batched=%v", codec.name, batched), func(t *testing.T) {
				c := sharedClient(t)
				topic := topicName(t)
				cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub"})
				p := createProducer(t, c, pulsar.ProducerOptions{
					Topic:                   topic,
					CompressionType:         codec.typ,
					DisableBatching:         !batched,
					BatchingMaxMessages:     5,
					BatchingMaxPublishDelay: time.Hour,
				})
				const n = 10
				msgs := make([]*pulsar.ProducerMessage, n)
				for i := range msgs {
					// Compressible, and different in each message.
					msgs[i] = &pulsar.ProducerMessage{
						Payload:    fmt.Appendf(nil, "%d:%s", i, strings.Repeat(fmt.Sprintf("compressible text %d ", i), 200)),
						Properties: map[string]string{"i": fmt.Sprint(i)},
					}
				}
				ids := sendAll(t, p, msgs)
				if batched && !sameEntry(ids[0], ids[4]) {
					t.Fatalf("messages 0-4 not sent as one batch: %s, %s", idString(ids[0]), idString(ids[4]))
				}
				for i := range n {
					msg := receive(t, cons)
					if !bytes.Equal(msg.Payload(), msgs[i].Payload) {
						t.Fatalf("message %d: got %q, want %q", i, abbrev(msg.Payload()), abbrev(msgs[i].Payload))
					}
					if got := msg.Properties()["i"]; got != fmt.Sprint(i) {
						t.Errorf("message %d: property i = %q", i, got)
					}
					ackMsg(t, cons, msg)
				}
			})
		}
	}
}
