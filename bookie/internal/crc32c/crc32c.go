// Package crc32c combines CRC-32C (Castagnoli) checksums: the checksum
// of a concatenation from the checksums of its parts, without reading
// the bytes again. An add's payload is checksummed by the entry format
// and again inside the journal's record; with Combine the journal's
// checksum of a large entry costs a few hundred operations instead of a
// pass over its bytes.
//
// The arithmetic is over polynomials with coefficients in GF(2), in the
// bit order CRC-32C uses (reflected: bit 31 holds x^0, bit 0 x^31). The
// CRC of a‖b is the CRC of a multiplied by x^(8·len(b)) modulo the CRC
// polynomial, plus (XOR) the CRC of b; the initial value and the final
// XOR of the standard CRC cancel out in that sum.
package crc32c

import "sync/atomic"

// poly is the Castagnoli polynomial, reflected, without its x^32 term.
const poly = 0x82f63b78

// Combine returns the CRC-32C of a‖b, given crcA, the CRC-32C of a,
// crcB, that of b, and lenB = len(b). Since XOR is its own inverse it
// also takes a prefix off: Combine(crcA, crcAB, lenB) is the CRC-32C of
// b when crcAB is that of a‖b.
func Combine(crcA, crcB uint32, lenB int) uint32 {
	return mulMod(powerFor(uint64(lenB)), crcA) ^ crcB
}

// powers remembers x^(8n) for lengths combined lately, in a slot picked by
// n: a producer's messages or batches are often of a few sizes, and the
// power takes several multiplications (about 160 ns for a 1 KiB message,
// Combine running three times on each add) where a hit takes none. A
// slot holds n<<32 | x^(8n); a power is never 0, so an empty slot never
// matches. Slots are overwritten freely: a reader sees a whole old or a
// whole new pair.
var powers [256]atomic.Uint64

// powerFor returns x^(8n) modulo the polynomial.
func powerFor(n uint64) uint32 {
	if n >= 1<<32 {
		return xPow8n(n)
	}
	slot := &powers[(n^n>>8)&(uint64(len(powers))-1)]
	if v := slot.Load(); v>>32 == n && uint32(v) != 0 {
		return uint32(v)
	}
	p := xPow8n(n)
	slot.Store(n<<32 | uint64(p))
	return p
}

// mulMod returns a·b modulo the polynomial.
func mulMod(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 { // a's terms, x^0 first
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 { // b·x: x^31 becomes x^32, which is the polynomial
			b = b>>1 ^ poly
		} else {
			b >>= 1
		}
	}
	return p
}

// squares[k] is x^(2^k) modulo the polynomial.
var squares = func() (s [64]uint32) {
	s[0] = 1 << 30 // x^1
	for k := 1; k < len(s); k++ {
		s[k] = mulMod(s[k-1], s[k-1])
	}
	return s
}()

// xPow8n returns x^(8n) modulo the polynomial: the product of x^(2^k)
// over the bits k of 8n.
func xPow8n(n uint64) uint32 {
	p := uint32(1) << 31 // x^0
	for k := 3; n != 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = mulMod(squares[k], p)
		}
	}
	return p
}
