package kafka_test

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

func TestFranzProduceConsume(t *testing.T) {
	srv := shared.Server(t)
	topic := harness.Name(t)
	ctx := testCtx(t)
	p := franzClient(t, srv, kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation())
	const n = 100
	for i := range n {
		r := &kgo.Record{Key: []byte(fmt.Sprint("k", i%7)), Value: []byte(fmt.Sprint("v", i))}
		if err := p.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	c := franzClient(t, srv, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := 0
	for got < n {
		fs := c.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatalf("poll: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if want := fmt.Sprint("v", got); string(r.Value) != want || r.Offset != int64(got) {
				t.Fatalf("record %d: value %q offset %d, want %q offset %d", got, r.Value, r.Offset, want, got)
			}
			got++
		})
	}
}
