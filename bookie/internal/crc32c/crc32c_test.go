package crc32c

import (
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"testing"
)

// table and checksum are hash/crc32's CRC-32C, which Combine must agree
// with.
var table = crc32.MakeTable(crc32.Castagnoli)

func checksum(b []byte) uint32 { return crc32.Checksum(b, table) }

// Combine agrees with a pass over the bytes, for lengths from 0 to past
// a MiB, including the ends of each power of two.
func TestCombine(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 3<<20)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	lens := []int{0, 1, 2, 3, 7, 8, 31, 32, 36, 1000, 4095, 4096, 4097, 65535, 65536, 1 << 20, 1<<20 + 13}
	for range 200 {
		lens = append(lens, r.IntN(1<<21))
	}
	for _, lb := range lens {
		la := r.IntN(100)
		a, b := buf[:la], buf[la:la+lb]
		whole := checksum(buf[:la+lb])
		if got := Combine(checksum(a), checksum(b), lb); got != whole {
			t.Fatalf("len(a) %d, len(b) %d: Combine = %08x, want %08x", la, lb, got, whole)
		}
		if got := Combine(checksum(a), whole, lb); got != checksum(b) {
			t.Fatalf("len(a) %d, len(b) %d: prefix off = %08x, want %08x", la, lb, got, checksum(b))
		}
	}
}

// A damaged byte anywhere changes the combined checksum as it changes the
// one read off the bytes.
func TestCombineSeesDamage(t *testing.T) {
	a, b := []byte("header of the record"), make([]byte, 5000)
	for i := range b {
		b[i] = byte(i * 7)
	}
	good := Combine(checksum(a), checksum(b), len(b))
	b[4321] ^= 1
	if Combine(checksum(a), checksum(b), len(b)) == good {
		t.Fatal("a flipped bit left the combined checksum unchanged")
	}
}

func BenchmarkCombine1MiB(b *testing.B) {
	for b.Loop() {
		Combine(0x12345678, 0x9abcdef0, 1<<20+12345)
	}
}

func BenchmarkChecksum(b *testing.B) {
	for _, n := range []int{1 << 10, 4 << 10, 16 << 10, 1 << 20} {
		buf := make([]byte, n)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				checksum(buf)
			}
		})
	}
}

// TestPowerFor checks the remembered powers against the computed ones,
// with lengths that share a slot, repeat, and sit at the slots' edges.
func TestPowerFor(t *testing.T) {
	clear(powers[:])
	lens := []uint64{0, 1, 255, 256, 257, 1 << 16, 1<<32 - 1, 1 << 32, 1<<40 + 3}
	for i := range uint64(2000) {
		lens = append(lens, i*97%5000)
	}
	for round := range 3 {
		for _, n := range lens {
			if got, want := powerFor(n), xPow8n(n); got != want {
				t.Fatalf("round %d: powerFor(%d) = %08x, want %08x", round, n, got, want)
			}
		}
	}
	if powers[0].Load() == 0 {
		t.Fatal("no power was remembered")
	}
}

func BenchmarkCombine1KiB(b *testing.B) {
	for b.Loop() {
		Combine(0x12345678, 0x9abcdef0, 1100)
	}
}
