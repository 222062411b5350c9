package entry

import (
	"bytes"
	"errors"
	"hash/crc32"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	h := Header{Ledger: 7, Entry: 42, LAC: 41, Length: 1 << 40}
	b := Encode([]byte("prefix"), h, []byte("hello"))
	b = b[len("prefix"):]
	got, err := Verify(b)
	if err != nil || got != h || !bytes.Equal(Payload(b), []byte("hello")) {
		t.Fatalf("Verify = %+v, %v; payload %q", got, err, Payload(b))
	}
	none := Encode(nil, Header{Ledger: 1, LAC: -1}, nil)
	if got, err := Verify(none); err != nil || got.LAC != -1 || len(Payload(none)) != 0 {
		t.Fatalf("empty payload: %+v %v", got, err)
	}
}

func TestCorruptionDetected(t *testing.T) {
	b := Encode(nil, Header{Ledger: 1, Entry: 2, LAC: 1, Length: 5}, []byte("hello"))
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		if _, err := Verify(c); !errors.Is(err, ErrChecksum) {
			t.Fatalf("flipping byte %d: %v", i, err)
		}
	}
	if _, err := Verify(b[:HeaderSize-1]); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short entry: %v", err)
	}
	if _, err := Verify(make([]byte, MaxSize+1)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("oversized entry: %v", err)
	}
}

func FuzzVerify(f *testing.F) {
	f.Add(Encode(nil, Header{Ledger: 1, Entry: 2, LAC: 1, Length: 3}, []byte("abc")))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Verify(b)
		if err == nil && !bytes.Equal(Encode(nil, h, Payload(b)), b) {
			t.Fatalf("verified entry does not re-encode to itself")
		}
	})
}

func TestEncodeInPlace(t *testing.T) {
	h := Header{Ledger: 7, Entry: 42, LAC: 41, Length: 1 << 40}
	buf := append(make([]byte, HeaderSize), "hello"...)
	if got, want := EncodeInPlace(buf, h), Encode(nil, h, []byte("hello")); !bytes.Equal(got, want) {
		t.Fatalf("EncodeInPlace = %x, Encode = %x", got, want)
	}
}

// EncodeInPlaceKnown gives the entry Encode gives, whatever part of the
// payload its known tail covers; a wrong tail CRC makes an entry Verify
// refuses; a tail outside the payload panics.
func TestEncodeInPlaceKnown(t *testing.T) {
	h := Header{Ledger: 7, Entry: 42, LAC: 41, Length: 1 << 40}
	for _, n := range []int{0, 1, 6, 1000, 1 << 20} {
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(i*7 + n)
		}
		want := Encode(nil, h, payload)
		for _, at := range []int{0, min(6, n), n / 2, n} {
			buf := append(make([]byte, HeaderSize), payload...)
			from := HeaderSize + at
			got := EncodeInPlaceKnown(buf, h, from, crc32.Checksum(buf[from:], castagnoli))
			if !bytes.Equal(got, want) {
				t.Fatalf("%d-byte payload, tail from %d: EncodeInPlaceKnown differs from Encode", n, at)
			}
			if n > 0 {
				bad := EncodeInPlaceKnown(append(make([]byte, HeaderSize), payload...), h, from, crc32.Checksum(buf[from:], castagnoli)^1)
				if _, err := Verify(bad); !errors.Is(err, ErrChecksum) {
					t.Fatalf("%d-byte payload, tail from %d, wrong tail CRC: Verify = %v", n, at, err)
				}
			}
		}
	}
	for _, from := range []int{HeaderSize - 1, HeaderSize + 6} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("tail from %d of a %d-byte buffer: no panic", from, HeaderSize+5)
				}
			}()
			EncodeInPlaceKnown(make([]byte, HeaderSize+5), h, from, 0)
		}()
	}
}

// PayloadChecksum is the checksum of the payload's bytes, for payloads
// empty to large.
func TestPayloadChecksum(t *testing.T) {
	for _, n := range []int{0, 1, 35, 4096, 1<<20 + 7} {
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(i*31 + n)
		}
		e := Encode(nil, Header{Ledger: 3, Entry: int64(n), LAC: 2, Length: 99}, payload)
		if got, want := PayloadChecksum(e), crc32.Checksum(payload, castagnoli); got != want {
			t.Fatalf("%d-byte payload: PayloadChecksum = %08x, want %08x", n, got, want)
		}
	}
}

// CopyChecksum copies an entry and sums it as Verify does, a piece at a
// time: entries shorter than a piece, across several, with a short last
// piece; a byte changed anywhere but in the stored checksum is caught.
func TestCopyChecksum(t *testing.T) {
	for _, n := range []int{0, 1, 100, copyPiece - HeaderSize, copyPiece, 3*copyPiece + 17} {
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(i*7 + i>>9)
		}
		src := Encode(nil, Header{Ledger: 3, Entry: int64(n), LAC: 2, Length: int64(n)}, payload)
		dst := make([]byte, len(src))
		sum := CopyChecksum(dst, src)
		if !bytes.Equal(dst, src) {
			t.Fatalf("%d-byte payload: not copied", n)
		}
		if h, err := VerifySum(dst, sum); err != nil || h.Entry != int64(n) {
			t.Fatalf("%d-byte payload: VerifySum = %+v, %v", n, h, err)
		}
		for _, i := range []int{0, 31, HeaderSize, len(src) / 2, len(src) - 1} {
			if i >= 32 && i < HeaderSize || i >= len(src) {
				continue
			}
			c := bytes.Clone(src)
			c[i] ^= 0x10
			if _, err := VerifySum(dst, CopyChecksum(dst, c)); !errors.Is(err, ErrChecksum) {
				t.Fatalf("%d-byte payload, byte %d changed: %v", n, i, err)
			}
		}
	}
	short := make([]byte, HeaderSize-1)
	if _, err := VerifySum(short, CopyChecksum(short, make([]byte, HeaderSize-1))); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short entry: %v", err)
	}
}

// BenchmarkReadCopy: taking entries of 640 KiB (a Kafka batch) out of
// read buffers the CPU's caches do not hold into recycled buffers they do
// not hold either, and checking them: a copy then Verify, or CopyChecksum
// then VerifySum.
func BenchmarkReadCopy(b *testing.B) {
	const size = 640 << 10
	srcs := make([][]byte, 128) // 80 MiB: beyond the caches
	for i := range srcs {
		srcs[i] = Encode(nil, Header{Ledger: 1, Entry: int64(i)}, make([]byte, size))
	}
	dsts := make([][]byte, 48)
	for i := range dsts {
		dsts[i] = make([]byte, len(srcs[0]))
	}
	for _, bc := range []struct {
		name string
		read func(dst, src []byte) error
	}{
		{"copy-then-verify", func(dst, src []byte) error { copy(dst, src); _, err := Verify(dst); return err }},
		{"copy-checksum", func(dst, src []byte) error { _, err := VerifySum(dst, CopyChecksum(dst, src)); return err }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(srcs[0])))
			i := 0
			for b.Loop() {
				if err := bc.read(dsts[i%len(dsts)], srcs[i%len(srcs)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
