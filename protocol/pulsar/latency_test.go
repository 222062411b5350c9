package pulsar

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	pb "github.com/magnetar-io/magnetar/protocol/pulsar/pulsarpb"
)

// PublishLatency observes each SEND answered with a receipt once, when
// the receipt is queued; a SEND refused (bad checksum) is not observed.
func TestPublishLatency(t *testing.T) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "publish_latency_seconds", Buckets: prometheus.DefBuckets})
	s := startServer(t, func(c *Config) { c.PublishLatency = h })
	c := dial(t, s)
	c.connect()
	c.producer("latency", 1)
	bad := sendFrame(t, 1, 0, []byte("bad"))
	bad[len(bad)-1] ^= 0xff
	c.write(bad)
	if f := c.read(); f.Cmd.GetType() != pb.BaseCommand_SEND_ERROR {
		t.Fatalf("got %v, want SEND_ERROR", f.Cmd.GetType())
	}
	for seq := uint64(1); seq <= 3; seq++ {
		c.write(sendFrame(t, 1, seq, []byte("hello")))
		if f := c.read(); f.Cmd.GetType() != pb.BaseCommand_SEND_RECEIPT || f.Cmd.SendReceipt.GetSequenceId() != seq {
			t.Fatalf("got %v, want SEND_RECEIPT for sequence id %d", f.Cmd, seq)
		}
	}
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	if n, sum := m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum(); n != 3 || sum <= 0 {
		t.Fatalf("%d publish latencies summing to %v s, want 3 (the refused SEND not among them)", n, sum)
	}
}
