package ledger

// The entry cache: one per broker, shared by every managed ledger.
//
// It has two tiers, both bounded in bytes, together within MaxBytes:
//
//	Insert ──► recent tier (FIFO, MaxBytes/4) ──oldest out──► ristretto (TinyLFU, the rest)
//	Get    ──► recent tier, then ristretto
//
// Why not ristretto alone. Its Set is asynchronous: it hands the item to a
// buffered channel (Cache.setBuf) and a goroutine (Cache.processItems) applies
// it later, so a Get right after a Set misses until Wait. When that channel is
// full, Set drops the item and returns false. And when the cache is full its
// admission policy (defaultPolicy.Add) compares the new key's estimated
// frequency with sampled residents' and rejects the newcomer if it is lower; a
// just-appended entry has never been read, so it loses to anything catch-up
// readers have touched. Any of these would send a tailing reader to a bookie.
//
// So Insert puts the entry in the recent tier before it returns: an index
// of runs, one per managed ledger's bookie ledger, each a slice of its
// consecutive recent entries (recentIndex: a read takes two read locks
// and allocates nothing; a hash map over every entry, and sync.Map before
// it, cost an appender far more), and a FIFO ring for order, whose lock is
// held only to push and pop. An entry stays there until
// the entries inserted after it leave no room for it, so the newest entries
// whose costs add up to at most MaxBytes/4 are always hits. Entries pushed
// out move to ristretto, which serves slower readers (and offset lookups,
// which read headers) with what it admits — except, once ristretto is
// full, entries nobody read while recent: those are dropped. Its admission
// policy would refuse such a never-read newcomer in favour of residents
// that were read anyway, and the admission work for every appended entry
// cost a quarter of an appender's CPU.
// The move is a Set, so for a moment the entry may be in neither tier, and
// ristretto may drop or refuse it (counted as an eviction). An entry lives in
// one tier at a time, so the tiers' byte counts add up to at most MaxBytes.
// Entries too big for the recent tier go straight to ristretto, without the
// guarantee. Hits in the recent tier are not seen by ristretto's frequency
// sketch: ristretto ranks entries by catch-up reads only.
//
// Ristretto settings. Cost is len(entry)+entryOverhead, the bytes an entry
// really holds, so MaxCost is a byte bound; IgnoreInternalCost is set because
// ristretto's own addition (itemSize, the size of storeItem[any]) neither
// matches our value type nor counts the map and policy slots entryOverhead
// does. NumCounters is 10 per expected entry, assuming 1 KiB entries, within
// [minCounters, maxCounters]; the counters (about 4 bytes each) are a fixed
// cost outside MaxBytes. BufferItems is 64, as ristretto advises. Keys are a
// 64-bit hash of EntryKey; ristretto keeps no second hash for uint64 keys, so
// the value carries the full key and Get checks it.
//
// Metrics: magnetar_ledger_cache_{hits,misses,evictions}_total and
// magnetar_ledger_cache_{size_bytes,entries}. Hit ratio in PromQL:
//
//	rate(magnetar_ledger_cache_hits_total[5m]) /
//	  (rate(magnetar_ledger_cache_hits_total[5m]) + rate(magnetar_ledger_cache_misses_total[5m]))

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/prometheus/client_golang/prometheus"
)

const (
	// recentShare: the recent tier gets MaxBytes/recentShare.
	recentShare = 4
	// entryOverhead is what a cached entry costs besides its bytes: in the
	// recent tier its struct, sync.Map node and boxed key and its ring slot;
	// in ristretto its store map slot, policy map slot and buffered Item.
	// Measured at 170-260 bytes in either tier, depending on where the maps
	// are in their growth; TestCacheMemory checks the heap against Size.
	entryOverhead = 256
	// assumedEntrySize sizes ristretto's frequency sketch.
	assumedEntrySize = 1 << 10
	minCounters      = 1 << 12
	maxCounters      = 1 << 24
)

// EntryKey names an entry: ML is an id unique per open managed ledger (from
// NewID), then the bookie ledger and entry ids.
type EntryKey struct {
	ML            uint64
	Ledger, Entry int64
}

// hash mixes the key into ristretto's 64-bit key; its low bits pick
// ristretto's shard and sketch counters, so every bit must be mixed.
func (k EntryKey) hash() uint64 {
	return mix64(mix64(mix64(k.ML)^uint64(k.Ledger)) ^ uint64(k.Entry))
}

// mix64 is the MurmurHash3 64-bit finalizer.
func mix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// CacheConfig configures a Cache.
type CacheConfig struct {
	MaxBytes   int64                 // bound on cached entry bytes; required > 0
	Registerer prometheus.Registerer // metrics; nil = not registered
	Logger     *slog.Logger          // default slog.Default()
}

// Cache is the entry cache shared by all managed ledgers. It is safe for
// concurrent use. Entries are immutable: Insert retains the slice it is given
// and Get returns it, and neither the caller nor the cache modifies it.
type Cache struct {
	recentMax int64 // byte bound of the recent tier
	ids       atomic.Uint64
	closed    atomic.Bool

	// The recent tier. Invariants: ring holds its entries in insertion
	// order, and recentBytes, the sum of their costs, never exceeds
	// recentMax (both changed only under mu). index maps the key of every
	// entry in ring to it; an inserter adds its entry to index before
	// pushing it, and removes the entries it popped after handing them to
	// ristretto, so lookups find an entry from before it enters ring until
	// after it leaves. Readers take only read locks.
	mu          sync.Mutex
	ring        ring
	index       recentIndex
	recentBytes atomic.Int64
	recentLen   atomic.Int64

	// lfuMu keeps lfu open while it is in use: ristretto's Close closes
	// channels that a concurrent Get or Set would then send on and panic.
	// Read-locked around every lfu call, locked by Close.
	lfuMu     sync.RWMutex
	lfu       *ristretto.Cache[uint64, lfuValue]
	lfuSets   atomic.Int64 // Sets that returned true
	lfuExits  atomic.Int64 // values that left lfu (OnExit); lfuSets-lfuExits are its entries
	lfuBytes  atomic.Int64 // costs of those Sets minus those exits: what lfu holds or is about to
	lfuMax    int64
	hits      stripedCounter
	misses    stripedCounter
	evictions prometheus.Counter

	reg        prometheus.Registerer
	collectors []prometheus.Collector
}

// recentIndex maps keys to recent entries. A managed ledger appends the
// entries of a bookie ledger with consecutive ids, and the recent tier
// lets go of them oldest first, so the index keeps, per (ML, ledger), a
// run: the entries from the oldest still recent on, in a slice indexed
// by entry id. Inserting and letting go are a slice append and a slot
// cleared, not a hash map's insert and delete per entry: with one map
// over every recent entry (50,000 at 20,000 unbatched messages/s), its
// insert and delete were over half of Insert's time, a tenth of the
// broker's CPU at that load, probing past the slots that FIFO deletes
// leave behind. Lock order: mu, then a run's mu.
type recentIndex struct {
	mu   sync.RWMutex
	runs map[runKey]*recentRun
}

type runKey struct{ ml, ledger uint64 }

// recentRun holds a bookie ledger's recent entries: entries[i] is entry
// first+i, nil where none is (let go of, or never inserted). Its first
// slot is never nil while the run is in the index; dead is set when it
// leaves the index (empty), after which nothing is stored in it.
type recentRun struct {
	mu      sync.RWMutex
	first   int64
	entries []*recentEntry
	dead    bool
}

// maxRunGap bounds the nil slots an insert past a run's end adds: an
// entry id that far ahead starts the run again (managed ledgers insert
// in order, so this is a guard, not a case).
const maxRunGap = 1 << 16

func keyOfRun(k EntryKey) runKey { return runKey{k.ML, uint64(k.Ledger)} }

func (x *recentIndex) load(k EntryKey) (*recentEntry, bool) {
	x.mu.RLock()
	r := x.runs[keyOfRun(k)]
	x.mu.RUnlock()
	if r == nil {
		return nil, false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if i := k.Entry - r.first; i >= 0 && i < int64(len(r.entries)) {
		if e := r.entries[i]; e != nil {
			return e, true
		}
	}
	return nil, false
}

// loadOrStore stores e under k unless k is there; it returns the entry
// under k and whether it was there. An entry older than its run's first
// is reported there (it was let go of, or is about to be): the caller
// keeps it out of the recent tier.
func (x *recentIndex) loadOrStore(k EntryKey, e *recentEntry) (*recentEntry, bool) {
	rk := keyOfRun(k)
	for {
		x.mu.RLock()
		r := x.runs[rk]
		x.mu.RUnlock()
		if r == nil {
			x.mu.Lock()
			if r = x.runs[rk]; r == nil {
				if x.runs == nil {
					x.runs = map[runKey]*recentRun{}
				}
				r = &recentRun{first: k.Entry}
				x.runs[rk] = r
			}
			x.mu.Unlock()
		}
		r.mu.Lock()
		if r.dead { // emptied and dropped meanwhile: find or make its successor
			r.mu.Unlock()
			continue
		}
		old, there := r.store(k.Entry, e)
		r.mu.Unlock()
		return old, there
	}
}

// store does loadOrStore's work in r, locked.
func (r *recentRun) store(id int64, e *recentEntry) (*recentEntry, bool) {
	if len(r.entries) == 0 {
		r.first = id
	}
	i := id - r.first
	switch {
	case i < 0:
		return nil, true
	case i < int64(len(r.entries)):
		if old := r.entries[i]; old != nil {
			return old, true
		}
		r.entries[i] = e
	case i-int64(len(r.entries)) > maxRunGap:
		clear(r.entries)
		r.entries, r.first = append(r.entries[:0], e), id
	default:
		for int64(len(r.entries)) < i {
			r.entries = append(r.entries, nil)
		}
		r.entries = append(r.entries, e)
	}
	return e, false
}

// compareAndDelete deletes k if it maps to e; a run left empty leaves the
// index.
func (x *recentIndex) compareAndDelete(k EntryKey, e *recentEntry) {
	rk := keyOfRun(k)
	x.mu.RLock()
	r := x.runs[rk]
	x.mu.RUnlock()
	if r == nil {
		return
	}
	r.mu.Lock()
	if i := k.Entry - r.first; i >= 0 && i < int64(len(r.entries)) && r.entries[i] == e {
		r.entries[i] = nil
		for len(r.entries) > 0 && r.entries[0] == nil {
			r.entries = r.entries[1:]
			r.first++
		}
	}
	empty := len(r.entries) == 0
	r.mu.Unlock()
	if !empty {
		return
	}
	x.mu.Lock()
	r.mu.Lock()
	if len(r.entries) == 0 && !r.dead && x.runs[rk] == r {
		r.dead = true
		delete(x.runs, rk)
	}
	r.mu.Unlock()
	x.mu.Unlock()
}

func (x *recentIndex) clear() {
	x.mu.Lock()
	for _, r := range x.runs {
		r.mu.Lock()
		r.dead, r.entries = true, nil
		r.mu.Unlock()
	}
	x.runs = nil
	x.mu.Unlock()
}

// recentEntry is an entry in the recent tier. read is set by the first
// Get that finds it there.
type recentEntry struct {
	key  EntryKey
	data []byte
	read atomic.Bool
}

func (e *recentEntry) cost() int64 { return int64(len(e.data)) + entryOverhead }

// lfuValue is an entry in ristretto, with its key to detect hash collisions.
type lfuValue struct {
	key  EntryKey
	data []byte
}

// NewCache checks cfg, starts the cache and registers its metrics.
func NewCache(cfg CacheConfig) (*Cache, error) {
	if cfg.MaxBytes <= 0 {
		return nil, fmt.Errorf("ledger: CacheConfig.MaxBytes is %d, must be > 0", cfg.MaxBytes)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Cache{recentMax: cfg.MaxBytes / recentShare}
	lfuMax := cfg.MaxBytes - c.recentMax
	counters := min(max(10*(lfuMax/(assumedEntrySize+entryOverhead)), minCounters), maxCounters)
	lfu, err := ristretto.NewCache(&ristretto.Config[uint64, lfuValue]{
		NumCounters:        counters,
		MaxCost:            lfuMax,
		BufferItems:        64,
		IgnoreInternalCost: true,
		OnEvict:            func(*ristretto.Item[lfuValue]) { c.evicted() },
		OnReject:           func(*ristretto.Item[lfuValue]) { c.evicted() },
		OnExit: func(v lfuValue) {
			c.lfuExits.Add(1)
			c.lfuBytes.Add(-(int64(len(v.data)) + entryOverhead))
		},
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: entry cache: %w", err)
	}
	c.lfu, c.lfuMax = lfu, lfuMax
	c.ring.init(64)
	if err := c.register(cfg.Registerer); err != nil {
		lfu.Close()
		return nil, err
	}
	cfg.Logger.Info("ledger entry cache", "max_bytes", cfg.MaxBytes,
		"recent_bytes", c.recentMax, "lfu_bytes", lfuMax, "lfu_counters", counters)
	return c, nil
}

// NewID returns an id no other call on c returns, for EntryKey.ML.
func (c *Cache) NewID() uint64 { return c.ids.Add(1) }

// Insert caches entry under k. It retains entry, which the caller must not
// modify afterwards. Get(k) finds it at least until the entries inserted
// after it fill the recent tier (MaxBytes/4, counting entryOverhead per
// entry). Insert is meant for entries just appended: each one displaces the
// oldest recent entries, so inserting entries read for catch-up readers
// shortens how long the tail stays guaranteed. Inserting a key the recent
// tier holds does nothing.
func (c *Cache) Insert(k EntryKey, entry []byte) {
	if c.closed.Load() {
		return
	}
	e := &recentEntry{key: k, data: entry}
	if e.cost() > c.recentMax {
		c.demote([]*recentEntry{e})
		return
	}
	if _, dup := c.index.loadOrStore(k, e); dup {
		return
	}
	var buf [8]*recentEntry
	out := buf[:0]
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		c.index.compareAndDelete(k, e)
		return
	}
	for c.recentBytes.Load()+e.cost() > c.recentMax {
		old := c.ring.pop()
		c.recentBytes.Add(-old.cost())
		out = append(out, old)
	}
	c.ring.push(e)
	c.recentBytes.Add(e.cost())
	c.recentLen.Store(int64(c.ring.len))
	c.mu.Unlock()
	kept := out[:0:0]
	for _, old := range out {
		if old.read.Load() || c.lfuBytes.Load()+old.cost() <= c.lfuMax {
			kept = append(kept, old)
		} else {
			c.evictions.Inc() // unread, and ristretto is full
		}
	}
	c.demote(kept)
	for _, old := range out {
		c.index.compareAndDelete(old.key, old)
	}
}

// demote hands entries pushed out of the recent tier (or too big for it)
// to ristretto.
func (c *Cache) demote(es []*recentEntry) {
	if len(es) == 0 {
		return
	}
	c.lfuMu.RLock()
	defer c.lfuMu.RUnlock()
	if c.closed.Load() {
		return
	}
	for _, e := range es {
		if c.lfu.Set(e.key.hash(), lfuValue{key: e.key, data: e.data}, e.cost()) {
			c.lfuSets.Add(1)
			c.lfuBytes.Add(e.cost())
		} else {
			c.evictions.Inc() // dropped: ristretto's set buffer was full
		}
	}
}

// Get returns the entry cached under k. The slice must not be modified.
func (c *Cache) Get(k EntryKey) ([]byte, bool) {
	if c.closed.Load() {
		return nil, false
	}
	if e, ok := c.index.load(k); ok {
		c.hits.inc()
		if !e.read.Load() {
			e.read.Store(true)
		}
		return e.data, true
	}
	c.lfuMu.RLock()
	var v lfuValue
	ok := false
	if !c.closed.Load() {
		v, ok = c.lfu.Get(k.hash())
	}
	c.lfuMu.RUnlock()
	if ok && v.key == k {
		c.hits.inc()
		return v.data, true
	}
	c.misses.inc()
	return nil, false
}

// Size returns the bytes the cache accounts for (entries plus
// entryOverhead each, both tiers); it never exceeds MaxBytes.
func (c *Cache) Size() int64 {
	c.lfuMu.RLock()
	defer c.lfuMu.RUnlock()
	if c.closed.Load() {
		return 0
	}
	return c.recentBytes.Load() + c.lfu.MaxCost() - c.lfu.RemainingCost()
}

// entries returns the number of cached entries, both tiers.
func (c *Cache) entries() int64 {
	if c.closed.Load() {
		return 0
	}
	return c.recentLen.Load() + c.lfuSets.Load() - c.lfuExits.Load()
}

// Close empties the cache, stops ristretto's goroutines and unregisters the
// metrics. Afterwards Get misses and Insert does nothing. Safe to call
// concurrently with other methods, and more than once.
func (c *Cache) Close() {
	if !c.closed.CompareAndSwap(false, true) {
		return
	}
	c.lfuMu.Lock()
	c.lfu.Close()
	c.lfuMu.Unlock()
	c.mu.Lock()
	c.ring.init(0)
	c.index.clear()
	c.recentBytes.Store(0)
	c.recentLen.Store(0)
	c.mu.Unlock()
	if c.reg != nil {
		for _, m := range c.collectors {
			c.reg.Unregister(m)
		}
	}
}

// wait blocks until ristretto has applied every Set made before it (tests).
func (c *Cache) wait() {
	c.lfuMu.RLock()
	defer c.lfuMu.RUnlock()
	if !c.closed.Load() {
		c.lfu.Wait()
	}
}

// evicted counts an entry leaving ristretto while the cache is open.
func (c *Cache) evicted() {
	if !c.closed.Load() {
		c.evictions.Inc()
	}
}

func (c *Cache) register(reg prometheus.Registerer) error {
	c.evictions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "magnetar_ledger_cache_evictions_total",
		Help: "Entries that left the entry cache: evicted or refused by its LFU tier.",
	})
	c.collectors = []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "magnetar_ledger_cache_hits_total",
			Help: "Entry cache lookups that found the entry.",
		}, c.hits.value),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "magnetar_ledger_cache_misses_total",
			Help: "Entry cache lookups that did not find the entry.",
		}, c.misses.value),
		c.evictions,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "magnetar_ledger_cache_size_bytes",
			Help: "Bytes held by the entry cache, entries plus per-entry overhead.",
		}, func() float64 { return float64(c.Size()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "magnetar_ledger_cache_entries",
			Help: "Entries held by the entry cache.",
		}, func() float64 { return float64(c.entries()) }),
	}
	if reg == nil {
		return nil
	}
	for i, m := range c.collectors {
		if err := reg.Register(m); err != nil {
			for _, done := range c.collectors[:i] {
				reg.Unregister(done)
			}
			return fmt.Errorf("ledger: registering entry cache metrics: %w", err)
		}
	}
	c.reg = reg
	return nil
}

// ring is a FIFO of recent entries, grown by doubling.
type ring struct {
	buf       []*recentEntry // len is a power of two
	head, len int
}

func (r *ring) init(n int) { *r = ring{buf: make([]*recentEntry, n)} }

func (r *ring) push(e *recentEntry) {
	if r.len == len(r.buf) {
		buf := make([]*recentEntry, max(2*len(r.buf), 64))
		for i := range r.len {
			buf[i] = r.buf[(r.head+i)&(len(r.buf)-1)]
		}
		r.buf, r.head = buf, 0
	}
	r.buf[(r.head+r.len)&(len(r.buf)-1)] = e
	r.len++
}

func (r *ring) pop() *recentEntry {
	e := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.len--
	return e
}

// stripedCounter is a counter for hot paths: increments land on one of
// several cache-line-padded cells picked at random, so concurrent readers
// of the same entry do not contend on one word.
type stripedCounter struct {
	cells [counterStripes]struct {
		n atomic.Uint64
		_ [120]byte
	}
}

const counterStripes = 64

func (s *stripedCounter) inc() {
	s.cells[rand.Uint32()%counterStripes].n.Add(1)
}

func (s *stripedCounter) value() float64 {
	var sum uint64
	for i := range s.cells {
		sum += s.cells[i].n.Load()
	}
	return float64(sum)
}
