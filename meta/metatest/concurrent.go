package metatest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/magnetar-io/magnetar/meta"
)

// casResult is one contender's part in one round of testCASRace.
type casResult struct {
	read meta.Version // the version its Get returned
	won  bool         // its Set with that version succeeded
	err  error        // an error other than ErrBadVersion
}

func testCASRace(t *testing.T, h Harness) {
	const contenders, rounds = 16, 50
	f := newFixture(t, h)
	p := f.path("cas")
	f.create(f.s, p, []byte("version 0"), 0)

	// Half the contenders have a session each, half share the fixture's.
	stores := make([]meta.Store, contenders)
	for i := range stores {
		stores[i] = f.s
		if i%2 == 0 {
			stores[i] = f.open()
		}
	}

	// Each round every contender reads the node, and only once all have
	// read do they race to Set it with the version they read: all hold the
	// same version, so exactly one Set must win.
	winners := make(map[meta.Version]int) // version set against → winning contender
	lastWinner := -1
	for round := range rounds {
		results := make([]casResult, contenders)
		var read, done sync.WaitGroup
		read.Add(contenders)
		start := make(chan struct{})
		for i, s := range stores {
			done.Go(func() {
				_, st, err := s.Get(f.ctx, p)
				read.Done()
				if err != nil {
					results[i].err = err
					return
				}
				<-start
				value := fmt.Appendf(nil, "version %d by %d", st.Version+1, i)
				_, err = s.Set(f.ctx, p, value, st.Version)
				results[i] = casResult{read: st.Version, won: err == nil}
				if err != nil && !errors.Is(err, meta.ErrBadVersion) {
					results[i].err = err
				}
			})
		}
		read.Wait()
		close(start)
		done.Wait()

		var won []int
		for i, r := range results {
			if r.err != nil {
				t.Fatalf("round %d, contender %d: %v", round, i, r.err)
			}
			if r.read != meta.Version(round) {
				t.Fatalf("round %d, contender %d read version %d, want %d", round, i, r.read, round)
			}
			if r.won {
				won = append(won, i)
				if prev, ok := winners[r.read]; ok {
					t.Fatalf("version %d won twice, by contenders %d and %d", r.read, prev, i)
				}
				winners[r.read] = i
			}
		}
		if len(won) != 1 {
			t.Fatalf("round %d: contenders %v won a Set with version %d, want exactly one", round, won, round)
		}
		lastWinner = won[0]
	}

	v, st := f.get(f.s, p)
	if st.Version != rounds || len(winners) != rounds {
		t.Fatalf("after %d rounds: version %d, %d winning Sets; want both %d", rounds, st.Version, len(winners), rounds)
	}
	if want := fmt.Sprintf("version %d by %d", rounds, lastWinner); string(v) != want {
		t.Fatalf("final value %q, want %q", v, want)
	}
}

// idsPerGenerator is how many ids each generator of testIDGenerator takes:
// two full blocks of 100, so no reserved id is left unused.
const idsPerGenerator = 200

func testIDGenerator(t *testing.T, h Harness) {
	f := newFixture(t, h)
	counter := f.path("ids", "next") // its parent is created on first use

	type generator struct {
		gen *meta.IDGenerator
		ids []int64
		err error
	}
	var gens []*generator
	for _, block := range []int64{1, 100, 1, 100} {
		g, err := meta.NewIDGenerator(f.open(), counter, block)
		if err != nil {
			t.Fatalf("NewIDGenerator(block %d): %v", block, err)
		}
		gens = append(gens, &generator{gen: g})
	}
	var wg sync.WaitGroup
	for _, g := range gens {
		wg.Go(func() {
			for range idsPerGenerator {
				id, err := g.gen.Next(f.ctx)
				if err != nil {
					g.err = err
					return
				}
				g.ids = append(g.ids, id)
			}
		})
	}
	wg.Wait()

	var all []int64
	for i, g := range gens {
		if g.err != nil {
			t.Fatalf("generator %d: Next: %v", i, g.err)
		}
		for j := 1; j < len(g.ids); j++ {
			if g.ids[j] <= g.ids[j-1] {
				t.Fatalf("generator %d: id %d after %d", i, g.ids[j], g.ids[j-1])
			}
		}
		all = append(all, g.ids...)
	}
	slices.Sort(all)
	if i := duplicateAt(all); i >= 0 {
		t.Fatalf("id %d handed out twice", all[i])
	}
	// Every reserved block was used up, so the ids are exactly 1…n.
	if all[0] != 1 || all[len(all)-1] != int64(len(all)) {
		t.Fatalf("ids run from %d to %d, want 1 to %d", all[0], all[len(all)-1], len(all))
	}

	if _, err := meta.NewIDGenerator(f.s, counter, 0); err == nil {
		t.Errorf("NewIDGenerator with block 0 succeeded")
	}
	if _, err := meta.NewIDGenerator(f.s, "ids", 1); !errors.Is(err, meta.ErrInvalidPath) {
		t.Errorf("NewIDGenerator with a relative path: %v, want %v", err, meta.ErrInvalidPath)
	}
}
