package entry

import (
	"testing"
)

// Every pooled size holds what it is asked for with at most 1/8 to spare,
// is its own class, and the classes cover 32 KiB to MaxSize in order.
func TestReadBufClasses(t *testing.T) {
	last, lastSize := -1, 0
	for n := 1<<readBufMinShift + 1; n <= MaxSize; n += 509 {
		i, size := readBufClass(n)
		if i < 0 || i >= len(readBufs) {
			t.Fatalf("%d bytes: class %d of %d", n, i, len(readBufs))
		}
		if size < n || size-n > n/8 {
			t.Fatalf("%d bytes: buffers of %d", n, size)
		}
		if j, s := readBufClass(size); j != i || s != size {
			t.Fatalf("%d bytes: class %d of size %d, but that size is class %d of size %d", n, i, size, j, s)
		}
		if i < last || i == last && size != lastSize || i > last && size <= lastSize {
			t.Fatalf("%d bytes: class %d size %d after class %d size %d", n, i, size, last, lastSize)
		}
		last, lastSize = i, size
	}
	if last != len(readBufs)-1 || lastSize != MaxSize {
		t.Fatalf("largest class %d (size %d), want %d (size %d)", last, lastSize, len(readBufs)-1, MaxSize)
	}
	for _, n := range []int{0, 1, 1 << readBufMinShift, MaxSize + 1} {
		if i, _ := readBufClass(n); i >= 0 {
			t.Fatalf("%d bytes: pooled (class %d)", n, i)
		}
	}
}

// A recycled buffer is handed out again (sync.Pool may drop some, so a few
// tries); in race builds it is poisoned first. A buffer of another size is
// not taken, and not touched.
func TestRecycle(t *testing.T) {
	const n = 100 << 10
	reused := false
	for range 100 {
		b := NewReadBuf(n)
		if len(b) != n {
			t.Fatalf("NewReadBuf(%d): %d bytes", n, len(b))
		}
		b[0], b[n-1] = 1, 2
		Recycle(b)
		if poisonRecycled && (b[0] != poisonByte || b[n-1] != poisonByte) {
			t.Fatalf("recycled buffer not poisoned: % x … % x", b[0], b[n-1])
		}
		c := NewReadBuf(n - 100)
		if &c[0] == &b[0] {
			reused = true
			break
		}
	}
	if !reused {
		t.Fatal("no recycled buffer was handed out again in 100 tries")
	}

	foreign := make([]byte, n, n+1)
	foreign[0] = 7
	Recycle(foreign)
	if foreign[0] != 7 {
		t.Fatal("a buffer of no pooled size was poisoned")
	}
	for range 20 {
		if c := NewReadBuf(n); &c[0] == &foreign[0] {
			t.Fatal("a buffer of no pooled size was handed out")
		}
	}
}
