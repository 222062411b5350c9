package kafka

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/broker"
)

// FuzzParseRequest feeds the request decoder (readRequest: a request's
// size prefix and what follows, Produce v3+ decoded as it arrives, the
// others read whole and parsed) arbitrary bytes, seeded with real
// requests of every served API at its lowest and highest version: it must
// return a request or an error, never panic. Records inside a Produce are
// fuzzed by broker.FuzzSplitRecordBatches.
func FuzzParseRequest(f *testing.F) {
	for key, a := range apis {
		for _, v := range []int16{a.min, a.max} {
			req := kmsg.RequestForKey(key)
			req.SetVersion(v)
			if p, ok := req.(*kmsg.ProduceRequest); ok {
				p.Topics = []kmsg.ProduceRequestTopic{{Topic: "t", Partitions: []kmsg.ProduceRequestTopicPartition{{Records: plainBatch("a")}}}}
			}
			if m, ok := req.(*kmsg.MetadataRequest); ok {
				m.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("t")}}
			}
			f.Add(encode(req, 7))
		}
	}
	c := &conn{s: &Server{cfg: Config{MaxRequestSize: 1 << 20}}}
	f.Fuzz(func(t *testing.T, buf []byte) {
		sl, req, err := c.readRequest(bufio.NewReader(bytes.NewReader(buf)))
		if err == nil && sl == nil {
			t.Fatal("no slot and no error")
		}
		if p, ok := req.(*kmsg.ProduceRequest); ok {
			for _, rt := range p.Topics {
				for _, rp := range rt.Partitions {
					broker.SplitRecordBatches(rp.Records)
				}
			}
		}
	})
}
