package kafka

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/brokertest"
	"github.com/magnetar-io/magnetar/ledger"
)

// Consumers catching up read from storage, whose read buffers a fetch
// recycles once its response is written (records.release), while the
// batches go out from those very buffers (borrowMin). Several consumers
// reading large batches at once from an in-process bookie, the cache too
// small to serve them, each get exactly what was produced, round after
// round: a buffer recycled before its response was written would show up
// as another batch's bytes (or, in race builds, as poison).
func TestCatchUpFetchesFromRecycledBuffers(t *testing.T) {
	const batches, perBatch, valueSize = 24, 2, 20 << 10
	s := startServerOn(t, brokertest.Options{Bootstrap: true, Local: true, Ledger: func(c *ledger.Config) {
		cache, err := ledger.NewCache(ledger.CacheConfig{MaxBytes: 64 << 10, Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cache.Close)
		c.Cache = cache
	}}, nil)
	c := s.dial(t)
	createTopic(t, c, "catchup", 1)
	value := func(off int64) string { return strings.Repeat(fmt.Sprintf("%05d", off), valueSize/5) }
	for b := range batches {
		var vs []string
		for i := range perBatch {
			vs = append(vs, value(int64(b*perBatch+i)))
		}
		if p := produce(t, c, "catchup", plainBatch(vs...)); p.ErrorCode != 0 {
			t.Fatalf("produce: error %d", p.ErrorCode)
		}
	}

	const consumers, rounds = 4, 3
	errs := make(chan error, consumers)
	var wg sync.WaitGroup
	for range consumers {
		cc := s.dial(t)
		wg.Go(func() {
			for round := range rounds {
				for off := int64(0); off < batches*perBatch; {
					next, err := fetchChecked(cc, "catchup", off, 100<<10, value)
					if err != nil {
						errs <- fmt.Errorf("round %d: %w", round, err)
						return
					}
					off = next
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// fetchChecked fetches partition 0 of topic from offset with the given
// partition limit, checks every record from offset on against want, and
// returns the next offset. It does not fail the test (consumers run on
// goroutines of their own).
func fetchChecked(c *client, topic string, offset int64, limit int32, want func(int64) string) (int64, error) {
	req := fetchReq(topic, offset, 0)
	req.Topics[0].Partitions[0].PartitionMaxBytes = limit
	req.MaxBytes = 4 * limit
	c.corr++
	if _, err := c.nc.Write(encode(req, c.corr)); err != nil {
		return 0, err
	}
	_, body, err := readFrame(c.nc)
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	if err == nil && resp.IsFlexible() {
		body, err = SkipTags(body)
	}
	if err == nil {
		err = resp.ReadFrom(body)
	}
	if err != nil {
		return 0, fmt.Errorf("fetch at %d: %w", offset, err)
	}
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != 0 {
		return 0, fmt.Errorf("fetch at %d: error %d", offset, p.ErrorCode)
	}
	bs, err := broker.SplitRecordBatches(p.RecordBatches)
	if err != nil || len(bs) == 0 {
		return 0, fmt.Errorf("fetch at %d: %d batches, %v", offset, len(bs), err)
	}
	next := offset
	for _, b := range bs {
		_, recs, err := broker.ReadRecords(b.Bytes, 1<<20)
		if err != nil {
			return 0, fmt.Errorf("fetch at %d: batch at %d: %w", offset, b.Header.BaseOffset, err)
		}
		for i, r := range recs {
			o := b.Header.BaseOffset + int64(i)
			if o < offset {
				continue
			}
			if o != next {
				return 0, fmt.Errorf("fetch at %d: offset %d after %d", offset, o, next-1)
			}
			if string(r.Value) != want(o) {
				return 0, fmt.Errorf("fetch at %d: offset %d holds %.15q…, want %.15q…", offset, o, r.Value, want(o))
			}
			next = o + 1
		}
	}
	if next == offset {
		return 0, errors.New("fetch made no progress")
	}
	return next, nil
}
