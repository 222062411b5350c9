package client

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/meta"
)

// Which fragments re-replication works on, and their entry ranges.
func TestLostFragments(t *testing.T) {
	ens := func(first int64, bookies ...string) Ensemble { return Ensemble{FirstEntry: first, Bookies: bookies} }
	lostX := func(b string) bool { return b == "x" }
	for _, tc := range []struct {
		name     string
		md       LedgerMetadata
		want     []lostFragment
		deferred bool
	}{
		{"closed: every fragment, the last up to LastEntry",
			LedgerMetadata{State: StateClosed, LastEntry: 99, Ensembles: []Ensemble{
				ens(0, "a", "x", "c"), ens(40, "a", "b", "c"), ens(60, "x", "b", "c")}},
			[]lostFragment{{ensemble: 0, first: 0, last: 39, positions: []int{1}}, {ensemble: 2, first: 60, last: 99, positions: []int{0}}},
			false},
		{"open: the last fragment is deferred",
			LedgerMetadata{State: StateOpen, LastEntry: -1, Ensembles: []Ensemble{
				ens(0, "x", "b"), ens(10, "a", "x")}},
			[]lostFragment{{ensemble: 0, first: 0, last: 9, positions: []int{0}}},
			true},
		{"in recovery: the last fragment is deferred too",
			LedgerMetadata{State: StateInRecovery, LastEntry: -1, Ensembles: []Ensemble{ens(0, "x", "b")}},
			nil, true},
		{"open, the lost bookie only in earlier fragments",
			LedgerMetadata{State: StateOpen, LastEntry: -1, Ensembles: []Ensemble{ens(0, "x", "b"), ens(5, "a", "b")}},
			[]lostFragment{{ensemble: 0, first: 0, last: 4, positions: []int{0}}},
			false},
		{"closed empty ledger: an empty fragment, still replaced",
			LedgerMetadata{State: StateClosed, LastEntry: -1, Ensembles: []Ensemble{ens(0, "x", "b")}},
			[]lostFragment{{ensemble: 0, first: 0, last: -1, positions: []int{0}}},
			false},
		{"nothing lost",
			LedgerMetadata{State: StateClosed, LastEntry: 9, Ensembles: []Ensemble{ens(0, "a", "b")}},
			nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, deferred := lostFragments(&tc.md, lostX)
			if deferred != tc.deferred || !slices.EqualFunc(got, tc.want, func(a, b lostFragment) bool {
				return a.ensemble == b.ensemble && a.first == b.first && a.last == b.last && slices.Equal(a.positions, b.positions)
			}) {
				t.Errorf("lostFragments = %+v deferred %v, want %+v deferred %v", got, deferred, tc.want, tc.deferred)
			}
		})
	}
	// Two lost bookies of one ensemble come as one fragment.
	md := LedgerMetadata{State: StateClosed, LastEntry: 5, Ensembles: []Ensemble{ens(0, "x", "b", "y")}}
	got, _ := lostFragments(&md, func(b string) bool { return b != "b" })
	if len(got) != 1 || !slices.Equal(got[0].positions, []int{0, 2}) {
		t.Errorf("two lost bookies: %+v", got)
	}
}

// The entries a lost position held are those whose write set includes it.
func TestEntriesToCopy(t *testing.T) {
	held := func(first, last int64, pos, e, qw int) (out []int64) {
		for i := first; i <= last; i++ {
			if holds(i, pos, e, qw) {
				out = append(out, i)
			}
		}
		return out
	}
	// E=3, Qw=2: entry e is on positions e%3 and (e+1)%3.
	if got, want := held(0, 8, 1, 3, 2), []int64{0, 1, 3, 4, 6, 7}; !slices.Equal(got, want) {
		t.Errorf("E=3 Qw=2 position 1 holds %v, want %v", got, want)
	}
	// E=3, Qw=1: every third entry.
	if got, want := held(10, 15, 2, 3, 1), []int64{11, 14}; !slices.Equal(got, want) {
		t.Errorf("E=3 Qw=1 position 2 holds %v, want %v", got, want)
	}
	// Qw=E: every entry.
	if got := held(0, 4, 1, 2, 2); len(got) != 5 {
		t.Errorf("E=Qw=2 position 1 holds %v, want all 5", got)
	}
	f := lostFragment{first: 0, last: 8, positions: []int{0, 1}}
	if n := entriesToCopy(f, 3, 1); n != 6 { // positions 0 and 1 of E=3 Qw=1
		t.Errorf("entriesToCopy = %d, want 6", n)
	}
	if n := entriesToCopy(lostFragment{first: 5, last: 4, positions: []int{0}}, 2, 2); n != 0 {
		t.Errorf("entriesToCopy of an empty fragment = %d", n)
	}
}

func TestMissingBookies(t *testing.T) {
	md := LedgerMetadata{Ensembles: []Ensemble{{0, []string{"c", "a"}}, {5, []string{"c", "b"}}}}
	if got := md.MissingBookies([]string{"a", "d"}); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("MissingBookies = %v", got)
	}
	if got := md.MissingBookies([]string{"a", "b", "c"}); got != nil {
		t.Errorf("MissingBookies with all available = %v", got)
	}
}

// A closed ledger (E=3, Qw=2) loses a bookie: ReplicateLedger copies the
// entries it held to the spare, replaces it in the metadata, and each
// entry is then on every bookie of its write set. Asked again, it has
// nothing to do; a deleted ledger is done at once.
func TestReplicateLedger(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t, 3)
	c := cl.client()
	w, err := c.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	const n = 150
	for r := range appendAll(w, "rr", 0, n) {
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	victim := ensembleBookie(cl, w, 1)
	cl.kill(victim)

	// No bookie outside the ensemble: nothing can be done, and nothing is.
	_, err = c.ReplicateLedger(ctx, w.ID(), ReplicateOptions{})
	if !errors.Is(err, ErrNotEnoughBookies) {
		t.Fatalf("ReplicateLedger without a spare: %v, want ErrNotEnoughBookies", err)
	}
	spare := cl.addBookie()
	var progress []int64
	res, err := c.ReplicateLedger(ctx, w.ID(), ReplicateOptions{Progress: func(k int64) { progress = append(progress, k) }})
	if err != nil {
		t.Fatal(err)
	}
	const held = 100 // of 150 entries, position 1 holds those ≡ 0 or 1 mod 3
	if res.EntriesCopied != held || res.Deferred || res.Deleted ||
		!slices.Equal(res.Replaced, []Replacement{{FirstEntry: 0, Lost: victim.addr, By: spare.addr}}) {
		t.Fatalf("result %+v", res)
	}
	if len(progress) != held || progress[held-1] != held {
		t.Errorf("progress reported %d times, last %v", len(progress), progress[len(progress)-1:])
	}
	r, err := c.OpenLedger(ctx, w.ID(), OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	md := r.Metadata()
	if got := md.Ensembles[0].Bookies[1]; got != spare.addr || len(md.Ensembles) != 1 {
		t.Fatalf("ensembles after re-replication: %+v", md.Ensembles)
	}
	for e := int64(0); e < n; e++ {
		for _, b := range writeSet(md.Ensembles[0].Bookies, e, md.WriteQuorum) {
			data, err := cl.bookie(b).Storage.ReadEntry(w.ID(), e)
			if err != nil {
				t.Fatalf("entry %d on %s: %v", e, b, err)
			}
			if _, err := entry.Verify(data); err != nil || !bytes.Equal(entry.Payload(data), payload("rr", int(e))) {
				t.Fatalf("entry %d on %s: %v, payload %.30q", e, b, err, entry.Payload(data))
			}
		}
	}
	res, err = c.ReplicateLedger(ctx, w.ID(), ReplicateOptions{})
	if err != nil || res.EntriesCopied != 0 || len(res.Replaced) != 0 {
		t.Fatalf("second ReplicateLedger: %+v, %v", res, err)
	}
	if err := c.DeleteLedger(ctx, w.ID()); err != nil {
		t.Fatal(err)
	}
	if res, err = c.ReplicateLedger(ctx, w.ID(), ReplicateOptions{}); err != nil || !res.Deleted {
		t.Fatalf("ReplicateLedger of a deleted ledger: %+v, %v", res, err)
	}
}

// Lost limits the work to the bookies named; an open ledger's last
// ensemble is left to its writer (Deferred); a replica that cannot be read
// anywhere fails the copy and leaves the metadata as it was.
func TestReplicateLedgerLimits(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t, 4)
	c := cl.client()
	w, err := c.CreateLedger(ctx, LedgerOptions{EnsembleSize: 2, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	for r := range appendAll(w, "lim", 0, 20) {
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	a, b := ensembleBookie(cl, w, 0), ensembleBookie(cl, w, 1)
	cl.kill(a)

	// Open: the only ensemble is the last one.
	res, err := c.ReplicateLedger(ctx, w.ID(), ReplicateOptions{})
	if err != nil || !res.Deferred || res.EntriesCopied != 0 {
		t.Fatalf("open ledger: %+v, %v", res, err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Closed, but the caller asks only about another bookie.
	res, err = c.ReplicateLedger(ctx, w.ID(), ReplicateOptions{Lost: []string{"10.9.9.9:3181"}})
	if err != nil || res.EntriesCopied != 0 || len(res.Replaced) != 0 {
		t.Fatalf("Lost naming another bookie: %+v, %v", res, err)
	}
	// Both replicas gone: no source to copy from.
	cl.kill(b)
	_, err = c.ReplicateLedger(ctx, w.ID(), ReplicateOptions{})
	if err == nil {
		t.Fatal("ReplicateLedger with every replica lost succeeded")
	}
	v, _, gerr := cl.meta.Get(ctx, meta.LedgerPath(w.ID()))
	if gerr != nil {
		t.Fatal(gerr)
	}
	md, _ := ParseMetadata(w.ID(), v)
	if !slices.Equal(md.Ensembles[0].Bookies, []string{a.addr, b.addr}) {
		t.Fatalf("metadata changed by a failed re-replication: %v", md.Ensembles)
	}
}
