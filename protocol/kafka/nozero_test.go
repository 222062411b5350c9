package kafka

import (
	"bytes"
	"testing"
)

// makeNoZero gives buffers of the length asked for, each its own: a
// write to one shows in no other.
func TestMakeNoZero(t *testing.T) {
	var bufs [][]byte
	for i, n := range []int{0, 1, 100, 64 << 10, 1 << 20} {
		b := makeNoZero(n)
		if len(b) != n {
			t.Fatalf("makeNoZero(%d): length %d", n, len(b))
		}
		for j := range b {
			b[j] = byte(i)
		}
		bufs = append(bufs, b)
	}
	for i, b := range bufs {
		if !bytes.Equal(b, bytes.Repeat([]byte{byte(i)}, len(b))) {
			t.Fatalf("buffer %d (%d bytes) changed after the others were written", i, len(b))
		}
	}
}
