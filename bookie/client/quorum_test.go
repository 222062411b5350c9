package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/magnetar-io/magnetar/bookie/wire"
)

func TestWriteSets(t *testing.T) {
	ens := []string{"a", "b", "c", "d", "e"}
	for _, tc := range []struct {
		entry int64
		qw    int
		want  []string
	}{
		{0, 3, []string{"a", "b", "c"}},
		{3, 3, []string{"d", "e", "a"}},
		{4, 2, []string{"e", "a"}},
		{12, 1, []string{"c"}},
		{7, 5, []string{"c", "d", "e", "a", "b"}},
	} {
		got := writeSet(ens, tc.entry, tc.qw)
		if !slices.Equal(got, tc.want) {
			t.Errorf("writeSet(%d, Qw=%d) = %v, want %v", tc.entry, tc.qw, got, tc.want)
		}
		for idx := range ens {
			i := writeSetMember(tc.entry, idx, len(ens), tc.qw)
			if in := slices.Contains(tc.want, ens[idx]); in != (i >= 0) || (in && tc.want[i] != ens[idx]) {
				t.Errorf("writeSetMember(%d, %d) = %d", tc.entry, idx, i)
			}
		}
	}
}

func TestAckSet(t *testing.T) {
	var a ackSet
	a = a.with(0).with(2).with(2)
	if a.count() != 2 || !a.has(0) || a.has(1) || !a.has(2) {
		t.Fatalf("%b", a)
	}
	if a = a.without(0); a.count() != 1 || a.has(0) {
		t.Fatalf("%b", a)
	}
	if a = a.with(63); !a.has(63) || a.count() != 2 {
		t.Fatalf("%b", a)
	}
}

// Adds complete only at the head, in order, once they have Qa acks.
func TestAddQueueCompletesInOrder(t *testing.T) {
	const qa = 2
	q := addQueue{first: 5}
	for id := int64(5); id < 9; id++ {
		q.push(&pendingAdd{id: id})
	}
	ack := func(id int64, members ...int) {
		for _, i := range members {
			q.get(id).acked = q.get(id).acked.with(i)
		}
	}
	ids := func(ps []*pendingAdd) (out []int64) {
		for _, p := range ps {
			out = append(out, p.id)
		}
		return out
	}
	steps := []struct {
		ack     func()
		popped  []int64
		pending int
	}{
		{func() { ack(6, 0, 1) }, nil, 4},        // 6 has its quorum, 5 does not
		{func() { ack(5, 1) }, nil, 4},           // one ack is not enough
		{func() { ack(5, 2) }, []int64{5, 6}, 2}, // 5 completes, releasing 6
		{func() { ack(8, 0, 1, 2) }, nil, 2},     // 8 waits for 7
		{func() { ack(7, 0, 2) }, []int64{7, 8}, 0},
	}
	for i, s := range steps {
		s.ack()
		if got := ids(q.popCompleted(qa)); !slices.Equal(got, s.popped) || q.len() != s.pending {
			t.Fatalf("step %d: popped %v (pending %d), want %v (%d)", i, got, q.len(), s.popped, s.pending)
		}
	}
	if q.first != 9 || q.get(8) != nil {
		t.Fatalf("queue after draining: first %d", q.first)
	}
	q.push(&pendingAdd{id: 9})
	q.push(&pendingAdd{id: 10})
	if got := ids(q.popAll()); !slices.Equal(got, []int64{9, 10}) || q.len() != 0 {
		t.Fatalf("popAll: %v", got)
	}
}

func TestCoverage(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ok        []bool
		qw, qa    int
		want      bool
		uncovered int
	}{
		{"3/2/2 all fenced", []bool{true, true, true}, 2, 2, true, -1},
		{"3/2/2 one down: each write set of 2 has one", []bool{true, false, true}, 2, 2, true, -1},
		{"3/2/2 two down", []bool{true, false, false}, 2, 2, false, 1},
		{"3/3/2 needs 2 of 3", []bool{true, false, true}, 3, 2, true, -1},
		{"3/3/2 one of 3", []bool{false, false, true}, 3, 2, false, 0},
		{"3/3/1 needs all", []bool{true, true, false}, 3, 1, false, 0},
		{"5/3/2 alternate", []bool{true, false, true, false, true}, 3, 2, false, 1},
		{"5/3/2 four of five", []bool{true, true, false, true, true}, 3, 2, true, -1},
		{"1/1/1", []bool{true}, 1, 1, true, -1},
		{"1/1/1 down", []bool{false}, 1, 1, false, 0},
	} {
		got, start := covered(tc.ok, tc.qw, tc.qa)
		if got != tc.want || start != tc.uncovered {
			t.Errorf("%s: covered = %v at %d, want %v at %d", tc.name, got, start, tc.want, tc.uncovered)
		}
	}
}

func TestRecoveryVerdict(t *testing.T) {
	for _, tc := range []struct {
		found                   bool
		missing, failed, qw, qa int
		want                    verdict
	}{
		{true, 0, 0, 3, 2, verdictFound},
		{true, 2, 0, 3, 2, verdictFound},    // any copy is enough
		{false, 1, 0, 3, 2, verdictPending}, // Qw-Qa+1 = 2 needed
		{false, 2, 0, 3, 2, verdictAbsent},  // at most 1 < Qa bookies can have it
		{false, 1, 1, 3, 2, verdictPending}, // one answer to come
		{false, 1, 2, 3, 2, verdictUndecided},
		{false, 0, 3, 3, 2, verdictUndecided},
		{false, 1, 0, 2, 2, verdictAbsent},
		{false, 0, 1, 2, 2, verdictPending},
		{false, 2, 0, 3, 1, verdictPending}, // Qa=1: all Qw must lack it
		{false, 3, 0, 3, 1, verdictAbsent},
		{false, 0, 1, 1, 1, verdictUndecided},
	} {
		if got := recoveryVerdict(tc.found, tc.missing, tc.failed, tc.qw, tc.qa); got != tc.want {
			t.Errorf("%+v: %s", tc, got)
		}
	}
}

func TestReplaceBookies(t *testing.T) {
	got, changed := replaceBookies([]string{"a", "b", "c"}, []string{"c", "x", "a"}, []string{"d", "y", "e"})
	if !slices.Equal(got, []string{"e", "b", "d"}) || !slices.Equal(changed, []int{2, 0}) {
		t.Fatalf("%v %v", got, changed)
	}
	ens := []Ensemble{{0, []string{"a", "b"}}}
	ens = withEnsemble(ens, 10, []string{"a", "c"})
	ens = withEnsemble(ens, 10, []string{"d", "c"}) // nothing completed on the last one: replaced
	ens = withEnsemble(ens, 12, []string{"d", "e"})
	want := []Ensemble{{0, []string{"a", "b"}}, {10, []string{"d", "c"}}, {12, []string{"d", "e"}}}
	if !slices.EqualFunc(ens, want, func(a, b Ensemble) bool { return a.FirstEntry == b.FirstEntry && slices.Equal(a.Bookies, b.Bookies) }) {
		t.Fatalf("%v", ens)
	}
}

func TestChooseBookies(t *testing.T) {
	identity := func(n int) []int {
		p := make([]int, n)
		for i := range p {
			p[i] = i
		}
		return p
	}
	reverse := func(n int) []int {
		p := identity(n)
		slices.Reverse(p)
		return p
	}
	avail := []string{"a", "b", "c", "d"}
	if got, err := chooseBookies(avail, []string{"b"}, nil, 2, identity); err != nil || !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("%v %v", got, err)
	}
	if got, err := chooseBookies(avail, nil, nil, 3, reverse); err != nil || !slices.Equal(got, []string{"d", "c", "b"}) {
		t.Fatalf("%v %v", got, err)
	}
	_, err := chooseBookies(avail, []string{"a", "b", "c"}, nil, 2, identity)
	if !errors.Is(err, ErrNotEnoughBookies) || !strings.Contains(err.Error(), "need 2, 1 available") {
		t.Fatalf("%v", err)
	}
	if _, err := chooseBookies(nil, nil, nil, 1, identity); !errors.Is(err, ErrNotEnoughBookies) {
		t.Fatalf("%v", err)
	}
	// Read-only bookies are left out, and the error says so.
	if got, err := chooseBookies(avail, []string{"a"}, []string{"b", "x"}, 2, identity); err != nil || !slices.Equal(got, []string{"c", "d"}) {
		t.Fatalf("%v %v", got, err)
	}
	_, err = chooseBookies(avail, []string{"a"}, []string{"b", "c"}, 2, identity)
	if !errors.Is(err, ErrNotEnoughBookies) || !strings.Contains(err.Error(), "need 2, 1 available (4 registered, 1 excluded as already in the ensemble, 2 read-only)") {
		t.Fatalf("%v", err)
	}
}

func TestMetadataFormat(t *testing.T) {
	md := LedgerMetadata{Format: 1, EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2, State: StateOpen, LastEntry: -1,
		Ensembles: []Ensemble{{0, []string{"h1:1", "h2:2", "h3:3"}}, {7, []string{"h1:1", "h4:4", "h3:3"}}},
		CreatedMs: 1700000000000, Custom: map[string]string{"k": "v"}}
	b, err := encodeMetadata(&md)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"format":1,"ensembleSize":3,"writeQuorum":2,"ackQuorum":2,"state":"OPEN","lastEntry":-1,"length":0,` +
		`"ensembles":[{"firstEntry":0,"bookies":["h1:1","h2:2","h3:3"]},{"firstEntry":7,"bookies":["h1:1","h4:4","h3:3"]}],` +
		`"createdMs":1700000000000,"custom":{"k":"v"}}`
	if string(b) != want {
		t.Fatalf("encoded\n%s\nwant\n%s", b, want)
	}
	got, err := decodeMetadata(1, b)
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := json.Marshal(got); !bytes.Equal(g, b) {
		t.Fatalf("round trip: %s", g)
	}
	if e := got.EnsembleFor(6); e[1] != "h2:2" {
		t.Fatalf("ensemble for 6: %v", e)
	}
	if e := got.EnsembleFor(7); e[1] != "h4:4" {
		t.Fatalf("ensemble for 7: %v", e)
	}
	c := got.Clone()
	c.Ensembles[0].Bookies[0] = "zz"
	c.Custom["k"] = "w"
	if got.Ensembles[0].Bookies[0] != "h1:1" || got.Custom["k"] != "v" {
		t.Fatal("Clone shares memory")
	}
	for _, bad := range []string{
		`{"format":2,"ensembleSize":1,"writeQuorum":1,"ackQuorum":1,"state":"OPEN","ensembles":[{"firstEntry":0,"bookies":["a"]}]}`,
		`{"format":1,"ensembleSize":1,"writeQuorum":2,"ackQuorum":1,"state":"OPEN","ensembles":[{"firstEntry":0,"bookies":["a"]}]}`,
		`{"format":1,"ensembleSize":1,"writeQuorum":1,"ackQuorum":1,"state":"GONE","ensembles":[{"firstEntry":0,"bookies":["a"]}]}`,
		`{"format":1,"ensembleSize":2,"writeQuorum":1,"ackQuorum":1,"state":"OPEN","ensembles":[{"firstEntry":0,"bookies":["a"]}]}`,
		`{"format":1,"ensembleSize":1,"writeQuorum":1,"ackQuorum":1,"state":"OPEN","ensembles":[]}`,
		`{"format":1,"ensembleSize":1,"writeQuorum":1,"ackQuorum":1,"state":"OPEN","ensembles":[{"firstEntry":0,"bookies":["a"]},{"firstEntry":0,"bookies":["b"]}]}`,
		`not json`,
	} {
		if _, err := decodeMetadata(1, []byte(bad)); err == nil {
			t.Errorf("decoded %s", bad)
		}
	}
}

func TestFrameHeaderMatchesWire(t *testing.T) {
	body := []byte("some entry bytes")
	h := wire.Header{Op: wire.OpAdd, Flags: wire.FlagRecovery, ReqID: 0x0102030405060708}
	var hdr [4 + wire.HeaderSize]byte
	putFrameHeader(&hdr, h, len(body))
	if got, want := append(hdr[:], body...), wire.AppendFrame(nil, h, body); !bytes.Equal(got, want) {
		t.Fatalf("frame %x, want %x", got, want)
	}
}
