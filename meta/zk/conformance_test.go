package zk_test

import (
	"sync"
	"testing"

	"github.com/magnetar-io/magnetar/meta"
	"github.com/magnetar-io/magnetar/meta/metatest"
	"github.com/magnetar-io/magnetar/meta/zk"
)

// harness opens every session on one chroot of the run and remembers each
// store's fault dialer, through which Expire cuts it off.
func harness() metatest.Harness {
	chroot := runRoot + "/conformance"
	var (
		mu      sync.Mutex
		dialers = make(map[meta.Store]*faultDialer)
	)
	return metatest.Harness{
		Name: "zk",
		Open: func(t testing.TB) meta.Store {
			s, fd := openStore(t, chroot, zk.Options{})
			mu.Lock()
			dialers[s] = fd
			mu.Unlock()
			t.Cleanup(func() {
				mu.Lock()
				delete(dialers, s)
				mu.Unlock()
			})
			return s
		},
		Expire: func(t testing.TB, s meta.Store) {
			t.Helper()
			mu.Lock()
			fd := dialers[s]
			mu.Unlock()
			if fd == nil {
				t.Fatalf("Expire: store %p was not opened by this harness", s)
			}
			expire(t, s, fd, testSessionTimeout)
		},
	}
}

func TestConformance(t *testing.T) {
	metatest.Run(t, harness())
}

func BenchmarkZK(b *testing.B) {
	metatest.RunBenchmarks(b, harness())
}
