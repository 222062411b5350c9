package main

import (
	"math"
	"math/bits"
	"time"
)

// latencyHist is a log-linear histogram of durations for `magnetar perf`:
// values below 2·histSub ns are counted exactly; above, each power of two is
// cut into histSub buckets of equal width, so a quantile is reported within
// 1/histSub (3.1%) of the true sample, and recording is O(1) with a fixed
// 15 KiB of memory however many samples come.
type latencyHist struct {
	counts   [histBuckets]uint64
	n        uint64
	sum      time.Duration
	min, max time.Duration
}

const (
	histSubBits = 5
	histSub     = 1 << histSubBits
	// Bucket indexes of a uint64 run up to (64-histSubBits)<<histSubBits + histSub - 1.
	histBuckets = (65 - histSubBits) << histSubBits
)

// histBucket is the bucket of v nanoseconds.
func histBucket(v uint64) int {
	if v < histSub {
		return int(v)
	}
	shift := bits.Len64(v) - histSubBits - 1
	return (shift+1)<<histSubBits + int(v>>shift) - histSub
}

// histBucketHigh is the largest value that falls in bucket i.
func histBucketHigh(i int) uint64 {
	if i < 2*histSub {
		return uint64(i)
	}
	shift := i>>histSubBits - 1
	low := uint64(i&(histSub-1)+histSub) << shift
	return low + 1<<shift - 1
}

// Record adds one sample; negative durations count as 0.
func (h *latencyHist) Record(d time.Duration) {
	d = max(d, 0)
	h.counts[histBucket(uint64(d))]++
	if h.n == 0 || d < h.min {
		h.min = d
	}
	h.max = max(h.max, d)
	h.n++
	h.sum += d
}

// Merge adds o's samples to h.
func (h *latencyHist) Merge(o *latencyHist) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// Count is the number of samples.
func (h *latencyHist) Count() uint64 { return h.n }

// Max is the largest sample, 0 if none.
func (h *latencyHist) Max() time.Duration { return h.max }

// Mean is the average sample, 0 if none.
func (h *latencyHist) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}

// Quantile returns the q-quantile (0 < q ≤ 1; 0.99 for p99): the smallest
// sample that at least q of the samples do not exceed, rounded up to the top
// of its bucket and kept within [Min, Max]. 0 if there are no samples.
func (h *latencyHist) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	// The epsilon keeps float error from pushing an exact rank (0.99 × 100)
	// to the next sample.
	rank := uint64(math.Ceil(q*float64(h.n) - 1e-9))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		if seen += c; seen >= rank {
			v := time.Duration(min(histBucketHigh(i), uint64(math.MaxInt64)))
			return min(max(v, h.min), h.max)
		}
	}
	return h.max
}
