package ledger

import (
	"bytes"
	"encoding/binary"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func newTestCache(t testing.TB, maxBytes int64, reg prometheus.Registerer) *Cache {
	t.Helper()
	c, err := NewCache(CacheConfig{MaxBytes: maxBytes, Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// entryFor returns n bytes that start with k, so a test can tell whose
// entry a Get returned.
func entryFor(k EntryKey, n int) []byte {
	b := make([]byte, max(n, 24))
	binary.BigEndian.PutUint64(b, k.ML)
	binary.BigEndian.PutUint64(b[8:], uint64(k.Ledger))
	binary.BigEndian.PutUint64(b[16:], uint64(k.Entry))
	return b[:n:n]
}

func checkGet(t testing.TB, c *Cache, k EntryKey, n int) bool {
	t.Helper()
	got, ok := c.Get(k)
	if ok && !bytes.Equal(got, entryFor(k, n)) {
		t.Fatalf("Get(%+v) returned another entry's bytes", k)
	}
	return ok
}

func TestCacheConfig(t *testing.T) {
	for _, n := range []int64{0, -1} {
		if _, err := NewCache(CacheConfig{MaxBytes: n}); err == nil {
			t.Errorf("MaxBytes %d: no error", n)
		}
	}
}

// The tail guarantee, single-threaded: with ristretto full of entries that
// readers keep hitting (so its admission policy prefers them to newcomers),
// every one of the newest entries that fit the recent tier is a hit.
func TestCacheTailWhenFull(t *testing.T) {
	const size = 1000
	cost := int64(size + entryOverhead)
	c := newTestCache(t, 400*cost, nil)
	ml := c.NewID()

	// Fill both tiers several times over, then make the survivors hot.
	var hot []EntryKey
	for i := range int64(2000) {
		c.Insert(EntryKey{ml, 1, i}, entryFor(EntryKey{ml, 1, i}, size))
		c.wait() // no dropped sets: the test wants ristretto full
	}
	for i := range int64(2000) {
		if k := (EntryKey{ml, 1, i}); checkGet(t, c, k, size) {
			hot = append(hot, k)
		}
	}
	for range 20 {
		for _, k := range hot {
			c.Get(k)
		}
	}

	n := int(c.recentMax / cost) // newest entries that must be hits
	for i := range int64(1000) {
		k := EntryKey{ml, 2, i}
		c.Insert(k, entryFor(k, size))
		for j := max(0, i-int64(n)+1); j <= i; j++ {
			if !checkGet(t, c, EntryKey{ml, 2, j}, size) {
				t.Fatalf("after inserting entry %d, entry %d (of the newest %d) missed", i, j, n)
			}
		}
	}
	c.wait()
	if s := c.Size(); s > c.recentMax*recentShare {
		t.Fatalf("Size %d > MaxBytes %d", s, c.recentMax*recentShare)
	}
	t.Logf("recent tier holds %d entries; %d entries left ristretto or were refused", n, int(readMetric(t, c, "magnetar_ledger_cache_evictions_total")))
}

// The tail guarantee under concurrent inserts. An entry e can only be pushed
// out of the recent tier by inserts that push after it; those all started
// before the Get that follows e's insert ends, and none had completed when
// e's insert began. So with c0 inserts completed before e's insert began and
// s1 started when its Get ended, at most s1-c0-1 entries went in after e,
// and if they and e fit the recent tier, the Get must hit. Each goroutine
// checks its newest entries this way after every insert.
func TestCacheTailConcurrent(t *testing.T) {
	const (
		goroutines = 8
		inserts    = 2000
		size       = 100
		history    = 16
	)
	cost := int64(size + entryOverhead)
	c := newTestCache(t, 4*1000*cost, nil) // recent tier: 1000 entries
	var started, completed atomic.Int64
	var checked atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			ml := c.NewID()
			type rec struct {
				k  EntryKey
				c0 int64
			}
			var recent []rec
			for i := range int64(inserts) {
				k := EntryKey{ml, 7, i}
				c0 := completed.Load()
				started.Add(1)
				c.Insert(k, entryFor(k, size))
				completed.Add(1)
				recent = append(recent, rec{k, c0})
				if len(recent) > history {
					recent = recent[1:]
				}
				for _, r := range recent {
					hit := checkGet(t, c, r.k, size)
					if after := started.Load() - r.c0 - 1; (after+1)*cost <= c.recentMax {
						checked.Add(1)
						if !hit {
							t.Errorf("entry %+v missed with at most %d entries inserted after it", r.k, after)
							return
						}
					}
				}
			}
		})
	}
	wg.Wait()
	// Most checks are decidable; if none were, the test proved nothing.
	if n := checked.Load(); n < goroutines*inserts {
		t.Fatalf("only %d checks decidable", n)
	}
	t.Logf("%d decidable checks", checked.Load())
}

// An entry read while recent and pushed out of the recent tier moves to
// ristretto, which admits it while it has room.
func TestCacheDemotion(t *testing.T) {
	const size = 744
	cost := int64(size + entryOverhead) // 1000
	c := newTestCache(t, 4*10*cost, nil)
	if c.recentMax != 10*cost {
		t.Fatalf("recentMax %d", c.recentMax)
	}
	for i := range int64(10) {
		c.Insert(EntryKey{1, 1, i}, entryFor(EntryKey{1, 1, i}, size))
		if !checkGet(t, c, EntryKey{1, 1, i}, size) {
			t.Fatalf("entry %d missed right after Insert", i)
		}
	}
	if got := c.recentBytes.Load(); got != 10*cost {
		t.Fatalf("recent tier has %d bytes, want %d", got, 10*cost)
	}
	c.Insert(EntryKey{1, 1, 10}, entryFor(EntryKey{1, 1, 10}, size))
	if _, ok := c.index.load(EntryKey{1, 1, 0}); ok {
		t.Fatal("oldest entry still in the recent tier")
	}
	c.wait()
	for i := range int64(11) {
		if !checkGet(t, c, EntryKey{1, 1, i}, size) {
			t.Fatalf("entry %d missed", i)
		}
	}
	if got, want := c.Size(), 11*cost; got != want {
		t.Fatalf("Size %d, want %d", got, want)
	}
	if got := c.entries(); got != 11 {
		t.Fatalf("entries %d, want 11", got)
	}
}

func TestCacheByteBound(t *testing.T) {
	const maxBytes = 1 << 20
	c := newTestCache(t, maxBytes, nil)
	var wg sync.WaitGroup
	done := make(chan struct{})
	var peak atomic.Int64
	wg.Go(func() { // sample while inserting
		for {
			select {
			case <-done:
				return
			default:
			}
			if s := c.Size(); s > peak.Load() {
				peak.Store(s)
			}
			runtime.Gosched()
		}
	})
	var inserted atomic.Int64
	var ins sync.WaitGroup
	for range 4 {
		ins.Go(func() {
			ml := c.NewID()
			for i := int64(0); inserted.Load() < 20*maxBytes; i++ {
				n := rand.IntN(8 << 10)
				switch i % 500 {
				case 1:
					n = maxBytes / 2 // too big for the recent tier
				case 2:
					n = 2 * maxBytes // too big for the cache
				}
				c.Insert(EntryKey{ml, 1, i}, make([]byte, n))
				inserted.Add(int64(n))
			}
		})
	}
	ins.Wait()
	close(done)
	wg.Wait()
	c.wait()
	if p := peak.Load(); p > maxBytes {
		t.Fatalf("Size reached %d > MaxBytes %d", p, maxBytes)
	}
	if s := c.Size(); s > maxBytes || s < maxBytes/2 {
		t.Fatalf("Size %d after inserting %d bytes, want in (MaxBytes/2, MaxBytes]", s, inserted.Load())
	}
	if n := c.entries(); n <= 0 || n > maxBytes/entryOverhead {
		t.Fatalf("entries %d", n)
	}
}

// Size is an honest account of memory: the heap the cache holds, entries
// included, stays close to it.
func TestCacheMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap")
	}
	const maxBytes = 8 << 20
	heap := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	c := newTestCache(t, maxBytes, nil)
	base := heap()
	for i := range int64(2 * maxBytes / 1024) {
		c.Insert(EntryKey{1, 1, i}, make([]byte, 1024))
		if i%1000 == 0 {
			c.wait()
		}
	}
	c.wait()
	used, size := heap()-base, c.Size()
	t.Logf("heap %d bytes for Size %d (%.2f)", used, size, float64(used)/float64(size))
	if used > maxBytes*11/10 {
		t.Fatalf("cache holds %d bytes of heap, MaxBytes %d", used, maxBytes)
	}
	runtime.KeepAlive(c)
}

func TestCacheKeys(t *testing.T) {
	c := newTestCache(t, 1<<20, nil)
	a, b := c.NewID(), c.NewID()
	for _, ml := range []uint64{a, b} {
		k := EntryKey{ml, 5, 9}
		c.Insert(k, entryFor(k, 64))
	}
	for _, ml := range []uint64{a, b} {
		if !checkGet(t, c, EntryKey{ml, 5, 9}, 64) {
			t.Fatalf("ML %d missed", ml)
		}
	}
	if _, ok := c.Get(EntryKey{b + 1, 5, 9}); ok {
		t.Fatal("hit for an ML id never inserted")
	}

	// In ristretto, under a colliding hash, another key's entry is a miss.
	k, other := EntryKey{a, 6, 1}, EntryKey{b, 6, 1}
	c.lfu.Set(k.hash(), lfuValue{key: other, data: entryFor(other, 64)}, 1)
	c.wait()
	if _, ok := c.Get(k); ok {
		t.Fatal("hit on another key's entry under the same hash")
	}
}

func TestCacheDuplicateInsert(t *testing.T) {
	c := newTestCache(t, 1<<20, nil)
	k := EntryKey{1, 1, 1}
	c.Insert(k, entryFor(k, 100))
	c.Insert(k, entryFor(k, 100))
	if got, want := c.Size(), int64(100+entryOverhead); got != want || c.entries() != 1 {
		t.Fatalf("Size %d entries %d, want %d and 1", got, c.entries(), want)
	}
}

func TestCacheNewID(t *testing.T) {
	c := newTestCache(t, 1<<20, nil)
	const goroutines, each = 8, 1000
	ids := make(chan uint64, goroutines*each)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				ids <- c.NewID()
			}
		})
	}
	wg.Wait()
	close(ids)
	seen := make(map[uint64]bool)
	for id := range ids {
		if seen[id] {
			t.Fatalf("id %d returned twice", id)
		}
		seen[id] = true
	}
}

// readMetric returns the value of the named metric of c's registry (the
// cache registered with reg, or, for caches without one, a private registry).
func readMetric(t testing.TB, c *Cache, name string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	for _, m := range c.collectors {
		reg.MustRegister(m)
	}
	return gather(t, reg, name)
}

func gather(t testing.TB, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// Once ristretto is full, an entry nobody read while it was recent is
// dropped when pushed out (counted as an eviction), not handed to
// ristretto; while ristretto has room, every entry goes there.
func TestCacheUnreadNotDemoted(t *testing.T) {
	const size = 744
	cost := int64(size + entryOverhead)
	c := newTestCache(t, 4*10*cost, nil) // recent tier 10 entries, ristretto 30
	// Unread entries fill ristretto while it has room.
	for i := range int64(40) {
		c.Insert(EntryKey{1, 1, i}, entryFor(EntryKey{1, 1, i}, size))
		c.wait()
	}
	if got := c.lfuSets.Load(); got != 30 {
		t.Fatalf("%d entries handed to ristretto while it had room, want 30", got)
	}
	// Full: of the next twenty pushed out (30..49), only the five read go
	// there.
	for i := int64(40); i < 60; i++ {
		c.Insert(EntryKey{1, 1, i}, entryFor(EntryKey{1, 1, i}, size))
		if i < 50 && i%2 == 0 {
			checkGet(t, c, EntryKey{1, 1, i}, size) // read while recent
		}
		c.wait()
	}
	if got := c.lfuSets.Load(); got != 30+5 {
		t.Errorf("%d entries handed to ristretto, want 35 (30 while it had room, then the 5 read)", got)
	}
	for i := int64(30); i < 50; i++ {
		if i >= 40 && i%2 == 0 {
			continue
		}
		if checkGet(t, c, EntryKey{1, 1, i}, size) {
			t.Errorf("entry %d (unread, pushed out into a full ristretto) is a hit", i)
		}
	}
}

func TestCacheMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	const size = 744
	cost := int64(size + entryOverhead)
	c := newTestCache(t, 4*10*cost, reg)
	want := func(name string, v float64) {
		t.Helper()
		if got := gather(t, reg, name); got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
	k := EntryKey{1, 1, 0}
	c.Insert(k, entryFor(k, size))
	c.Get(k)
	c.Get(k)
	c.Get(EntryKey{1, 1, 99})
	want("magnetar_ledger_cache_hits_total", 2)
	want("magnetar_ledger_cache_misses_total", 1)
	want("magnetar_ledger_cache_size_bytes", float64(cost))
	want("magnetar_ledger_cache_entries", 1)
	want("magnetar_ledger_cache_evictions_total", 0)

	// 40 entries (each read while recent) fill both tiers; 10 more evict
	// 10 from ristretto.
	for i := range int64(50) {
		c.Insert(EntryKey{1, 2, i}, entryFor(EntryKey{1, 2, i}, size))
		c.Get(EntryKey{1, 2, i})
		c.wait()
	}
	want("magnetar_ledger_cache_size_bytes", float64(40*cost))
	want("magnetar_ledger_cache_entries", 40)
	want("magnetar_ledger_cache_evictions_total", 11)

	if _, err := NewCache(CacheConfig{MaxBytes: 1, Registerer: reg}); err == nil {
		t.Fatal("second cache registered the same metrics")
	}
	c.Close()
	newTestCache(t, 1, reg) // fails unless Close unregistered the metrics
}

func TestCacheClose(t *testing.T) {
	c := newTestCache(t, 1<<20, nil)
	k := EntryKey{1, 1, 1}
	c.Insert(k, entryFor(k, 10))
	c.Close()
	c.Close()
	c.Insert(EntryKey{1, 1, 2}, entryFor(k, 10))
	if _, ok := c.Get(k); ok {
		t.Fatal("Get hit after Close")
	}
	if c.Size() != 0 || c.entries() != 0 {
		t.Fatalf("Size %d entries %d after Close", c.Size(), c.entries())
	}
	c.wait()
}

// Close while other goroutines insert and read: ristretto alone would panic
// (send on closed channel) in a Get or Set that races with its Close.
func TestCacheCloseConcurrent(t *testing.T) {
	for range 20 {
		c := newTestCache(t, 64<<10, nil)
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := int64(0); !c.closed.Load(); i++ {
					k := EntryKey{uint64(g), 1, i}
					c.Insert(k, make([]byte, 512))
					c.Get(k) // read while recent: demoted to ristretto later
					c.Get(EntryKey{uint64(g), 1, i / 2})
				}
			})
		}
		for i := int64(0); c.lfuSets.Load() < 100; i++ {
			c.Get(EntryKey{9, 9, i})
			runtime.Gosched()
		}
		c.Close()
		wg.Wait()
	}
}

func BenchmarkCacheInsert(b *testing.B) {
	c := newTestCache(b, 64<<20, nil)
	entry := make([]byte, 1024)
	b.SetBytes(int64(len(entry)))
	b.ReportAllocs()
	var i int64
	for b.Loop() {
		c.Insert(EntryKey{1, 1, i}, entry)
		i++
	}
}

func BenchmarkCacheInsertParallel(b *testing.B) {
	c := newTestCache(b, 64<<20, nil)
	entry := make([]byte, 1024)
	b.SetBytes(int64(len(entry)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ml := c.NewID()
		for i := int64(0); pb.Next(); i++ {
			c.Insert(EntryKey{ml, 1, i}, entry)
		}
	})
}

// Tailing reads: hits in the recent tier.
func BenchmarkCacheGetHit(b *testing.B) {
	c := newTestCache(b, 64<<20, nil)
	for i := range int64(1024) {
		c.Insert(EntryKey{1, 1, i}, make([]byte, 1024))
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for i := int64(0); pb.Next(); i++ {
			if _, ok := c.Get(EntryKey{1, 1, i & 1023}); !ok {
				b.Fatal("miss")
			}
		}
	})
}

// Catch-up reads: hits in ristretto.
func BenchmarkCacheGetHitLFU(b *testing.B) {
	c := newTestCache(b, 64<<20, nil)
	n := int64(2 * c.recentMax / (1024 + entryOverhead)) // recent tier full twice over
	for i := range n {
		c.Insert(EntryKey{1, 1, i}, make([]byte, 1024))
		c.Get(EntryKey{1, 1, i}) // read while recent, so demoted
		if i%1000 == 0 {
			c.wait()
		}
	}
	c.wait()
	for i := range int64(1024) {
		if _, ok := c.index.load(EntryKey{1, 1, i}); ok {
			b.Fatal("entry still in the recent tier")
		}
		if _, ok := c.Get(EntryKey{1, 1, i}); !ok {
			b.Fatal("ristretto did not admit an entry")
		}
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for i := int64(0); pb.Next(); i++ {
			if _, ok := c.Get(EntryKey{1, 1, i & 1023}); !ok {
				b.Fatal("miss")
			}
		}
	})
}

// The recent index's runs: entries found by id within a run, inserts
// older than a run's first refused, gaps left as holes, an insert far
// past a run's end starting it again, a duplicate found, and a run
// emptied by deletes leaving the index (no run kept per ledger ever
// seen).
func TestRecentIndexRuns(t *testing.T) {
	var x recentIndex
	entry := func(ml uint64, ledger, id int64) (EntryKey, *recentEntry) {
		k := EntryKey{ml, ledger, id}
		return k, &recentEntry{key: k}
	}
	stored := map[EntryKey]*recentEntry{}
	for _, id := range []int64{10, 11, 12, 14} { // 13: a hole
		k, e := entry(1, 7, id)
		if got, dup := x.loadOrStore(k, e); dup || got != e {
			t.Fatalf("store %v: dup %t", k, dup)
		}
		stored[k] = e
	}
	k2, e2 := entry(2, 7, 10) // another managed ledger, same ledger id
	x.loadOrStore(k2, e2)
	stored[k2] = e2
	for k, e := range stored {
		if got, ok := x.load(k); !ok || got != e {
			t.Errorf("load %v: %v %t", k, got, ok)
		}
	}
	for _, id := range []int64{9, 13, 15} {
		if _, ok := x.load(EntryKey{1, 7, id}); ok {
			t.Errorf("load of entry %d, never stored, found it", id)
		}
	}
	k, e := entry(1, 7, 11)
	if got, dup := x.loadOrStore(k, e); !dup || got != stored[k] {
		t.Errorf("a duplicate insert: %v, dup %t", got, dup)
	}
	if _, dup := x.loadOrStore(entry(1, 7, 9)); !dup {
		t.Error("an entry older than its run stored")
	}
	k, e = entry(1, 7, 13)
	if _, dup := x.loadOrStore(k, e); dup {
		t.Error("a hole not filled")
	}
	stored[k] = e

	// Deleting a wrong entry under a key does nothing; deleting them all
	// in order drops the run.
	x.compareAndDelete(EntryKey{1, 7, 10}, &recentEntry{})
	if _, ok := x.load(EntryKey{1, 7, 10}); !ok {
		t.Error("compareAndDelete of another entry deleted it")
	}
	for id := int64(10); id <= 14; id++ {
		k := EntryKey{1, 7, id}
		x.compareAndDelete(k, stored[k])
		if _, ok := x.load(k); ok {
			t.Errorf("entry %d found after its delete", id)
		}
	}
	x.mu.RLock()
	runs := len(x.runs)
	x.mu.RUnlock()
	if runs != 1 {
		t.Errorf("%d runs left, want 1 (managed ledger 2's)", runs)
	}
	// A new insert after the run left makes a new one.
	k, e = entry(1, 7, 20)
	if _, dup := x.loadOrStore(k, e); dup {
		t.Error("insert after the run left refused")
	}
	// Far past a run's end: the run starts again there.
	k, e = entry(1, 7, 20+maxRunGap+2)
	x.loadOrStore(k, e)
	if got, ok := x.load(k); !ok || got != e {
		t.Error("an entry far past its run's end not found")
	}
	if _, ok := x.load(EntryKey{1, 7, 20}); ok {
		t.Error("the run's old entries kept after it started again")
	}
}
