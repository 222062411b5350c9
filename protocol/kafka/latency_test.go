package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// RequestLatency observes each request once, under its API's name, from
// its reading to its response written: a Fetch's includes its wait, and a
// Produce with acks 0 (no response) counts too.
func TestRequestLatency(t *testing.T) {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "request_latency_seconds", Buckets: prometheus.DefBuckets}, []string{"request"})
	s := startServer(t, func(c *Config) { c.RequestLatency = h })
	c := s.dial(t)
	createTopic(t, c, "lat", 1)
	for range 3 {
		if p := produce(t, c, "lat", plainBatch("x")); p.ErrorCode != 0 {
			t.Fatalf("produce: error %d", p.ErrorCode)
		}
	}
	c.send(produceReq(9, 0, "lat", 0, plainBatch("y"))) // acks 0: no response
	// Appended after it: the acks-0 records are stored by then.
	if p := produce(t, c, "lat", plainBatch("z")); p.ErrorCode != 0 || p.BaseOffset != 4 {
		t.Fatalf("produce after acks 0: error %d at offset %d, want 4", p.ErrorCode, p.BaseOffset)
	}
	const wait = 300 * time.Millisecond
	resp := roundTrip[*kmsg.FetchResponse](c, fetchReq("lat", 5, wait)) // at the end: waits
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || len(p.RecordBatches) != 0 {
		t.Fatalf("fetch at the end: error %d, %d bytes", p.ErrorCode, len(p.RecordBatches))
	}
	// A response is observed once written: the one after the fetch's
	// comes once the fetch's is observed.
	roundTrip[*kmsg.ApiVersionsResponse](c, kmsg.NewPtrApiVersionsRequest())
	observed := func(api string) (uint64, float64) {
		t.Helper()
		var m dto.Metric
		if err := h.WithLabelValues(api).(prometheus.Histogram).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
	}
	if n, sum := observed("Produce"); n != 5 || sum <= 0 {
		t.Fatalf("Produce: %d latencies summing to %v s, want 5 (four answered, one with acks 0)", n, sum)
	}
	if n, _ := observed("CreateTopics"); n != 1 {
		t.Fatalf("CreateTopics: %d latencies, want 1", n)
	}
	if n, sum := observed("Fetch"); n != 1 || sum < wait.Seconds() {
		t.Fatalf("Fetch: %d latencies summing to %v s, want 1 of at least its %v wait", n, sum, wait)
	}
	if n, _ := observed("Metadata"); n != 0 {
		t.Fatalf("Metadata: %d latencies, want 0 (none sent)", n)
	}
}

// A request whose handler panics closes its connection and is not
// counted: it was never answered.
func TestRequestLatencyPanickingHandler(t *testing.T) {
	const key = 16 // ListGroups
	orig := apis[key]
	t.Cleanup(func() { apis[key] = orig }) // after the server's own cleanup
	apis[key] = api{orig.min, orig.max, func(*conn, *slot, kmsg.Request) { panic("injected") }}
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "request_latency_seconds", Buckets: prometheus.DefBuckets}, []string{"request"})
	s := startServer(t, func(c *Config) { c.RequestLatency = h })
	c := s.dial(t)
	roundTrip[*kmsg.ApiVersionsResponse](c, kmsg.NewPtrApiVersionsRequest())
	req := kmsg.NewPtrListGroupsRequest()
	req.Version = 3
	c.send(req)
	if _, _, err := readFrame(c.nc); err == nil {
		t.Fatal("a response to the request whose handler panicked, want the connection closed")
	}
	count := func(api string) uint64 {
		var m dto.Metric
		if err := h.WithLabelValues(api).(prometheus.Histogram).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}
	// Once the server is down, its connections' writers are done.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n, m := count("ListGroups"), count("ApiVersions"); n != 0 || m != 1 {
		t.Fatalf("%d ListGroups and %d ApiVersions latencies, want 0 and 1", n, m)
	}
}
