package kafka

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/broker"
)

// randomFetch builds a fetch response of version v with random topics,
// partitions, errors and aborted transactions, and records of random
// batches (small ones copied, large ones borrowed), returning it, the
// records, and the batches each partition must hold (base offsets set).
func randomFetch(rng *rand.Rand, v int16) (*kmsg.FetchResponse, []*records, [][]byte) {
	fr := kmsg.NewPtrFetchResponse()
	fr.Version = v
	fr.ThrottleMillis = rng.Int32N(100)
	fr.ErrorCode = int16(rng.IntN(2))
	fr.SessionID = rng.Int32()
	var recs []*records
	var want [][]byte
	for range rng.IntN(3) + 1 {
		t := kmsg.NewFetchResponseTopic()
		t.Topic = strings.Repeat("t", rng.IntN(300)) // past a one-byte varint length
		for p := range rng.IntN(4) {
			fp := kmsg.NewFetchResponseTopicPartition()
			fp.Partition, fp.ErrorCode = int32(p), int16(rng.IntN(3))
			fp.HighWatermark, fp.LastStableOffset, fp.LogStartOffset = rng.Int64(), rng.Int64(), rng.Int64()
			fp.PreferredReadReplica = rng.Int32N(3) - 1
			switch rng.IntN(3) {
			case 0: // nil: a null array
			case 1:
				fp.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{}
			case 2:
				for range rng.IntN(3) + 1 {
					a := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
					a.ProducerID, a.FirstOffset = rng.Int64(), rng.Int64()
					fp.AbortedTransactions = append(fp.AbortedTransactions, a)
				}
			}
			t.Partitions = append(t.Partitions, fp)
			r := &records{}
			var all []byte
			for range rng.IntN(5) {
				size := 61 + rng.IntN(200)
				if rng.IntN(2) == 0 {
					size = borrowMin + rng.IntN(3*borrowMin)
				}
				batch := make([]byte, size)
				for i := range batch {
					batch[i] = byte(rng.Uint32())
				}
				base := rng.Int64()
				if rng.IntN(4) == 0 {
					// A Pulsar entry's conversion: own bytes appended
					// outside addBatch.
					r.reserve(len(batch))
					from := len(r.own)
					r.own = append(r.own, batch...)
					r.ownAdded(from)
					all = append(all, batch...)
					continue
				}
				r.addBatch(batch, base)
				all = binary.BigEndian.AppendUint64(all, uint64(base))
				all = append(all, batch[8:]...)
			}
			recs = append(recs, r)
			want = append(want, all)
		}
		fr.Topics = append(fr.Topics, t)
	}
	return fr, recs, want
}

func TestFetchFrameMatchesKmsg(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for v := int16(4); v <= 12; v++ {
		for i := range 50 {
			t.Run(fmt.Sprintf("v%d/%d", v, i), func(t *testing.T) {
				fr, recs, want := randomFetch(rng, v)
				if !plainFetch(fr) {
					t.Fatal("a plain response is not plainFetch")
				}
				_, bufs := appendFetchFrame(nil, nil, 77, fr, recs)
				var got []byte
				for _, b := range bufs {
					got = append(got, b...)
				}
				// What kmsg writes for the same response, records
				// flattened into RecordBatches.
				flattenFetch(fr, recs)
				sl := &slot{key: fr.Key(), version: v, correlation: 77, resp: fr}
				wantFrame := (&conn{}).appendFrame(nil, sl)
				if !bytes.Equal(got, wantFrame) {
					t.Fatalf("frame differs from kmsg's: %d bytes, kmsg %d", len(got), len(wantFrame))
				}
				// And kmsg reads the batches back with their base offsets.
				n := 0
				for _, rt := range fr.Topics {
					for _, p := range rt.Partitions {
						if !bytes.Equal(p.RecordBatches, want[n]) {
							t.Fatalf("partition %d: records differ from the batches added", n)
						}
						n++
					}
				}
				// Large batches were written from where they lay, not copied.
				for _, r := range recs {
					for _, p := range r.pieces {
						if p.b == nil {
							continue
						}
						if !containsSlice(bufs, p.b) {
							t.Fatal("a borrowed batch is not among the written buffers")
						}
					}
				}
			})
		}
	}
}

func containsSlice(bufs [][]byte, b []byte) bool {
	for _, x := range bufs {
		if len(x) == len(b) && unsafe.SliceData(x) == unsafe.SliceData(b) {
			return true
		}
	}
	return false
}

func TestRecordsMarkAndReset(t *testing.T) {
	small := bytes.Repeat([]byte{1}, 100)
	large := bytes.Repeat([]byte{2}, borrowMin)
	var r records
	r.addBatch(small, 5)
	m := r.mark()
	r.addBatch(small, 6)
	r.addBatch(large, 7)
	if r.size != 200+borrowMin || len(r.pieces) != 2 {
		t.Fatalf("after three batches: size %d, %d pieces; want %d and 2 (small ones merged, the large one borrowed)", r.size, len(r.pieces), 200+borrowMin)
	}
	r.reset(m)
	want := binary.BigEndian.AppendUint64(nil, 5)
	want = append(want, small[8:]...)
	if got := r.appendTo(nil); !bytes.Equal(got, want) || r.size != 100 {
		t.Fatalf("after reset: %d bytes (size %d), want the first batch alone", len(got), r.size)
	}
	r.addBatch(large, 9)
	if got := r.appendTo(nil); len(got) != 100+borrowMin || binary.BigEndian.Uint64(got[100:]) != 9 {
		t.Fatalf("after reset and a large batch: %d bytes", len(got))
	}
	r.clear()
	if r.size != 0 || len(r.appendTo(nil)) != 0 {
		t.Fatal("clear left records")
	}
}

func TestTaggedFetchIsNotPlain(t *testing.T) {
	fr := kmsg.NewPtrFetchResponse()
	fr.Version = 12
	tp := kmsg.NewFetchResponseTopicPartition()
	ft := kmsg.NewFetchResponseTopic()
	ft.Partitions = append(ft.Partitions, tp)
	fr.Topics = append(fr.Topics, ft)
	if !plainFetch(fr) {
		t.Fatal("a response with defaults is not plain")
	}
	fr.Topics[0].Partitions[0].CurrentLeader.LeaderID = 3
	if plainFetch(fr) {
		t.Fatal("a response with a current leader set is plain")
	}
	fr.Topics[0].Partitions[0].CurrentLeader.LeaderID = -1
	fr.Version = 13
	if plainFetch(fr) {
		t.Fatal("a v13 response is plain")
	}
}

// TestFetchServesLargeBatchesWithTheirOffsets produces batches on both
// sides of borrowMin and fetches them at the versions clients use: each
// comes back whole, its base offset the one it was stored at, its CRC
// valid.
func TestFetchServesLargeBatchesWithTheirOffsets(t *testing.T) {
	s := startServer(t, nil)
	c := s.dial(t)
	createTopic(t, c, "big", 1)
	big := strings.Repeat("v", borrowMin)
	batches := [][]string{{"a", "b"}, {big, big + "2"}, {"c"}, {big + "3"}}
	var bases []int64
	for _, vs := range batches {
		p := produce(t, c, "big", plainBatch(vs...))
		if p.ErrorCode != 0 {
			t.Fatalf("produce: error %d", p.ErrorCode)
		}
		bases = append(bases, p.BaseOffset)
	}
	for _, v := range []int16{4, 11, 12} {
		req := fetchReq("big", 0, 0)
		req.Version = v
		resp := roundTrip[*kmsg.FetchResponse](c, req)
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 || p.HighWatermark != 6 {
			t.Fatalf("v%d: error %d high watermark %d", v, p.ErrorCode, p.HighWatermark)
		}
		bs, err := broker.SplitRecordBatches(p.RecordBatches)
		if err != nil || len(bs) != len(batches) {
			t.Fatalf("v%d: %d batches (%v), want %d", v, len(bs), err, len(batches))
		}
		for i, b := range bs {
			_, recs, err := broker.ReadRecords(b.Bytes, 1<<20)
			if err != nil || b.Header.BaseOffset != bases[i] || len(recs) != len(batches[i]) {
				t.Fatalf("v%d batch %d: base offset %d, %d records (%v); want %d and %d", v, i, b.Header.BaseOffset, len(recs), err, bases[i], len(batches[i]))
			}
			for j, r := range recs {
				if string(r.Value) != batches[i][j] {
					t.Fatalf("v%d batch %d record %d: value of %d bytes differs", v, i, j, len(r.Value))
				}
			}
		}
	}
}

// AppendFetchFrame writes each partition's pieces where appendFetchFrame
// writes its records, from where they lie, and refuses a response it
// cannot write by pieces or pieces for another number of partitions.
func TestAppendFetchFrameWritesPieces(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for v := int16(4); v <= 12; v++ {
		fr, recs, _ := randomFetch(rng, v)
		batches := make([][][]byte, len(recs))
		for i, r := range recs {
			for _, p := range r.pieces {
				batches[i] = append(batches[i], r.bytes(p))
			}
		}
		_, bufs, err := AppendFetchFrame(nil, nil, 9, fr, batches)
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		_, want := appendFetchFrame(nil, nil, 9, fr, recs)
		if got, w := bytes.Join(bufs, nil), bytes.Join(want, nil); !bytes.Equal(got, w) {
			t.Fatalf("v%d: %d bytes, want %d as appendFetchFrame writes them", v, len(got), len(w))
		}
		for _, pieces := range batches {
			for _, b := range pieces {
				if len(b) > 0 && !containsSlice(bufs, b) {
					t.Fatalf("v%d: a piece was copied, not written from where it lies", v)
				}
			}
		}
		if _, _, err := AppendFetchFrame(nil, nil, 9, fr, append(batches, nil)); err == nil {
			t.Errorf("v%d: pieces for one partition more than the response has: no error", v)
		}
	}
	fr, _, _ := randomFetch(rng, 12)
	fr.Version = 13
	if _, _, err := AppendFetchFrame(nil, nil, 9, fr, nil); err == nil {
		t.Error("version 13 (topic ids) written by pieces")
	}
}
