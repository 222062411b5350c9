package kafka

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/broker"
)

// heldOffsets returns the offsets read ahead of and the bytes reserved.
func (ra *readAhead) heldOffsets() ([]int64, int64) {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	var offs []int64
	for k := range ra.held {
		offs = append(offs, k.offset)
	}
	slices.Sort(offs)
	return offs, ra.bytes
}

// produceBatches produces n batches of 3 records to partition 0 of topic
// and returns every value in offset order.
func produceBatches(t *testing.T, c *client, topic string, n int) []string {
	t.Helper()
	var all []string
	for i := range n {
		vs := []string{fmt.Sprintf("b%d-0", i), fmt.Sprintf("b%d-1", i), fmt.Sprintf("b%d-2", i)}
		if p := produce(t, c, topic, plainBatch(vs...)); p.ErrorCode != 0 {
			t.Fatalf("produce: error %d", p.ErrorCode)
		}
		all = append(all, vs...)
	}
	return all
}

// fetchSome fetches partition 0 of topic from offset with a small
// partition limit, and returns the values from offset on and the next
// offset.
func fetchSome(t *testing.T, c *client, topic string, offset int64, limit int32) ([]string, int64) {
	t.Helper()
	req := fetchReq(topic, offset, 0)
	req.Topics[0].Partitions[0].PartitionMaxBytes = limit
	resp := roundTrip[*kmsg.FetchResponse](c, req)
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != 0 {
		t.Fatalf("fetch at %d: error %d", offset, p.ErrorCode)
	}
	bs, err := broker.SplitRecordBatches(p.RecordBatches)
	if err != nil || len(bs) == 0 {
		t.Fatalf("fetch at %d: %d batches, %v", offset, len(bs), err)
	}
	var vs []string
	next := offset
	for _, b := range bs {
		_, recs, err := broker.ReadRecords(b.Bytes, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range recs {
			if o := b.Header.BaseOffset + int64(i); o >= offset {
				vs = append(vs, string(r.Value))
				next = o + 1
			}
		}
	}
	return vs, next
}

// A consumer that is behind has what follows each fetch read ahead,
// readAheadDepth reads deep, and the next fetches take it: the values come
// back as produced, what is held starts where the last fetch ended, and
// none is left once the consumer has caught up.
//
// A fetch also reads entries it cannot serve within its limit (it reads
// 1, 2, 4... at a time); those are held for the next fetch rather than
// read again, so the consumer's fetches and read-aheads together read
// each entry from storage once.
func TestReadAheadServesTheNextFetch(t *testing.T) {
	s := startServer(t, nil)
	c := s.dial(t)
	createTopic(t, c, "ra", 1)
	const batches = 30
	want := produceBatches(t, c, "ra", batches)
	var got []string
	off := int64(0)
	for fetches := 0; off < int64(len(want)); fetches++ {
		if fetches > len(want) {
			t.Fatal("no progress")
		}
		// A limit of 200 bytes serves two batches of about 97 bytes; the
		// fetch reads three (one, then two), so the third is left over.
		vs, next := fetchSome(t, c, "ra", off, 200)
		got = append(got, vs...)
		held, _ := s.srv.ahead.heldOffsets()
		// What is left over, then the read-aheads.
		if next < int64(len(want)) && (len(held) == 0 || held[0] != next || len(held) > 1+readAheadDepth) {
			t.Fatalf("after the fetch at %d (next %d): held from %v, want from %d on, at most %d (the ones before taken)", off, next, held, next, 1+readAheadDepth)
		}
		off = next
	}
	if !slices.Equal(got, want) {
		t.Fatalf("values read with read-ahead differ from those produced:\n%q\nwant\n%q", got, want)
	}
	if held, bytes := s.srv.ahead.heldOffsets(); len(held) != 0 || bytes != 0 {
		t.Fatalf("caught up, yet read ahead of %v (%d bytes)", held, bytes)
	}
	if n := s.srv.ahead.entriesRead.Load(); n != batches {
		t.Fatalf("%d entries read from storage to consume %d: some were read more than once", n, batches)
	}
}

// A read-ahead that is read goes on to the next: after the first fetch
// (two batches served, the third read past the limit and held), the
// read-ahead of two batches after it is followed by others of two, up to
// readAheadDepth of them, and the fetches after take each without
// reading.
func TestReadAheadsFollowEachOther(t *testing.T) {
	s := startServer(t, nil)
	c := s.dial(t)
	createTopic(t, c, "chain", 1)
	want := produceBatches(t, c, "chain", 10)
	vs, next := fetchSome(t, c, "chain", 0, 200)
	if next != 6 {
		t.Fatalf("the first fetch served up to %d, want 6 (two batches)", next)
	}
	wantHeld := []int64{6} // left over, then the read-aheads
	for i := range readAheadDepth {
		wantHeld = append(wantHeld, 9+6*int64(i))
	}
	wantRead := int64(3 + 2*readAheadDepth) // by the fetch, then ahead
	deadline := time.Now().Add(10 * time.Second)
	for {
		held, _ := s.srv.ahead.heldOffsets()
		read := s.srv.ahead.entriesRead.Load()
		if slices.Equal(held, wantHeld) && read == wantRead {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the first fetch, held %v and %d entries read; want %v and %d", held, read, wantHeld, wantRead)
		}
		time.Sleep(time.Millisecond)
	}
	got := vs
	for off := next; off < 21; {
		vs, off = fetchSome(t, c, "chain", off, 200)
		got = append(got, vs...)
	}
	if !slices.Equal(got, want[:len(got)]) {
		t.Fatalf("values %q, want %q", got, want[:len(got)])
	}
	// The fetches from 6 on took what was held, and the read-aheads they
	// started read on: no entry was read twice.
	if n := s.srv.ahead.entriesRead.Load(); n > 10 {
		t.Fatalf("%d entries read in all, more than the 10 produced", n)
	}
}

// What a fetch reads past its limit is held for the fetch going on from
// it, and that fetch serves it without reading it again.
func TestFetchHoldsWhatItReadPastItsLimit(t *testing.T) {
	// Room for the batch left over, not for a read-ahead of two.
	s := startServer(t, func(c *Config) { c.ReadAheadSize = 150 })
	c := s.dial(t)
	createTopic(t, c, "left", 1)
	produceBatches(t, c, "left", 3)
	_, next := fetchSome(t, c, "left", 0, 200)
	if next != 6 {
		t.Fatalf("the first fetch served up to %d, want 6 (two batches)", next)
	}
	held, _ := s.srv.ahead.heldOffsets()
	if !slices.Equal(held, []int64{6}) {
		t.Fatalf("after the first fetch, held %v; want [6], the batch read past the limit", held)
	}
	if n := s.srv.ahead.entriesRead.Load(); n != 3 {
		t.Fatalf("the first fetch read %d entries, want 3 (one, then two)", n)
	}
	vs, next := fetchSome(t, c, "left", 6, 200)
	if !slices.Equal(vs, []string{"b2-0", "b2-1", "b2-2"}) || next != 9 {
		t.Fatalf("the second fetch served %q up to %d, want batch 2", vs, next)
	}
	if n := s.srv.ahead.entriesRead.Load(); n != 3 {
		t.Fatalf("%d entries read after the second fetch, want still 3: the held batch was read again", n)
	}
	if held, bytes := s.srv.ahead.heldOffsets(); len(held) != 0 || bytes != 0 {
		t.Fatalf("all served, yet %v held (%d bytes)", held, bytes)
	}
}

func TestReadAheadBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int64
	}{
		{"off", -1},
		{"over the limit", 50}, // less than a batch
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, func(c *Config) { c.ReadAheadSize = tc.size })
			c := s.dial(t)
			createTopic(t, c, "t", 1)
			produceBatches(t, c, "t", 10)
			fetchSome(t, c, "t", 0, 200)
			if held, _ := s.srv.ahead.heldOffsets(); len(held) != 0 {
				t.Fatalf("read-ahead size %d, yet read ahead of %v", tc.size, held)
			}
		})
	}
	t.Run("dropped when not taken", func(t *testing.T) {
		s := startServer(t, nil)
		s.srv.ahead.ttl = 50 * time.Millisecond
		c := s.dial(t)
		createTopic(t, c, "ttl", 1)
		produceBatches(t, c, "ttl", 10)
		_, next := fetchSome(t, c, "ttl", 0, 200)
		if held, bytes := s.srv.ahead.heldOffsets(); len(held) == 0 || held[0] != next || bytes <= 0 {
			t.Fatalf("after a fetch: held %v (%d bytes), want from %d on", held, bytes, next)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			held, bytes := s.srv.ahead.heldOffsets()
			if len(held) == 0 && bytes == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("read ahead of %v (%d bytes) still held long after its time to live", held, bytes)
			}
			time.Sleep(10 * time.Millisecond)
		}
		// The next fetch reads for itself.
		if vs, _ := fetchSome(t, c, "ttl", next, 200); len(vs) == 0 || vs[0] != fmt.Sprintf("b%d-%d", next/3, next%3) {
			t.Fatalf("fetch after the read-ahead was dropped: %q", vs)
		}
	})
}

// take waits for a read-ahead under way, and gives nothing for an offset
// nobody read ahead of or once its context ends.
func TestReadAheadTakeWaits(t *testing.T) {
	ra := newReadAhead(1<<20, testLogger())
	k := aheadKey{offset: 7}
	a := &ahead{ready: make(chan struct{}), size: 10, timer: time.NewTimer(time.Hour)}
	ra.held[k], ra.bytes = a, 10
	if _, ok := ra.take(context.Background(), nil, 8); ok {
		t.Fatal("took a read-ahead of another offset")
	}
	got := make(chan bool)
	go func() {
		_, ok := ra.take(context.Background(), nil, 7)
		got <- ok
	}()
	select {
	case <-got:
		t.Fatal("take returned before the read finished")
	case <-time.After(50 * time.Millisecond):
	}
	a.entries = nil // the read failed
	close(a.ready)
	if ok := <-got; ok {
		t.Fatal("a failed read-ahead was taken")
	}
	if held, bytes := ra.heldOffsets(); len(held) != 0 || bytes != 0 {
		t.Fatalf("after take: %v held, %d bytes", held, bytes)
	}
	b := &ahead{ready: make(chan struct{}), size: 5, timer: time.NewTimer(time.Hour)}
	ra.held[k], ra.bytes = b, 5
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok := ra.take(ctx, nil, 7); ok {
		t.Fatal("take with an ended context returned entries")
	}
}
