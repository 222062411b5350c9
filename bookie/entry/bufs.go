package entry

import (
	"math/bits"
	"sync"
)

// Read buffers. A bookie reads each entry into a buffer of its own, and
// the runtime zeroes every fresh allocation before the read overwrites
// it: on a consumer catching up from storage that zeroing was a fifth of
// the broker's CPU. So entries of readBufMin bytes or more are read into
// recycled buffers. Whoever ends up holding such an entry alone (a
// Kafka fetch, once its response is written) may give the buffer back
// with Recycle; a buffer never given back is simply collected.
//
// Buffers come in eight sizes per power of two (at most 1/8 more than
// asked), from readBufMin to MaxSize; each size has its own sync.Pool.
// Builds with the race detector (every test run) fill a recycled buffer
// with poisonByte, so a use after Recycle shows as corrupt data.

const (
	readBufMinShift = 15 // 32 KiB: smaller allocations cost little to zero
	readBufMaxShift = 24 // MaxSize
	readBufSteps    = 8  // sizes per power of two
	poisonByte      = 0xdb
)

var readBufs [(readBufMaxShift - readBufMinShift) * readBufSteps]sync.Pool

// readBufClass returns the pool index and the size of the buffers that
// hold n bytes, or -1 if n is outside the pooled range.
func readBufClass(n int) (int, int) {
	if n <= 1<<readBufMinShift || n > 1<<readBufMaxShift {
		return -1, 0
	}
	k := bits.Len(uint(n - 1)) // 2^(k-1) < n <= 2^k
	step := 1 << (k - 1 - 3)   // eight steps from 2^(k-1) to 2^k
	j := (n - 1 - 1<<(k-1)) / step
	return (k-1-readBufMinShift)*readBufSteps + j, 1<<(k-1) + (j+1)*step
}

// NewReadBuf returns a buffer of n bytes to read an entry into, recycled
// if one of its size was given back. Its contents are undefined.
func NewReadBuf(n int) []byte {
	i, size := readBufClass(n)
	if i < 0 {
		return make([]byte, n)
	}
	if p, ok := readBufs[i].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, size)
}

// Recycle gives b back for reuse by NewReadBuf if its capacity is one of
// the pooled sizes (else it does nothing). The caller must hold b alone
// (no other slice of it in use anywhere) and must not use it afterwards.
func Recycle(b []byte) {
	i, size := readBufClass(cap(b))
	if i < 0 || size != cap(b) {
		return
	}
	b = b[:size]
	if poisonRecycled {
		for j := range b {
			b[j] = poisonByte
		}
	}
	b = b[:0]
	readBufs[i].Put(&b)
}
