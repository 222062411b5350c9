package kafka

import (
	"math/bits"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Record buffers of fetch responses are recycled: a consumer reading from
// storage has each partition's buffer (up to its 1 MiB default) allocated
// for every fetch, and the runtime zeroes every fresh allocation — a tenth
// of the broker's CPU on such a read before this pool. A buffer goes back
// to the pool once its response is written (writeLoop).
//
// Buffers come in power-of-two sizes from minRecordBuf to maxRecordBuf;
// larger requests are allocated and dropped as before.
const (
	minRecordBufShift = 16 // 64 KiB
	maxRecordBufShift = 24 // 16 MiB
)

var recordBufs [maxRecordBufShift - minRecordBufShift + 1]sync.Pool

// recordBufClass is the pool index of a buffer of capacity at least n, or
// -1 if n is beyond the largest.
func recordBufClass(n int) int {
	shift := minRecordBufShift
	if n > 1<<minRecordBufShift {
		shift = bits.Len(uint(n - 1))
	}
	if shift > maxRecordBufShift {
		return -1
	}
	return shift - minRecordBufShift
}

// growRecordBuf returns buf with room for need more bytes, its contents
// kept: buf itself if it has the room, else a pooled (or new) buffer with
// buf's bytes copied in, buf going back to the pool.
func growRecordBuf(buf []byte, need int) []byte {
	if cap(buf)-len(buf) >= need {
		return buf
	}
	n := len(buf) + need
	var nb []byte
	if c := recordBufClass(n); c < 0 {
		nb = make([]byte, 0, n)
	} else if p, ok := recordBufs[c].Get().(*[]byte); ok {
		nb = (*p)[:0]
	} else {
		nb = make([]byte, 0, 1<<(c+minRecordBufShift))
	}
	nb = append(nb, buf...)
	putRecordBuf(buf)
	return nb
}

// putRecordBuf returns buf to the pool if it came from it (its capacity is
// one of the pool's sizes). The caller must not use buf afterwards.
func putRecordBuf(buf []byte) {
	c := cap(buf)
	if c < 1<<minRecordBufShift || c&(c-1) != 0 {
		return
	}
	if i := recordBufClass(c); i >= 0 {
		buf = buf[:0]
		recordBufs[i].Put(&buf)
	}
}

// releaseRecords returns the record buffers of a written fetch response
// to the pool.
func releaseRecords(recs []*records) {
	for _, r := range recs {
		r.release()
	}
}

// flattenFetch sets the RecordBatches of fr's partitions from recs (one
// per partition, in order), for encoding by kmsg.
func flattenFetch(fr *kmsg.FetchResponse, recs []*records) {
	n := 0
	for i := range fr.Topics {
		t := &fr.Topics[i]
		for j := range t.Partitions {
			r := recs[n]
			n++
			// Empty, not null: librdkafka refuses a null record set
			// ("invalid MessageSetSize -1").
			t.Partitions[j].RecordBatches = r.appendTo(make([]byte, 0, r.size))
		}
	}
}
