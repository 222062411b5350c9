// Package kafka_test runs real Kafka clients, unmodified — franz-go,
// IBM/sarama, segmentio/kafka-go, kcat (librdkafka) and kafkajs — against
// a real magnetar standalone server, and checks that what one protocol
// writes the other reads (pulsar-client-go). Tests share one server unless
// they restart it; each uses its own topics, named after the test.
package kafka_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

var shared = harness.NewShared()

func TestMain(m *testing.M) { os.Exit(harness.RunShared(m, shared)) }

// opTimeout bounds single operations, so a broken server fails a test
// instead of hanging it.
const opTimeout = 30 * time.Second

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// franzClient is a franz-go client of srv with its defaults (idempotent
// producer) plus opts.
func franzClient(t testing.TB, srv *harness.Server, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(srv.KafkaAddr())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
