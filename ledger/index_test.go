package ledger

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

// modelEntry is what the model knows of an appended entry.
type modelEntry struct {
	pos     Position
	offset  int64
	count   int64
	pubMs   int64
	payload string
}

// Property: after random appends (random message counts, a clock that
// moves forward by random steps, sometimes not at all and sometimes
// backwards), random offset and time lookups agree with a model — also
// for ledgers written before a reopen, whose sparse index is gone.
func TestIndexProperty(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			testIndexProperty(t, seed)
		})
	}
}

func testIndexProperty(t *testing.T, seed uint64) {
	ctx := testCtx(t)
	rng := rand.New(rand.NewPCG(seed, 42))
	env := newTestCluster(t, 1).factory(func(c *Config) { c.MaxEntriesPerLedger = int64(50 + rng.IntN(200)) })
	name := fmt.Sprintf("t/prop-%d", seed)
	ml := env.open(t, name)
	var model []modelEntry
	lastPub := int64(0)
	appendSome := func(n int) {
		for range n {
			switch r := rng.IntN(10); {
			case r < 6:
				env.clock.Advance(time.Duration(rng.IntN(50)) * time.Millisecond)
			case r < 7:
				env.clock.Advance(-time.Duration(rng.IntN(20)) * time.Millisecond) // clamped
			}
			m := int32(1 + rng.IntN(100))
			p := fmt.Sprintf("p%d", len(model))
			r := mustAppend(t, ml, p, m)
			pub := max(env.clock.Now().UnixMilli(), lastPub)
			lastPub = pub
			want := int64(0)
			if n := len(model); n > 0 {
				want = model[n-1].offset + model[n-1].count
			}
			if r.offset != want {
				t.Fatalf("entry %d at offset %d, want %d", len(model), r.offset, want)
			}
			model = append(model, modelEntry{r.pos, r.offset, int64(m), pub, p})
		}
	}
	check := func(phase string) {
		t.Helper()
		end := model[len(model)-1].offset + model[len(model)-1].count
		for range 300 {
			off := rng.Int64N(end)
			i := sort.Search(len(model), func(i int) bool { return model[i].offset+model[i].count > off })
			got, err := ml.FindOffset(ctx, off)
			if err != nil || got.Position != model[i].pos || got.Header.FirstOffset != model[i].offset {
				t.Fatalf("%s: FindOffset(%d) = %+v, %v; want %v", phase, off, got, err, model[i].pos)
			}
			es, err := ml.ReadOffset(ctx, off, 1)
			if err != nil || len(es) != 1 || string(es[0].Payload) != model[i].payload {
				t.Fatalf("%s: ReadOffset(%d) = %+v, %v", phase, off, es, err)
			}
		}
		first, last := model[0].pubMs, model[len(model)-1].pubMs
		for range 300 {
			ms := first - 10 + rng.Int64N(last-first+20)
			i := sort.Search(len(model), func(i int) bool { return model[i].pubMs >= ms })
			got, err := ml.FindTime(ctx, time.UnixMilli(ms))
			if i == len(model) {
				if !errors.Is(err, ErrOffsetOutOfRange) {
					t.Fatalf("%s: FindTime(%d) after the end = %+v, %v", phase, ms, got, err)
				}
				continue
			}
			if err != nil || got.Position != model[i].pos {
				t.Fatalf("%s: FindTime(%d) = %+v, %v; want %v (published %d)", phase, ms, got, err, model[i].pos, model[i].pubMs)
			}
		}
		for _, off := range []int64{-1, end, end + 100} {
			if _, err := ml.FindOffset(ctx, off); !errors.Is(err, ErrOffsetOutOfRange) {
				t.Fatalf("%s: FindOffset(%d) out of range: %v", phase, off, err)
			}
		}
		if es, err := ml.ReadOffset(ctx, end, 1); err != nil || len(es) != 0 {
			t.Fatalf("%s: ReadOffset at the end: %v %v", phase, es, err)
		}
		if _, err := ml.ReadOffset(ctx, end+1, 1); !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("%s: ReadOffset past the end: %v", phase, err)
		}
	}

	appendSome(400 + rng.IntN(400))
	check("before reopen")
	if err := ml.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ml = env.open(t, name)
	reads := env.bookies.entries.Load()
	check("after reopen")
	t.Logf("%d entries in %d ledgers; lookups after reopen read %d entries from bookies",
		len(model), len(ml.Ledgers()), env.bookies.entries.Load()-reads)
	appendSome(200 + rng.IntN(200))
	check("after more appends")
}

// Lookups near the tail, from the sparse index and the cache, read
// nothing from the bookies.
func TestFindOffsetWithoutBookieReads(t *testing.T) {
	ctx := testCtx(t)
	env := newTestCluster(t, 1).factory(func(c *Config) { c.MaxEntriesPerLedger = 300 })
	ml := env.open(t, "t/find")
	for i := range 1000 {
		mustAppend(t, ml, fmt.Sprint(i), 3)
	}
	for off := int64(0); off < 3000; off += 7 {
		got, err := ml.FindOffset(ctx, off)
		if err != nil || got.Header.FirstOffset != off/3*3 {
			t.Fatalf("FindOffset(%d) = %+v, %v", off, got, err)
		}
	}
	if r := env.bookies.reads.Load(); r != 0 {
		t.Fatalf("%d bookie reads for lookups of cached entries", r)
	}
}
