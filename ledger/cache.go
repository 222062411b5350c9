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
// So Insert puts the entry in the recent tier before it returns: a map
// sharded by key hash for lookups (a read takes one shard's read lock and
// allocates nothing; sync.Map, tried first, boxed every key and cost an
// appender 8% of its CPU) and a FIFO ring for order, whose lock is held
// only to push and pop. An entry stays there until
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
	// after it leaves. Readers take only a shard's read lock.
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

// recentIndex maps keys to recent entries: indexShards maps, each under its
// own lock, picked by the key's hash.
type recentIndex struct {
	shards [indexShards]indexShard
}

const indexShards = 64

type indexShard struct {
	mu sync.RWMutex
	m  map[EntryKey]*recentEntry
	_  [40]byte // keep shards on separate cache lines
}

func (x *recentIndex) shard(k EntryKey) *indexShard {
	return &x.shards[k.hash()%indexShards]
}

func (x *recentIndex) load(k EntryKey) (*recentEntry, bool) {
	sh := x.shard(k)
	sh.mu.RLock()
	e, ok := sh.m[k]
	sh.mu.RUnlock()
	return e, ok
}

// loadOrStore stores e under k unless k is there; it returns the entry
// under k and whether it was there.
func (x *recentIndex) loadOrStore(k EntryKey, e *recentEntry) (*recentEntry, bool) {
	sh := x.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if old, ok := sh.m[k]; ok {
		return old, true
	}
	if sh.m == nil {
		sh.m = map[EntryKey]*recentEntry{}
	}
	sh.m[k] = e
	return e, false
}

// compareAndDelete deletes k if it maps to e.
func (x *recentIndex) compareAndDelete(k EntryKey, e *recentEntry) {
	sh := x.shard(k)
	sh.mu.Lock()
	if sh.m[k] == e {
		delete(sh.m, k)
	}
	sh.mu.Unlock()
}

func (x *recentIndex) clear() {
	for i := range x.shards {
		sh := &x.shards[i]
		sh.mu.Lock()
		sh.m = nil
		sh.mu.Unlock()
	}
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
