package kafka

import (
	"bytes"
	"testing"
)

func TestRecordBufPool(t *testing.T) {
	buf := growRecordBuf(nil, 10)
	if len(buf) != 0 || cap(buf) != 1<<minRecordBufShift {
		t.Fatalf("first buffer: len %d cap %d, want 0 and %d", len(buf), cap(buf), 1<<minRecordBufShift)
	}
	buf = append(buf, "hello"...)
	if same := growRecordBuf(buf, 100); &same[0] != &buf[0] {
		t.Fatal("a buffer with room was replaced")
	}
	big := growRecordBuf(buf, 1<<minRecordBufShift)
	if !bytes.Equal(big, []byte("hello")) || cap(big) != 2<<minRecordBufShift {
		t.Fatalf("grown buffer %q, cap %d; want hello and %d", big, cap(big), 2<<minRecordBufShift)
	}
	if huge := growRecordBuf(nil, 1<<maxRecordBufShift+1); cap(huge) != 1<<maxRecordBufShift+1 {
		t.Fatalf("beyond the pool: cap %d", cap(huge))
	}
	for _, n := range []int{1, 1 << minRecordBufShift, 1<<minRecordBufShift + 1, 1 << maxRecordBufShift} {
		if c := recordBufClass(n); c < 0 || 1<<(c+minRecordBufShift) < n {
			t.Errorf("class of %d: %d", n, c)
		}
	}
	if c := recordBufClass(1<<maxRecordBufShift + 1); c != -1 {
		t.Errorf("class beyond the largest: %d", c)
	}
	// Odd capacities are not pooled (they did not come from the pool).
	putRecordBuf(make([]byte, 0, 3<<minRecordBufShift))
	putRecordBuf(nil)
}
