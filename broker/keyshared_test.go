package broker

import "testing"

// Reference values of MurmurHash3 x86 32-bit, seed 0 (as published with
// the algorithm and computed by other implementations).
func TestMurmur3(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint32
	}{
		{"", 0},
		{"a", 0x3c2569b2},
		{"abc", 0xb3dd93fa},
		{"abcd", 0x43ed676a},
		{"hello", 0x248bfa47},
		{"Hello, world!", 0xc0363e43},
		{"The quick brown fox jumps over the lazy dog", 0x2e4ff723},
	} {
		if got := murmur3([]byte(tc.in)); got != tc.want {
			t.Errorf("murmur3(%q) = %#x, want %#x", tc.in, got, tc.want)
		}
	}
}
