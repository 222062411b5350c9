package broker

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"strconv"

	"github.com/magnetar-io/magnetar/ledger"
)

// Key_Shared routing. A key's hash is Murmur3 (32-bit, seed 0) of the key
// bytes, as Pulsar computes it, reduced to the range 0..65535 (hashRangeSize).
// Entries without a key are routed by the key "NONE_KEY".
//
// Auto-split mode places every consumer at hashPoints points of a hash
// ring (the hash of "<consumer name><i>"): a key goes to the consumer at
// the first point at or after its hash, wrapping around. A consumer
// joining or leaving moves only the keys next to its points. Sticky mode
// uses the ranges each consumer asked for; they may not overlap.

const (
	hashRangeSize = 65536
	hashPoints    = 100
	noneKey       = "NONE_KEY"
)

type ringPoint struct {
	hash uint32
	c    *Consumer
}

// hashRing maps key hashes to consumers. err is set if the consumers'
// sticky ranges conflict.
type hashRing struct {
	points []ringPoint // auto split, sorted by hash
	sticky bool
	ranges []stickyRange // sticky, sorted by start
	err    error
}

type stickyRange struct {
	HashRange
	c *Consumer
}

// maxKeyedBatch bounds what is decompressed to find a Kafka batch's key.
const maxKeyedBatch = 64 << 20

func keyHash(e ledger.Entry) uint32 {
	var key []byte
	switch e.Header.Format {
	case ledger.FormatPulsar:
		if md, _, err := ParseEntry(e.Payload); err == nil {
			key = entryKey(md)
		}
	case ledger.FormatKafka:
		key, _ = FirstRecordKey(e.Payload, maxKeyedBatch)
	}
	if len(key) == 0 {
		key = []byte(noneKey)
	}
	return murmur3(key) % hashRangeSize
}

// ringWith builds the ring for consumers (all of one mode: the first
// consumer's decides).
func (s *Subscription) ringWith(cs []*Consumer) *hashRing {
	r := &hashRing{}
	if len(cs) == 0 {
		return r
	}
	r.sticky = cs[0].ranges != nil
	for _, c := range cs {
		if (c.ranges != nil) != r.sticky {
			r.err = fmt.Errorf("consumer %s: sticky and auto-split Key_Shared consumers cannot share subscription %s", c.name, s.name)
			return r
		}
		if r.sticky {
			for _, hr := range c.ranges {
				if hr.Start < 0 || hr.End >= hashRangeSize || hr.Start > hr.End {
					r.err = fmt.Errorf("consumer %s: hash range [%d, %d] outside [0, %d]", c.name, hr.Start, hr.End, hashRangeSize-1)
					return r
				}
				r.ranges = append(r.ranges, stickyRange{hr, c})
			}
			continue
		}
		for i := range hashPoints {
			r.points = append(r.points, ringPoint{murmur3([]byte(c.name+strconv.Itoa(i))) % hashRangeSize, c})
		}
	}
	slices.SortStableFunc(r.points, func(a, b ringPoint) int { return int(a.hash) - int(b.hash) })
	slices.SortFunc(r.ranges, func(a, b stickyRange) int { return int(a.Start) - int(b.Start) })
	for i := 1; i < len(r.ranges); i++ {
		if r.ranges[i].Start <= r.ranges[i-1].End {
			a, b := r.ranges[i-1], r.ranges[i]
			r.err = fmt.Errorf("hash range [%d, %d] of consumer %s overlaps [%d, %d] of consumer %s",
				b.Start, b.End, b.c.name, a.Start, a.End, a.c.name)
			return r
		}
	}
	return r
}

// pick returns the consumer of hash h; nil if none (no consumers, or in
// sticky mode no range holds h).
func (r *hashRing) pick(h uint32) *Consumer {
	if r == nil {
		return nil
	}
	if r.sticky {
		i, _ := slices.BinarySearchFunc(r.ranges, int32(h), func(x stickyRange, t int32) int {
			switch {
			case x.End < t:
				return -1
			case x.Start > t:
				return 1
			}
			return 0
		})
		if i < len(r.ranges) && r.ranges[i].Start <= int32(h) && int32(h) <= r.ranges[i].End {
			return r.ranges[i].c
		}
		return nil
	}
	if len(r.points) == 0 {
		return nil
	}
	i, _ := slices.BinarySearchFunc(r.points, h, func(p ringPoint, t uint32) int { return int(p.hash) - int(t) })
	if i == len(r.points) {
		i = 0
	}
	return r.points[i].c
}

// murmur3 is MurmurHash3 x86 32-bit with seed 0 (the hash Pulsar uses for
// Key_Shared), written out here: the common Go package for it does
// unchecked pointer arithmetic that the race detector's checkptr refuses.
func murmur3(data []byte) uint32 {
	const c1, c2 = 0xcc9e2d51, 0x1b873593
	var h uint32
	n := len(data)
	for len(data) >= 4 {
		k := binary.LittleEndian.Uint32(data)
		data = data[4:]
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
		h = bits.RotateLeft32(h, 13)
		h = h*5 + 0xe6546b64
	}
	var k uint32
	switch len(data) {
	case 3:
		k ^= uint32(data[2]) << 16
		fallthrough
	case 2:
		k ^= uint32(data[1]) << 8
		fallthrough
	case 1:
		k ^= uint32(data[0])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
	}
	h ^= uint32(n)
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}
