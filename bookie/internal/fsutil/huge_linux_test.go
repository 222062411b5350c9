package fsutil

import (
	"testing"
	"unsafe"
)

// A huge buffer is whole huge pages, aligned to one, usable, known as huge
// until freed; freeing anything else does nothing.
func TestHugeBuffer(t *testing.T) {
	for _, n := range []int{1, HugePageSize, HugePageSize + 1} {
		b := HugeBuffer(n)
		if b == nil {
			t.Fatalf("HugeBuffer(%d): nil", n)
		}
		want := (n + HugePageSize - 1) / HugePageSize * HugePageSize
		if len(b) != want || cap(b) != want || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%HugePageSize != 0 {
			t.Fatalf("HugeBuffer(%d): len %d, cap %d, or not aligned to %d", n, len(b), cap(b), HugePageSize)
		}
		b[0], b[len(b)-1] = 1, 2
		if !IsHugeBuffer(b) || !IsHugeBuffer(b[:10]) {
			t.Fatalf("HugeBuffer(%d) not known as huge", n)
		}
		if IsHugeBuffer(b[4096:]) {
			t.Fatal("a slice from inside a huge buffer taken for one")
		}
		if !FreeHugeBuffer(b[:1]) {
			t.Fatalf("FreeHugeBuffer of HugeBuffer(%d): false", n)
		}
		if IsHugeBuffer(b) || FreeHugeBuffer(b) {
			t.Fatal("a freed huge buffer is still known, or freed twice")
		}
	}
	heap := AlignedBuffer(HugePageSize, HugePageSize)
	if IsHugeBuffer(heap) || FreeHugeBuffer(heap) {
		t.Fatal("a heap buffer taken for a huge one")
	}
	heap[0] = 1 // still ours
}
