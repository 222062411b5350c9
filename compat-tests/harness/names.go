package harness

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
)

// maxNameBase bounds the part of a name taken from the test name.
const maxNameBase = 60

// Name returns a name unique to this call, derived from the test's name:
// lower case letters, digits and '-' only (valid in Pulsar topic and
// subscription names and Kafka topic names), ending in a random suffix so
// that names never collide across tests, repeated runs or restarts.
func Name(tb testing.TB) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(tb.Name()) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	base := strings.TrimSuffix(b.String(), "-")
	if len(base) > maxNameBase {
		base = strings.TrimSuffix(base[:maxNameBase], "-")
	}
	var r [4]byte
	rand.Read(r[:])
	return base + "-" + hex.EncodeToString(r[:])
}
