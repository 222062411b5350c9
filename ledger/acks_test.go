package ledger

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// fakeLog is a logView over ledgers with known entries: ledger i has
// msgs[i][e] messages in entry e; every ledger is final but the last
// (open ones continue past their end).
type fakeLog struct {
	ids    []int64
	msgs   [][]int64
	open   bool // the last ledger is not final
	hidden bool // offsets of inner entries are unknown without a read
}

func newFakeLog(rng *rand.Rand, ledgers, maxEntries int) *fakeLog {
	f := &fakeLog{}
	for i := range ledgers {
		f.ids = append(f.ids, int64(3+2*i))
		n := 1 + rng.IntN(maxEntries)
		var ms []int64
		for range n {
			ms = append(ms, 1+rng.Int64N(5))
		}
		f.msgs = append(f.msgs, ms)
	}
	return f
}

// all returns every entry's position, in order.
func (f *fakeLog) all() []Position {
	var out []Position
	for i, id := range f.ids {
		for e := range f.msgs[i] {
			out = append(out, Position{id, int64(e)})
		}
	}
	return out
}

func (f *fakeLog) index(id int64) int {
	i, _ := slices.BinarySearch(f.ids, id)
	return i
}

func (f *fakeLog) next(p Position) Position {
	i := f.index(p.Ledger)
	if i < len(f.ids) && f.ids[i] == p.Ledger {
		if p.Entry+1 < int64(len(f.msgs[i])) || (f.open && i == len(f.ids)-1) {
			return Position{p.Ledger, p.Entry + 1}
		}
		i++
	}
	if i < len(f.ids) {
		return Position{f.ids[i], 0}
	}
	return Position{p.Ledger, p.Entry + 1}
}

func (f *fakeLog) offsetAt(p Position) (int64, bool) {
	var off int64
	for i, id := range f.ids {
		for e, m := range f.msgs[i] {
			if id > p.Ledger || (id == p.Ledger && int64(e) >= p.Entry) {
				return off, !f.hidden || e == 0
			}
			off += m
		}
	}
	return off, true
}

func (f *fakeLog) shape() logShape {
	sh := logShape{}
	for i, id := range f.ids {
		var n int64
		for _, m := range f.msgs[i] {
			n += m
		}
		e := int64(len(f.msgs[i]))
		sh.ledgers = append(sh.ledgers, ledgerShape{id, e, 100 * e})
		sh.nextOffset += n
	}
	return sh
}

// checkAcks compares s with the model acked (per entry of all).
func checkAcks(t *testing.T, f *fakeLog, all []Position, acked []bool, s *ackState) {
	t.Helper()
	k := 0
	for k < len(acked) && acked[k] {
		k++
	}
	wantMD := Position{f.ids[0], -1}
	if k > 0 {
		wantMD = all[k-1]
	}
	if s.markDelete != wantMD {
		t.Fatalf("mark-delete %v, want %v", s.markDelete, wantMD)
	}
	var want []ackRange
	for i := k; i < len(acked); i++ {
		if !acked[i] {
			continue
		}
		j := i
		for j+1 < len(acked) && acked[j+1] {
			j++
		}
		want = append(want, ackRange{from: all[i], to: all[j]})
		i = j
	}
	if len(want) != len(s.ranges) {
		t.Fatalf("ranges %v, want %v", s.ranges, want)
	}
	for i, r := range s.ranges {
		if r.from != want[i].from || r.to != want[i].to {
			t.Fatalf("range %d: %v..%v, want %v..%v", i, r.from, r.to, want[i].from, want[i].to)
		}
	}
	var b Backlog
	for i, p := range all {
		if !acked[i] {
			o, _ := f.offsetAt(p)
			o2, _ := f.offsetAt(f.next(p))
			b.Entries++
			b.Messages += o2 - o
			b.Bytes += 100
		}
	}
	if !f.hidden {
		sh := f.shape()
		if got := s.backlog(&sh); got != b {
			t.Fatalf("backlog %+v, want %+v", got, b)
		}
	}
	for i, p := range all {
		if s.acked(p) != acked[i] {
			t.Fatalf("acked(%v) = %v, want %v", p, s.acked(p), acked[i])
		}
	}
}

func TestAckStateScript(t *testing.T) {
	f := &fakeLog{ids: []int64{3, 5, 9}, msgs: [][]int64{{1, 2, 3}, {1, 1}, {4, 4, 4, 4}}}
	all := f.all() // 3:0 3:1 3:2 5:0 5:1 9:0 9:1 9:2 9:3
	s := newAckState(f, Position{3, -1})
	acked := make([]bool, len(all))
	type step struct {
		op   string // "ack" or "md"
		p    Position
		want string // mark-delete, then ranges
	}
	for _, st := range []step{
		{"ack", Position{3, 1}, "3:-1 [3:1-3:1]"},
		{"ack", Position{5, 0}, "3:-1 [3:1-3:1 5:0-5:0]"},
		{"ack", Position{3, 2}, "3:-1 [3:1-5:0]"}, // joins across a ledger boundary
		{"ack", Position{3, 0}, "5:0 []"},         // the prefix moves the mark-delete position
		{"ack", Position{9, 1}, "5:0 [9:1-9:1]"},
		{"ack", Position{9, 3}, "5:0 [9:1-9:1 9:3-9:3]"},
		{"ack", Position{9, 1}, "5:0 [9:1-9:1 9:3-9:3]"}, // again: nothing
		{"md", Position{9, 0}, "9:1 [9:3-9:3]"},          // cumulative up to a range: takes it
		{"md", Position{5, 1}, "9:1 [9:3-9:3]"},          // backwards: nothing
		{"ack", Position{9, 2}, "9:3 []"},
	} {
		if st.op == "ack" {
			s.ack(st.p)
		} else {
			s.markDeleteTo(st.p)
		}
		for i, p := range all {
			if (st.op == "ack" && p == st.p) || (st.op == "md" && p.Compare(st.p) <= 0) {
				acked[i] = true
			}
		}
		got := fmt.Sprintf("%v [", s.markDelete)
		for i, r := range s.ranges {
			if i > 0 {
				got += " "
			}
			got += fmt.Sprintf("%v-%v", r.from, r.to)
		}
		got += "]"
		if got != st.want {
			t.Fatalf("after %s %v: %s, want %s", st.op, st.p, got, st.want)
		}
		checkAcks(t, f, all, acked, &s)
	}
}

// Random acknowledgements against a model (a bool per entry), over logs
// of several ledgers with batches of various sizes.
func TestAckStateProperty(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 11))
		f := newFakeLog(rng, 1+rng.IntN(5), 12)
		all := f.all()
		acked := make([]bool, len(all))
		s := newAckState(f, Position{f.ids[0], -1})
		for range 3 * len(all) {
			i := rng.IntN(len(all))
			if rng.IntN(8) == 0 {
				s.markDeleteTo(all[i])
				for k := 0; k <= i; k++ {
					acked[k] = true
				}
			} else {
				s.ack(all[i])
				acked[i] = true
			}
			checkAcks(t, f, all, acked, &s)
			// firstUnacked from anywhere lands on the first unacked at or after it.
			j := rng.IntN(len(all))
			want := Position{}
			for k := j; k < len(all); k++ {
				if !acked[k] {
					want = all[k]
					break
				}
			}
			if got := s.firstUnacked(all[j]); want != (Position{}) && got != want {
				t.Fatalf("seed %d: firstUnacked(%v) = %v, want %v", seed, all[j], got, want)
			}
		}
	}
}

// Offsets unknown without reads are left -1 and filled by fillOffsets;
// the backlog is then the same.
func TestAckStateMissingOffsets(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	f := newFakeLog(rng, 3, 20)
	f.hidden = true
	all := f.all()
	s := newAckState(f, Position{f.ids[0], -1})
	for range len(all) / 2 {
		s.ack(all[1+rng.IntN(len(all)-1)])
	}
	missing := s.missingOffsets()
	if len(missing) == 0 {
		t.Fatal("no offsets missing though inner entries are hidden")
	}
	f.hidden = false
	found := make(map[Position]int64)
	for _, p := range missing {
		found[p], _ = f.offsetAt(p)
	}
	s.fillOffsets(found)
	if m := s.missingOffsets(); len(m) != 0 {
		t.Fatalf("still missing %v", m)
	}
	acked := make([]bool, len(all))
	for i, p := range all {
		acked[i] = s.acked(p)
	}
	checkAcks(t, f, all, acked, &s)
}
