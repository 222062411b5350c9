package broker

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/ledger"
)

// dedupOn turns deduplication on, with a snapshot every 5 entries.
func dedupOn(c *Config) { c.Deduplication, c.DedupSnapshotInterval = true, 5 }

// dedupCursorOf is the cursor holding a topic's deduplication snapshots.
func dedupCursorOf(t *testing.T, tp *Topic) *ledger.Cursor {
	t.Helper()
	for _, c := range tp.ManagedLedger().Cursors() {
		if c.Name() == dedupCursor {
			return c
		}
	}
	t.Fatalf("topic %v has no %s cursor", tp.Name(), dedupCursor)
	return nil
}

// isDuplicate checks that r is the answer to a duplicate.
func isDuplicate(t *testing.T, r PublishResult, what string) {
	t.Helper()
	if r.Err != nil || !r.Duplicate || r.ID.Position != (ledger.Position{Ledger: -1, Entry: -1}) || r.ID.BatchIndex != -1 {
		t.Fatalf("%s: %+v, want a duplicate with id (-1,-1)", what, r)
	}
}

func TestDedupDuplicates(t *testing.T) {
	st := newTestBroker(t, dedupOn)
	tp := st.mustTopic(t, "dedup")
	ml := tp.ManagedLedger()
	p1, _ := mustProducer(t, tp, "p1")
	if got := p1.LastSequenceID(); got != -1 {
		t.Fatalf("LastSequenceID of a new producer name = %d, want -1", got)
	}
	publishAll(t, p1, singles(0, 10, nil))
	if got := p1.LastSequenceID(); got != 9 {
		t.Fatalf("LastSequenceID = %d, want 9", got)
	}
	entries, last := ml.NumberOfEntries(), ml.LastConfirmed()
	for _, seq := range []int64{0, 3, 9} {
		isDuplicate(t, publish(t, p1, msg{seq: seq}), fmt.Sprintf("sequence id %d again", seq))
	}
	if ml.NumberOfEntries() != entries || ml.LastConfirmed() != last {
		t.Fatalf("duplicates were stored: %d entries (was %d), last %v (was %v)", ml.NumberOfEntries(), entries, ml.LastConfirmed(), last)
	}
	mustPublish(t, p1, msg{seq: 10})
	// A batch covers its sequence ids up to the highest.
	mustPublish(t, p1, msg{seq: 11, batch: 5})
	for _, m := range []msg{{seq: 13}, {seq: 15}, {seq: 11, batch: 5}} {
		isDuplicate(t, publish(t, p1, m), fmt.Sprintf("sequence id %d (batch %d) again", m.seq, m.batch))
	}
	if got := p1.LastSequenceID(); got != 15 {
		t.Fatalf("LastSequenceID = %d, want 15", got)
	}
	// Sequence ids are per producer name.
	p2, _ := mustProducer(t, tp, "p2")
	mustPublish(t, p2, msg{seq: 0})
	isDuplicate(t, publish(t, p2, msg{seq: 0}), "p2 sequence id 0 again")

	// A producer with the same name continues from the highest stored.
	p1.Close()
	p1b, _ := mustProducer(t, tp, "p1")
	if got := p1b.LastSequenceID(); got != 15 {
		t.Fatalf("LastSequenceID of a new producer named p1 = %d, want 15", got)
	}
	isDuplicate(t, publish(t, p1b, msg{seq: 15}), "sequence id 15 from the new producer")
	mustPublish(t, p1b, msg{seq: 16})

	// The same sequence id twice before the first is stored: never stored
	// twice.
	entries = ml.NumberOfEntries()
	first, second := make(chan PublishResult, 1), make(chan PublishResult, 1)
	p1b.Publish(msg{seq: 17}.request(t, "p1"), func(r PublishResult) { first <- r })
	p1b.Publish(msg{seq: 17}.request(t, "p1"), func(r PublishResult) { second <- r })
	if r := <-first; r.Err != nil || r.Duplicate {
		t.Fatalf("sequence id 17: %+v", r)
	}
	if r := <-second; !r.Duplicate && !errors.Is(r.Err, ErrDuplicateUnknown) {
		t.Fatalf("sequence id 17 sent twice at once: %+v, want a duplicate or ErrDuplicateUnknown", r)
	}
	if got := ml.NumberOfEntries(); got != entries+1 {
		t.Fatalf("%d entries stored for one sequence id sent twice", got-entries)
	}
}

func TestDedupOff(t *testing.T) {
	st := newTestBroker(t)
	tp := st.mustTopic(t, "no-dedup")
	p, _ := mustProducer(t, tp, "p")
	mustPublish(t, p, msg{seq: 0})
	mustPublish(t, p, msg{seq: 0})
	if got := p.LastSequenceID(); got != -1 {
		t.Fatalf("LastSequenceID without deduplication = %d, want -1", got)
	}
	if n := tp.ManagedLedger().NumberOfEntries(); n != 2 {
		t.Fatalf("%d entries, want 2", n)
	}
	for _, c := range tp.ManagedLedger().Cursors() {
		t.Fatalf("cursor %s without deduplication", c.Name())
	}
}

// After a restart, duplicates are still recognised: the state is the
// last snapshot (the dedup cursor's properties) plus the entries stored
// after it. A graceful restart (Topic.Close) and a crash (another broker
// takes the topic over, fencing the first) are both covered.
func TestDedupRestart(t *testing.T) {
	tests := []struct {
		name     string
		ms       []msg          // published by p1, except seq ≥ 100: by p2
		snapshot map[string]int // expected snapshot before the restart (nil: none)
		last     map[string]int64
	}{
		{name: "snapshot at the end", ms: singles(0, 10, nil),
			snapshot: map[string]int{"p1": 9}, last: map[string]int64{"p1": 9, "p2": -1}},
		{name: "entries after the snapshot", ms: append(singles(0, 10, nil), msg{seq: 100}, msg{seq: 10, batch: 5}),
			snapshot: map[string]int{"p1": 9}, last: map[string]int64{"p1": 14, "p2": 100}},
		{name: "no snapshot yet", ms: []msg{{seq: 0}, {seq: 100}, {seq: 1, batch: 3}},
			last: map[string]int64{"p1": 3, "p2": 100}},
	}
	for _, tt := range tests {
		for _, crash := range []bool{false, true} {
			name := tt.name + map[bool]string{false: ", graceful", true: ", crash"}[crash]
			t.Run(name, func(t *testing.T) {
				ctx := testCtx(t)
				cluster := newTestCluster(t)
				st := cluster.newStack(t, dedupOn)
				tp := st.mustTopic(t, "dedup-restart")
				ps := map[string]*Producer{}
				ps["p1"], _ = mustProducer(t, tp, "p1")
				ps["p2"], _ = mustProducer(t, tp, "p2")
				var rs []PublishResult
				for _, m := range tt.ms {
					owner := "p1"
					if m.seq >= 100 {
						owner = "p2"
					}
					rs = append(rs, mustPublish(t, ps[owner], m))
				}
				cur := dedupCursorOf(t, tp)
				if tt.snapshot != nil {
					// The snapshot is taken where expected, covering the
					// entries up to it (interval 5, 10 entries: at the 10th).
					want := map[string]string{}
					for k, v := range tt.snapshot {
						want[k] = strconv.Itoa(v)
					}
					if got := cur.Properties(); fmt.Sprint(got) != fmt.Sprint(want) {
						t.Fatalf("snapshot %v, want %v", got, want)
					}
					if md := cur.MarkDeletePosition(); md != rs[9].ID.Position {
						t.Fatalf("snapshot at %v, want %v (the 10th entry)", md, rs[9].ID.Position)
					}
					waitFor(t, 5*time.Second, func() bool { return cur.PersistedMarkDelete() == rs[9].ID.Position },
						"the snapshot to be stored (stored at %v)", cur.PersistedMarkDelete())
				} else if len(cur.Properties()) != 0 {
					t.Fatalf("snapshot %v before %d entries", cur.Properties(), 5)
				}

				var tp2 *Topic
				if crash {
					// Another broker takes the topic over: the first is
					// abandoned as it is (its snapshot state is what was
					// stored).
					st2 := cluster.newStack(t, dedupOn)
					tp2 = st2.mustTopic(t, "dedup-restart")
				} else {
					if err := tp.Close(ctx); err != nil {
						t.Fatal(err)
					}
					tp2 = st.mustTopic(t, "dedup-restart")
					if tp2 == tp {
						t.Fatal("Topic after Close returned the closed topic")
					}
				}
				for _, name := range []string{"p1", "p2"} {
					p, _ := mustProducer(t, tp2, name)
					if got := p.LastSequenceID(); got != tt.last[name] {
						t.Fatalf("after the restart: LastSequenceID(%s) = %d, want %d", name, got, tt.last[name])
					}
					ps[name] = p
				}
				entries := tp2.ManagedLedger().NumberOfEntries()
				for _, m := range tt.ms {
					owner := "p1"
					if m.seq >= 100 {
						owner = "p2"
					}
					isDuplicate(t, publish(t, ps[owner], m), fmt.Sprintf("after the restart, %s sequence id %d again", owner, m.seq))
				}
				if got := tp2.ManagedLedger().NumberOfEntries(); got != entries {
					t.Fatalf("duplicates stored after the restart: %d entries, was %d", got, entries)
				}
				mustPublish(t, ps["p1"], msg{seq: tt.last["p1"] + 1})
				mustPublish(t, ps["p2"], msg{seq: max(tt.last["p2"]+1, 100)})
			})
		}
	}
}
