package kafkagroup

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// script drives a coordinator through a scenario, one line per step, and
// checks each reply. Steps (words separated by spaces):
//
//	join <client> [member=<id>|member=@<client>] [instance=<i>] [protocols=a,b] [known]   a JoinGroup; its reply is checked by "expect"
//	sync <client> [gen=<n>] [assign]          SyncGroup with the client's current member id; "assign" (the leader) gives each member "for-<memberid>"
//	heartbeat <client> [gen=<n>] -> <code>
//	leave <client>... -> <code>
//	commit <client>|simple [gen=<n>] -> <code>
//	tick <duration>                           time passes, then Tick
//	expect <client> join <code> [gen=<n>] [leader=<client>] [members=<k>] [protocol=<p>]
//	expect <client> sync <code> [assignment=for-<client>|none]
//	pending <client> join|sync                 the reply has not come
//	state <State> [gen=<n>] [members=<k>]
//	delete -> <code>
type script struct {
	t     *testing.T
	c     *Coordinator
	now   time.Time
	ids   map[string]string // client -> member id
	gens  map[string]int32  // client -> generation of its last join
	joins map[string]*JoinResult
	syncs map[string]*SyncResult
}

const group = "g"

func run(t *testing.T, cfg Config, steps string) {
	t.Helper()
	s := &script{t: t, c: New(cfg), now: time.Unix(1000, 0), ids: map[string]string{}, gens: map[string]int32{},
		joins: map[string]*JoinResult{}, syncs: map[string]*SyncResult{}}
	for i, line := range strings.Split(strings.TrimSpace(steps), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s.step(i+1, line)
	}
}

func kv(words []string) map[string]string {
	m := map[string]string{}
	for _, w := range words {
		k, v, _ := strings.Cut(w, "=")
		m[k] = v
	}
	return m
}

var codes = map[string]int16{"ok": ErrNone, "UNKNOWN_MEMBER_ID": ErrUnknownMemberID, "ILLEGAL_GENERATION": ErrIllegalGeneration,
	"REBALANCE_IN_PROGRESS": ErrRebalanceInProgress, "MEMBER_ID_REQUIRED": ErrMemberIDRequired, "FENCED_INSTANCE_ID": ErrFencedInstanceID,
	"INCONSISTENT_GROUP_PROTOCOL": ErrInconsistentGroupProtocol, "NON_EMPTY_GROUP": ErrNonEmptyGroup, "GROUP_ID_NOT_FOUND": ErrGroupIDNotFound,
	"INVALID_SESSION_TIMEOUT": ErrInvalidSessionTimeout, "NOT_COORDINATOR": ErrNotCoordinator}

func (s *script) code(line int, name string) int16 {
	c, ok := codes[name]
	if !ok {
		s.t.Fatalf("line %d: unknown code %q", line, name)
	}
	return c
}

func (s *script) gen(client string, args map[string]string) int32 {
	if g, ok := args["gen"]; ok {
		var n int32
		fmt.Sscan(g, &n)
		return n
	}
	return s.gens[client]
}

func (s *script) step(line int, text string) {
	t := s.t
	t.Helper()
	lhs, want, hasWant := strings.Cut(text, " -> ")
	w := strings.Fields(lhs)
	args := map[string]string{}
	if len(w) > 2 {
		args = kv(w[2:])
	}
	switch w[0] {
	case "join":
		client := w[1]
		req := JoinRequest{Group: group, ClientID: client, ProtocolType: "consumer", SessionTimeout: 10 * time.Second,
			RebalanceTimeout: 30 * time.Second, InstanceID: args["instance"], RequireKnownMemberID: hasKey(args, "known")}
		if m, ok := args["member"]; ok {
			if strings.HasPrefix(m, "@") {
				m = s.ids[m[1:]]
			}
			req.MemberID = m
		} else {
			req.MemberID = s.ids[client]
		}
		protos := "range"
		if p, ok := args["protocols"]; ok {
			protos = p
		}
		who := client
		if req.InstanceID != "" {
			who = req.InstanceID // a restarted static member sends the same metadata
		}
		for _, p := range strings.Split(protos, ",") {
			req.Protocols = append(req.Protocols, Protocol{Name: p, Metadata: []byte(who + "/" + p + args["meta"])})
		}
		req.SkipAssignment = hasKey(args, "skip")
		if st, ok := args["session"]; ok {
			req.SessionTimeout, _ = time.ParseDuration(st)
		}
		delete(s.joins, client)
		s.c.Join(s.now, req, func(r JoinResult) {
			s.joins[client] = &r
			if r.MemberID != "" && (r.Err == ErrNone || r.Err == ErrMemberIDRequired) {
				s.ids[client] = r.MemberID
			}
			if r.Err == ErrNone {
				s.gens[client] = r.Generation
			}
		})
	case "sync":
		client := w[1]
		req := SyncRequest{Group: group, MemberID: s.ids[client], Generation: s.gen(client, args), InstanceID: args["instance"]}
		if hasKey(args, "assign") {
			req.Assignments = map[string][]byte{}
			for c, id := range s.ids {
				req.Assignments[id] = []byte("for-" + c)
			}
		}
		delete(s.syncs, client)
		s.c.Sync(s.now, req, func(r SyncResult) { s.syncs[client] = &r })
	case "heartbeat":
		got := s.c.Heartbeat(s.now, group, s.ids[w[1]], args["instance"], s.gen(w[1], args))
		s.check(line, text, hasWant, got, want)
	case "leave":
		var ms []LeaveMember
		for _, c := range w[1:] {
			ms = append(ms, LeaveMember{MemberID: s.ids[c]})
		}
		got, _ := s.c.Leave(s.now, group, ms)
		if len(ms) > 1 {
			got = ErrNone
		}
		s.check(line, text, hasWant, got, want)
	case "commit":
		member, gen := s.ids[w[1]], s.gen(w[1], args)
		if w[1] == "simple" {
			member, gen = "", -1
		}
		s.check(line, text, hasWant, s.c.CheckCommit(s.now, group, member, "", gen), want)
	case "tick":
		d, err := time.ParseDuration(w[1])
		if err != nil {
			t.Fatalf("line %d: %v", line, err)
		}
		s.now = s.now.Add(d)
		s.c.Tick(s.now)
	case "expect":
		client, kind := w[1], w[2]
		args = kv(w[4:])
		switch kind {
		case "join":
			r := s.joins[client]
			if r == nil {
				t.Fatalf("line %d (%s): no join reply for %s", line, text, client)
			}
			if r.Err != s.code(line, w[3]) {
				t.Fatalf("line %d (%s): join error %d", line, text, r.Err)
			}
			if g, ok := args["gen"]; ok && fmt.Sprint(r.Generation) != g {
				t.Fatalf("line %d (%s): generation %d", line, text, r.Generation)
			}
			if l, ok := args["leader"]; ok && r.Leader != s.ids[l] {
				t.Fatalf("line %d (%s): leader %s, want %s's %s", line, text, r.Leader, l, s.ids[l])
			}
			if n, ok := args["members"]; ok && fmt.Sprint(len(r.Members)) != n {
				t.Fatalf("line %d (%s): %d members given", line, text, len(r.Members))
			}
			if p, ok := args["protocol"]; ok && r.Protocol != p {
				t.Fatalf("line %d (%s): protocol %q", line, text, r.Protocol)
			}
			if _, ok := args["skip"]; ok != r.SkipAssignment {
				t.Fatalf("line %d (%s): skip assignment %v", line, text, r.SkipAssignment)
			}
		case "sync":
			r := s.syncs[client]
			if r == nil {
				t.Fatalf("line %d (%s): no sync reply for %s", line, text, client)
			}
			if r.Err != s.code(line, w[3]) {
				t.Fatalf("line %d (%s): sync error %d", line, text, r.Err)
			}
			if a, ok := args["assignment"]; ok {
				if a == "none" {
					a = ""
				}
				if string(r.Assignment) != a {
					t.Fatalf("line %d (%s): assignment %q", line, text, r.Assignment)
				}
			}
		}
	case "pending":
		client := w[1]
		if (w[2] == "join" && s.joins[client] != nil) || (w[2] == "sync" && s.syncs[client] != nil) {
			t.Fatalf("line %d (%s): %s already answered: %+v %+v", line, text, w[2], s.joins[client], s.syncs[client])
		}
	case "state":
		g := s.c.Group(group)
		if g == nil {
			t.Fatalf("line %d (%s): no group", line, text)
		}
		if g.State.String() != w[1] {
			t.Fatalf("line %d (%s): state %s", line, text, g.State)
		}
		if n, ok := args["gen"]; ok && fmt.Sprint(g.Generation) != n {
			t.Fatalf("line %d (%s): generation %d", line, text, g.Generation)
		}
		if n, ok := args["members"]; ok && fmt.Sprint(len(g.Members)) != n {
			t.Fatalf("line %d (%s): %d members", line, text, len(g.Members))
		}
	case "delete":
		s.check(line, text, hasWant, s.c.Delete(group), want)
	case "forget":
		s.c.Forget(group)
		if s.c.Group(group) != nil {
			t.Fatalf("line %d: the group is still there after Forget", line)
		}
	default:
		t.Fatalf("line %d: unknown step %q", line, text)
	}
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

func (s *script) check(line int, text string, hasWant bool, got int16, want string) {
	s.t.Helper()
	if !hasWant {
		s.t.Fatalf("line %d (%s): no expected code", line, text)
	}
	if w := s.code(line, strings.TrimSpace(want)); got != w {
		s.t.Fatalf("line %d (%s): got %d, want %d", line, text, got, w)
	}
}

var noDelay = Config{}

func TestTwoMembersJoinSyncAndLeave(t *testing.T) {
	run(t, noDelay, `
		join a
		expect a join ok gen=1 leader=a members=1 protocol=range
		state CompletingRebalance gen=1
		sync a assign
		expect a sync ok assignment=for-a
		state Stable members=1
		heartbeat a -> ok
		# b joins: a learns of the rebalance by its heartbeat and rejoins.
		join b
		pending b join
		heartbeat a -> REBALANCE_IN_PROGRESS
		join a
		expect a join ok gen=2 leader=a members=2
		expect b join ok gen=2 leader=a members=0
		sync b
		pending b sync
		sync a assign
		expect a sync ok assignment=for-a
		expect b sync ok assignment=for-b
		state Stable gen=2 members=2
		heartbeat b gen=1 -> ILLEGAL_GENERATION
		commit b -> ok
		commit b gen=1 -> ILLEGAL_GENERATION
		commit simple -> UNKNOWN_MEMBER_ID
		# a leaves: b rejoins and becomes the leader.
		leave a -> ok
		heartbeat b -> REBALANCE_IN_PROGRESS
		join b
		expect b join ok gen=3 leader=b members=1
		sync b assign
		expect b sync ok assignment=for-b
		leave b -> ok
		state Empty gen=4 members=0
		commit simple -> ok
		delete -> ok
		delete -> GROUP_ID_NOT_FOUND
	`)
}

func TestMemberIDRequiredAndUnknownMembers(t *testing.T) {
	run(t, noDelay, `
		join a known
		expect a join MEMBER_ID_REQUIRED
		join a known
		expect a join ok gen=1 leader=a
		join z member=nobody
		expect z join UNKNOWN_MEMBER_ID
		sync a gen=7
		expect a sync ILLEGAL_GENERATION
		sync a assign
		expect a sync ok
		heartbeat z -> UNKNOWN_MEMBER_ID
		delete -> NON_EMPTY_GROUP
	`)
}

func TestSessionExpiryRebalancesAndRebalanceTimeoutDropsStragglers(t *testing.T) {
	run(t, noDelay, `
		join a
		sync a assign
		join b
		join a
		sync a assign
		sync b
		expect b sync ok assignment=for-b
		state Stable gen=2 members=2
		# b stops heartbeating: after its 10s session it is gone.
		tick 6s
		heartbeat a -> ok
		tick 6s
		heartbeat a -> REBALANCE_IN_PROGRESS
		join a
		expect a join ok gen=3 leader=a members=1
		sync a assign
		# c joins; a heartbeats but never rejoins: after the 30s rebalance
		# timeout c goes on alone.
		join c
		pending c join
		tick 9s
		heartbeat a -> REBALANCE_IN_PROGRESS
		tick 9s
		heartbeat a -> REBALANCE_IN_PROGRESS
		tick 9s
		heartbeat a -> REBALANCE_IN_PROGRESS
		pending c join
		tick 4s
		expect c join ok gen=4 leader=c members=1
		state CompletingRebalance members=1
		# a is gone.
		heartbeat a -> UNKNOWN_MEMBER_ID
	`)
}

func TestInitialRebalanceDelayGathersMembers(t *testing.T) {
	run(t, Config{InitialRebalanceDelay: 3 * time.Second}, `
		join a
		pending a join
		tick 2s
		join b
		pending a join
		tick 2s
		pending a join
		tick 1s
		expect a join ok gen=1 members=2
		expect b join ok gen=1
	`)
}

func TestStaticMembership(t *testing.T) {
	run(t, Config{InitialRebalanceDelay: time.Second}, `
		join a instance=ia
		join b instance=ib
		tick 1s
		expect a join ok gen=1 leader=a
		sync a assign
		sync b
		expect b sync ok assignment=for-b
		# b restarts: it comes back without its member id and keeps its
		# assignment, with no rebalance.
		join b2 member= instance=ib
		expect b2 join ok gen=1 leader=a members=0
		state Stable gen=1 members=2
		heartbeat b instance=ib -> FENCED_INSTANCE_ID
		heartbeat b2 instance=ib -> ok
		sync b2 instance=ib
		expect b2 sync ok assignment=for-b
		# A cooperative member comes back owning nothing: its metadata
		# differs, the protocol the group selects does not: no rebalance.
		join b3 member= instance=ib meta=+owned-none
		expect b3 join ok gen=1 leader=a members=0
		state Stable gen=1
		# The leader comes back: with v9 it keeps the assignment...
		join a2 member= instance=ia skip
		expect a2 join ok gen=1 leader=a2 members=2 skip
		state Stable gen=1
		# ...before v9 it is told its old id as the leader's, so it syncs as
		# a follower: still no rebalance.
		join a3 member= instance=ia
		expect a3 join ok gen=1 leader=a2 members=0
		state Stable gen=1
		sync a3 instance=ia
		expect a3 sync ok assignment=for-a
		# A protocol the others do not support is refused; the group stays.
		join a4 member= instance=ia protocols=roundrobin
		expect a4 join INCONSISTENT_GROUP_PROTOCOL
		state Stable gen=1
	`)
}

func TestProtocolsMustMatch(t *testing.T) {
	run(t, Config{InitialRebalanceDelay: time.Second}, `
		join a protocols=cooperative-sticky,range
		join b protocols=roundrobin
		expect b join INCONSISTENT_GROUP_PROTOCOL
		join c protocols=range,cooperative-sticky
		tick 1s
		expect a join ok gen=1 protocol=cooperative-sticky members=2
		expect c join ok gen=1
		join d session=1s
		expect d join INVALID_SESSION_TIMEOUT
	`)
}

// TestRecordRestoresAStableGroup: a stable group written and read back
// keeps its members, generation and assignments; its members heartbeat on
// as if nothing happened, and one that does not is expired.
func TestRecordRestoresAStableGroup(t *testing.T) {
	now := time.Unix(1000, 0)
	c := New(Config{})
	var ids []string
	for _, client := range []string{"a", "b"} {
		c.Join(now, JoinRequest{Group: "g", ClientID: client, ProtocolType: "consumer", SessionTimeout: 10 * time.Second,
			Protocols: []Protocol{{Name: "range", Metadata: []byte(client)}}}, func(r JoinResult) { ids = append(ids, r.MemberID) })
	}
	// a completed alone at generation 1; b's join started generation 2.
	c.Join(now, JoinRequest{Group: "g", MemberID: ids[0], ClientID: "a", ProtocolType: "consumer", SessionTimeout: 10 * time.Second,
		Protocols: []Protocol{{Name: "range", Metadata: []byte("a")}}}, func(r JoinResult) {})
	g := c.Group("g")
	c.Sync(now, SyncRequest{Group: "g", MemberID: g.Leader, Generation: g.Generation,
		Assignments: map[string][]byte{g.Members[0].ID: []byte("x"), g.Members[1].ID: []byte("y")}}, func(SyncResult) {})
	if g.State != Stable || len(g.Members) != 2 {
		t.Fatalf("before: %v with %d members", g.State, len(g.Members))
	}
	b, err := Marshal(g, []string{"persistent://public/default/t"})
	if err != nil {
		t.Fatal(err)
	}
	g2, topics, err := Unmarshal(b)
	if err != nil || len(topics) != 1 || topics[0] != "persistent://public/default/t" {
		t.Fatalf("unmarshal: topics %v, %v", topics, err)
	}
	c2 := New(Config{})
	later := now.Add(time.Hour)
	c2.Restore(later, g2)
	r := c2.Group("g")
	if r.State != Stable || r.Generation != g.Generation || string(r.Members[1].Assignment) != "y" {
		t.Fatalf("restored %v gen %d, assignment %q", r.State, r.Generation, r.Members[1].Assignment)
	}
	if code := c2.Heartbeat(later, "g", r.Members[0].ID, "", r.Generation); code != ErrNone {
		t.Fatalf("heartbeat after restore: %d", code)
	}
	var got SyncResult
	c2.Sync(later, SyncRequest{Group: "g", MemberID: r.Members[1].ID, Generation: r.Generation}, func(s SyncResult) { got = s })
	if got.Err != ErrNone || string(got.Assignment) != "y" {
		t.Fatalf("sync after restore: %+v", got)
	}
	// Only a keeps heartbeating: b expires and a rebalance starts.
	c2.Heartbeat(later.Add(8*time.Second), "g", r.Members[0].ID, "", r.Generation)
	c2.Tick(later.Add(11 * time.Second))
	if r.State != PreparingRebalance || len(r.Members) != 1 {
		t.Fatalf("after b's session: %v with %d members", r.State, len(r.Members))
	}
}

// TestForgetAnswersWaitingRequests: a group another broker coordinates now
// is dropped, and its members' waiting requests are told to find the new
// coordinator.
func TestForgetAnswersWaitingRequests(t *testing.T) {
	run(t, noDelay, `
		join a
		expect a join ok gen=1 leader=a members=1
		join b
		pending b join
		forget
		expect b join NOT_COORDINATOR
		join c
		expect c join ok gen=1 leader=c members=1
	`)
}
