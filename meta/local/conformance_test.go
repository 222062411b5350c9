package local_test

import (
	"testing"

	"github.com/magnetar-io/magnetar/meta"
	"github.com/magnetar-io/magnetar/meta/local"
	"github.com/magnetar-io/magnetar/meta/metatest"
)

// harness opens every session on one store in a fresh directory.
func harness(tb testing.TB) metatest.Harness {
	first, err := local.Open(tb.TempDir(), local.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { first.Close() })
	return metatest.Harness{
		Name: "local",
		Open: func(t testing.TB) meta.Store {
			s, err := first.NewSession()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		Expire: func(t testing.TB, s meta.Store) { s.(*local.Store).ExpireSession() },
	}
}

func TestConformance(t *testing.T) { metatest.Run(t, harness(t)) }

func BenchmarkLocal(b *testing.B) { metatest.RunBenchmarks(b, harness(b)) }
