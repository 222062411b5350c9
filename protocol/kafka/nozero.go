package kafka

import (
	"unsafe"
)

// A produce's records are read into a buffer of their own (readProduce),
// a fresh allocation of up to a megabyte per partition. make zeroes it,
// and the socket's bytes then overwrite every one of those zeros: under
// a 4-partition produce at 600 MB/s the zeroing was a seventh of the
// broker's CPU. makeNoZero allocates without zeroing, as the standard
// library's bytes.Join does internally (and Pebble, which the bookie
// uses, through the same runtime function).
//
// The contract: every byte of the buffer is written before any is read
// or the buffer escapes. readProduce reads the records into the tail and
// the managed ledger writes its headers into the room in front
// (ledger.AppendInPlace) before the entry is stored; a request that fails
// to read drops its buffers.

//go:linkname mallocgc runtime.mallocgc
func mallocgc(size uintptr, typ unsafe.Pointer, needzero bool) unsafe.Pointer

// makeNoZero returns a byte slice of length n whose contents are
// undefined. Pointer-free memory (typ nil): the collector never scans it.
func makeNoZero(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(mallocgc(uintptr(n), nil, false)), n)
}
