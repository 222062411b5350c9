// Package kafkagroup is the Kafka consumer group coordinator (the
// classic protocol) as a deterministic state machine: it decides, the
// caller does the I/O. Every input carries the time; replies are given
// to callbacks, which must not block (the Kafka server fills in a pending
// response with them); Tick(now) fires the timers (session expiry, the
// end of a rebalance's wait). Nothing here reads a clock, sleeps or
// touches the network, so scenarios replay exactly in tests.
//
// States of a group (Kafka's):
//
//	Empty ──join──► PreparingRebalance ──all joined / timeout──► CompletingRebalance
//	  ▲                     ▲   ▲                                        │ leader's SyncGroup
//	  └── last member gone ─┘   └── join, leave, expiry, protocol change ─ Stable ◄┘
//
// A rebalance waits until every known member has sent JoinGroup, or the
// largest rebalance timeout passes (members that did not rejoin are
// removed). A group that was empty waits InitialRebalanceDelay more for
// other members (Kafka's group.initial.rebalance.delay.ms). The chosen
// protocol is the one every member supports with the most first-choice
// votes; the leader (kept across generations while it stays) gets every
// member's metadata and sends the assignments in SyncGroup.
//
// Committed offsets are not kept here: they are cursor positions of the
// topics (broker.CommitKafkaOffset); CheckCommit says whether a member
// may commit.
package kafkagroup

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Kafka error codes the coordinator answers.
const (
	ErrNone                      int16 = 0
	ErrUnknownServer             int16 = -1
	ErrIllegalGeneration         int16 = 22
	ErrInconsistentGroupProtocol int16 = 23
	ErrInvalidGroupID            int16 = 24
	ErrUnknownMemberID           int16 = 25
	ErrInvalidSessionTimeout     int16 = 26
	ErrRebalanceInProgress       int16 = 27
	ErrNonEmptyGroup             int16 = 68
	ErrGroupIDNotFound           int16 = 69
	ErrMemberIDRequired          int16 = 79
	ErrFencedInstanceID          int16 = 82
	ErrNotCoordinator            int16 = 16
)

// State is a group's state.
type State int

const (
	Empty State = iota
	PreparingRebalance
	CompletingRebalance
	Stable
	Dead
)

func (s State) String() string {
	return [...]string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"}[s]
}

// Config tunes the coordinator.
type Config struct {
	// InitialRebalanceDelay: a rebalance of a group that was empty waits
	// this long for more members (extended by each join, within the
	// rebalance timeout). Kafka's default is 3 s.
	InitialRebalanceDelay time.Duration
	// MinSessionTimeout and MaxSessionTimeout bound what members ask for
	// (Kafka: 6 s and 30 min).
	MinSessionTimeout, MaxSessionTimeout time.Duration
}

// Protocol is one assignor a member supports, with its metadata.
type Protocol struct {
	Name     string
	Metadata []byte
}

// JoinRequest is a JoinGroup.
type JoinRequest struct {
	Group, MemberID, InstanceID, ClientID, ClientHost, ProtocolType string
	Protocols                                                       []Protocol
	SessionTimeout, RebalanceTimeout                                time.Duration
	// RequireKnownMemberID (JoinGroup v4+): a new dynamic member first
	// gets MEMBER_ID_REQUIRED with its id, and joins with it.
	RequireKnownMemberID bool
	// SkipAssignment (JoinGroup v9+, KIP-814): a static leader coming
	// back to a stable group may be told to keep the assignment.
	SkipAssignment bool
}

// JoinMember is a member as the leader sees it.
type JoinMember struct {
	MemberID, InstanceID string
	Metadata             []byte
}

// JoinResult answers a JoinGroup.
type JoinResult struct {
	Err                    int16
	Generation             int32
	ProtocolType, Protocol string
	Leader, MemberID       string
	Members                []JoinMember // the leader's only
	// SkipAssignment: the leader keeps the current assignment (sends
	// SyncGroup without computing one).
	SkipAssignment bool
}

// SyncRequest is a SyncGroup; Assignments (by member id) come from the
// leader.
type SyncRequest struct {
	Group, MemberID, InstanceID string
	Generation                  int32
	ProtocolType, Protocol      string // "" if the client did not say (before v5)
	Assignments                 map[string][]byte
}

// SyncResult answers a SyncGroup.
type SyncResult struct {
	Err                    int16
	ProtocolType, Protocol string
	Assignment             []byte
}

// LeaveMember is one member leaving (LeaveGroup v3+ lists several).
type LeaveMember struct{ MemberID, InstanceID string }

// Member is a group member.
type Member struct {
	ID, InstanceID, ClientID, ClientHost string
	ProtocolType                         string
	SessionTimeout, RebalanceTimeout     time.Duration
	Protocols                            []Protocol
	Assignment                           []byte

	expires time.Time        // session deadline (while not waiting in a join or sync)
	join    func(JoinResult) // a JoinGroup waiting for the rebalance
	sync    func(SyncResult) // a SyncGroup waiting for the leader
}

func (m *Member) metadata(protocol string) []byte {
	for _, p := range m.Protocols {
		if p.Name == protocol {
			return p.Metadata
		}
	}
	return nil
}

// Group is a consumer group.
type Group struct {
	ID                     string
	State                  State
	Generation             int32
	ProtocolType, Protocol string
	Leader                 string
	Members                []*Member // in join order

	rebalanceDeadline time.Time // PreparingRebalance: members not joined by then are removed
	delayUntil        time.Time // PreparingRebalance of a group that was empty: wait at least until then
	delayLimit        time.Time
	pending           map[string]time.Time // ids given with MEMBER_ID_REQUIRED, until they join or expire
	nextID            int
}

func (g *Group) member(id string) *Member {
	for _, m := range g.Members {
		if m.ID == id {
			return m
		}
	}
	return nil
}

// identify finds the member a request names: ErrUnknownMemberID if there
// is none, ErrFencedInstanceID if its static instance now has another
// member id (or the id belongs to another instance).
func (g *Group) identify(memberID, instanceID string) (*Member, int16) {
	m := g.member(memberID)
	switch {
	case m == nil && g.byInstance(instanceID) != nil:
		return nil, ErrFencedInstanceID
	case m == nil:
		return nil, ErrUnknownMemberID
	case instanceID != "" && m.InstanceID != instanceID:
		return nil, ErrFencedInstanceID
	}
	return m, ErrNone
}

func (g *Group) byInstance(instance string) *Member {
	if instance == "" {
		return nil
	}
	for _, m := range g.Members {
		if m.InstanceID == instance {
			return m
		}
	}
	return nil
}

// Coordinator holds the groups.
type Coordinator struct {
	cfg    Config
	groups map[string]*Group
	// OnChange is called (if set) after a group reaches a new generation's
	// assignments, becomes empty, or is deleted (g.State Dead), so the
	// caller can persist it.
	OnChange func(g *Group)
}

// New returns a coordinator without groups.
func New(cfg Config) *Coordinator {
	if cfg.MinSessionTimeout == 0 {
		cfg.MinSessionTimeout = 6 * time.Second
	}
	if cfg.MaxSessionTimeout == 0 {
		cfg.MaxSessionTimeout = 30 * time.Minute
	}
	return &Coordinator{cfg: cfg, groups: map[string]*Group{}}
}

// Group returns a group, nil if unknown.
func (c *Coordinator) Group(id string) *Group { return c.groups[id] }

// Groups returns the groups, sorted by id.
func (c *Coordinator) Groups() []*Group {
	out := make([]*Group, 0, len(c.groups))
	for _, g := range c.groups {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b *Group) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Restore puts back a group as persisted (Stable with its members, or
// Empty), every member's session starting at now.
func (c *Coordinator) Restore(now time.Time, g *Group) {
	for _, m := range g.Members {
		m.expires = now.Add(m.SessionTimeout)
		m.join, m.sync = nil, nil
	}
	if len(g.Members) == 0 {
		g.State = Empty
	} else {
		g.State = Stable
	}
	g.pending = map[string]time.Time{}
	c.groups[g.ID] = g
}

func (c *Coordinator) changed(g *Group) {
	if c.OnChange != nil {
		c.OnChange(g)
	}
}

// Join handles a JoinGroup; reply is called now or when the rebalance
// completes.
func (c *Coordinator) Join(now time.Time, req JoinRequest, reply func(JoinResult)) {
	fail := func(code int16) { reply(JoinResult{Err: code, MemberID: req.MemberID, Generation: -1}) }
	if req.Group == "" {
		fail(ErrInvalidGroupID)
		return
	}
	if req.SessionTimeout < c.cfg.MinSessionTimeout || req.SessionTimeout > c.cfg.MaxSessionTimeout {
		fail(ErrInvalidSessionTimeout)
		return
	}
	if req.RebalanceTimeout <= 0 {
		req.RebalanceTimeout = req.SessionTimeout // JoinGroup v0
	}
	g := c.groups[req.Group]
	if g == nil {
		g = &Group{ID: req.Group, pending: map[string]time.Time{}}
		c.groups[req.Group] = g
	}
	if !c.compatible(g, req) {
		fail(ErrInconsistentGroupProtocol)
		return
	}
	m := g.member(req.MemberID)
	switch {
	case req.MemberID == "" && req.InstanceID != "":
		if old := g.byInstance(req.InstanceID); old != nil {
			c.rejoinStatic(now, g, old, req, reply)
			return
		}
		req.MemberID = c.newMemberID(g, req)
	case req.MemberID == "":
		req.MemberID = c.newMemberID(g, req)
		if req.RequireKnownMemberID {
			g.pending[req.MemberID] = now.Add(req.SessionTimeout)
			reply(JoinResult{Err: ErrMemberIDRequired, MemberID: req.MemberID, Generation: -1})
			return
		}
	case m == nil:
		if _, ok := g.pending[req.MemberID]; !ok {
			fail(ErrUnknownMemberID)
			return
		}
		delete(g.pending, req.MemberID)
	case req.InstanceID != "" && m.InstanceID != req.InstanceID:
		fail(ErrFencedInstanceID)
		return
	}
	if m == nil {
		if old := g.byInstance(req.InstanceID); old != nil && old.ID != req.MemberID {
			fail(ErrFencedInstanceID)
			return
		}
		m = &Member{ID: req.MemberID, InstanceID: req.InstanceID}
		g.Members = append(g.Members, m)
		c.update(m, req)
		m.join = reply
		c.prepareRebalance(now, g)
		if g.delayLimit.After(now) { // a group that was empty: wait for more
			g.delayUntil = minTime(now.Add(c.cfg.InitialRebalanceDelay), g.delayLimit)
		}
		c.maybeCompleteJoin(now, g)
		return
	}
	changed := !slices.EqualFunc(m.Protocols, req.Protocols, sameProtocol)
	c.update(m, req)
	if m.join != nil {
		m.join(JoinResult{Err: ErrUnknownMemberID, MemberID: m.ID, Generation: -1}) // superseded by this join
	}
	m.join = reply
	switch g.State {
	case Stable:
		if !changed && m.ID != g.Leader {
			// A follower rejoining with the same metadata: nothing to
			// rebalance.
			m.join = nil
			m.expires = now.Add(m.SessionTimeout)
			reply(c.joinResult(g, m))
			return
		}
		c.prepareRebalance(now, g)
	case CompletingRebalance:
		c.prepareRebalance(now, g)
	case Empty:
		c.prepareRebalance(now, g)
	}
	c.maybeCompleteJoin(now, g)
}

// rejoinStatic: a static member comes back with a new member id (its old
// id is fenced). In a stable group, if the protocol the group would select
// is unchanged (its metadata may differ: a cooperative member lists the
// partitions it owns, none after a restart), it keeps its assignment
// without a rebalance, as in Kafka — a leader too: told to skip the
// assignment (v9+), or answered its old id as the leader's so it acts as
// a follower. Otherwise the group rebalances.
func (c *Coordinator) rejoinStatic(now time.Time, g *Group, old *Member, req JoinRequest, reply func(JoinResult)) {
	oldID := old.ID
	old.ID = c.newMemberID(g, req)
	if g.Leader == oldID {
		g.Leader = old.ID
	}
	if old.join != nil {
		old.join(JoinResult{Err: ErrFencedInstanceID, MemberID: oldID, Generation: -1})
		old.join = nil
	}
	if old.sync != nil {
		old.sync(SyncResult{Err: ErrFencedInstanceID})
		old.sync = nil
	}
	c.update(old, req)
	if g.State == Stable && hasProtocol(old, g.Protocol) && c.selectProtocol(g) == g.Protocol {
		old.expires = now.Add(old.SessionTimeout)
		r := c.joinResult(g, old)
		switch {
		case g.Leader != old.ID:
		case req.SkipAssignment:
			r.SkipAssignment = true // v9+: the leader keeps the assignment
		default:
			// Before v9 the old leader id is answered, so the client acts
			// as a follower and syncs for its assignment (as Kafka does).
			r.Leader, r.Members = oldID, nil
		}
		reply(r)
		c.changed(g)
		return
	}
	old.join = reply
	c.prepareRebalance(now, g)
	c.maybeCompleteJoin(now, g)
}

func sameProtocol(a, b Protocol) bool {
	return a.Name == b.Name && string(a.Metadata) == string(b.Metadata)
}

func (c *Coordinator) update(m *Member, req JoinRequest) {
	m.ClientID, m.ClientHost, m.ProtocolType = req.ClientID, req.ClientHost, req.ProtocolType
	m.SessionTimeout, m.RebalanceTimeout = req.SessionTimeout, req.RebalanceTimeout
	m.Protocols = slices.Clone(req.Protocols)
}

func (c *Coordinator) newMemberID(g *Group, req JoinRequest) string {
	g.nextID++
	prefix := req.ClientID
	if req.InstanceID != "" {
		prefix = req.InstanceID
	}
	return fmt.Sprintf("%s-%d-%d", prefix, g.Generation, g.nextID)
}

// compatible: the member's protocol type matches the group's and it
// shares a protocol with every member.
func (c *Coordinator) compatible(g *Group, req JoinRequest) bool {
	if req.ProtocolType == "" || len(req.Protocols) == 0 {
		return false
	}
	others := 0
	for _, m := range g.Members {
		if m.ID != req.MemberID {
			others++
		}
	}
	if others == 0 {
		return true
	}
	if g.ProtocolType != "" && g.ProtocolType != req.ProtocolType {
		return false
	}
	for _, p := range req.Protocols {
		all := true
		for _, m := range g.Members {
			if m.ID != req.MemberID && !hasProtocol(m, p.Name) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

func hasProtocol(m *Member, name string) bool {
	for _, p := range m.Protocols {
		if p.Name == name {
			return true
		}
	}
	return false
}

func (c *Coordinator) prepareRebalance(now time.Time, g *Group) {
	if g.State == PreparingRebalance {
		return
	}
	wasEmpty := g.State == Empty
	g.State = PreparingRebalance
	var timeout time.Duration
	for _, m := range g.Members {
		timeout = max(timeout, m.RebalanceTimeout)
		if m.sync != nil {
			m.sync(SyncResult{Err: ErrRebalanceInProgress})
			m.sync = nil
		}
	}
	g.rebalanceDeadline = now.Add(timeout)
	g.delayUntil, g.delayLimit = time.Time{}, time.Time{}
	if wasEmpty && c.cfg.InitialRebalanceDelay > 0 {
		g.delayLimit = g.rebalanceDeadline
		g.delayUntil = minTime(now.Add(c.cfg.InitialRebalanceDelay), g.delayLimit)
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// maybeCompleteJoin ends the rebalance if every member has joined (and no
// member id handed out is still to join, and the initial delay is over),
// or the rebalance timeout passed.
func (c *Coordinator) maybeCompleteJoin(now time.Time, g *Group) {
	if g.State != PreparingRebalance {
		return
	}
	timedOut := !now.Before(g.rebalanceDeadline)
	if !timedOut {
		if now.Before(g.delayUntil) || len(g.pending) > 0 {
			return
		}
		for _, m := range g.Members {
			if m.join == nil {
				return
			}
		}
	}
	// Members that did not rejoin in time leave.
	kept := g.Members[:0]
	for _, m := range g.Members {
		if m.join != nil {
			kept = append(kept, m)
		}
	}
	g.Members = kept
	clear(g.pending)
	g.Generation++
	if len(g.Members) == 0 {
		g.State, g.Protocol, g.Leader = Empty, "", ""
		c.changed(g)
		return
	}
	g.ProtocolType = g.Members[0].ProtocolType
	g.Protocol = c.selectProtocol(g)
	if g.member(g.Leader) == nil {
		g.Leader = g.Members[0].ID
	}
	g.State = CompletingRebalance
	for _, m := range g.Members {
		m.Assignment = nil
		m.expires = now.Add(m.SessionTimeout)
		reply := m.join
		m.join = nil
		reply(c.joinResult(g, m))
	}
}

func (c *Coordinator) joinResult(g *Group, m *Member) JoinResult {
	r := JoinResult{Generation: g.Generation, ProtocolType: g.ProtocolType, Protocol: g.Protocol, Leader: g.Leader, MemberID: m.ID}
	if m.ID == g.Leader {
		for _, x := range g.Members {
			r.Members = append(r.Members, JoinMember{MemberID: x.ID, InstanceID: x.InstanceID, Metadata: x.metadata(g.Protocol)})
		}
	}
	return r
}

// selectProtocol picks, among the protocols every member supports, the
// one with the most members preferring it (their first such protocol);
// ties go to the first member's preference order.
func (c *Coordinator) selectProtocol(g *Group) string {
	var candidates []string
	for _, p := range g.Members[0].Protocols {
		all := true
		for _, m := range g.Members[1:] {
			if !hasProtocol(m, p.Name) {
				all = false
				break
			}
		}
		if all {
			candidates = append(candidates, p.Name)
		}
	}
	votes := map[string]int{}
	for _, m := range g.Members {
		for _, p := range m.Protocols {
			if slices.Contains(candidates, p.Name) {
				votes[p.Name]++
				break
			}
		}
	}
	best := ""
	for _, name := range candidates {
		if best == "" || votes[name] > votes[best] {
			best = name
		}
	}
	return best
}

// Sync handles a SyncGroup; reply is called now or when the leader's
// assignments arrive.
func (c *Coordinator) Sync(now time.Time, req SyncRequest, reply func(SyncResult)) {
	g := c.groups[req.Group]
	if g == nil || g.State == Dead {
		reply(SyncResult{Err: ErrUnknownMemberID})
		return
	}
	m, code := g.identify(req.MemberID, req.InstanceID)
	switch {
	case code != ErrNone:
		reply(SyncResult{Err: code})
		return
	case req.Generation != g.Generation:
		reply(SyncResult{Err: ErrIllegalGeneration})
		return
	case req.ProtocolType != "" && req.ProtocolType != g.ProtocolType, req.Protocol != "" && req.Protocol != g.Protocol:
		reply(SyncResult{Err: ErrInconsistentGroupProtocol})
		return
	}
	switch g.State {
	case PreparingRebalance, Empty:
		reply(SyncResult{Err: ErrRebalanceInProgress})
	case Stable:
		m.expires = now.Add(m.SessionTimeout)
		reply(SyncResult{ProtocolType: g.ProtocolType, Protocol: g.Protocol, Assignment: m.Assignment})
	case CompletingRebalance:
		m.expires = now.Add(m.SessionTimeout)
		if m.sync != nil {
			m.sync(SyncResult{Err: ErrRebalanceInProgress})
		}
		m.sync = reply
		if m.ID != g.Leader {
			return
		}
		for _, x := range g.Members {
			x.Assignment = req.Assignments[x.ID]
		}
		g.State = Stable
		for _, x := range g.Members {
			if x.sync != nil {
				r := x.sync
				x.sync = nil
				x.expires = now.Add(x.SessionTimeout)
				r(SyncResult{ProtocolType: g.ProtocolType, Protocol: g.Protocol, Assignment: x.Assignment})
			}
		}
		c.changed(g)
	}
}

// Heartbeat handles a Heartbeat.
func (c *Coordinator) Heartbeat(now time.Time, group, memberID, instanceID string, generation int32) int16 {
	g := c.groups[group]
	if g == nil || g.State == Dead || g.State == Empty {
		return ErrUnknownMemberID
	}
	m, code := g.identify(memberID, instanceID)
	if code != ErrNone {
		return code
	}
	m.expires = now.Add(m.SessionTimeout)
	switch {
	case g.State == PreparingRebalance:
		return ErrRebalanceInProgress
	case generation != g.Generation:
		return ErrIllegalGeneration
	}
	return ErrNone
}

// Leave handles a LeaveGroup: the error of the whole request and of each
// member.
func (c *Coordinator) Leave(now time.Time, group string, members []LeaveMember) (int16, []int16) {
	g := c.groups[group]
	codes := make([]int16, len(members))
	if g == nil || g.State == Dead {
		for i := range codes {
			codes[i] = ErrUnknownMemberID
		}
		return ErrUnknownMemberID, codes
	}
	left := 0
	for i, lm := range members {
		m := g.member(lm.MemberID)
		if m == nil && lm.MemberID == "" {
			m = g.byInstance(lm.InstanceID)
		}
		switch {
		case m == nil:
			if g.byInstance(lm.InstanceID) != nil {
				codes[i] = ErrFencedInstanceID
			} else {
				codes[i] = ErrUnknownMemberID
			}
			continue
		case lm.InstanceID != "" && m.InstanceID != lm.InstanceID:
			codes[i] = ErrFencedInstanceID
			continue
		}
		c.remove(g, m)
		left++
	}
	if left > 0 {
		c.membersGone(now, g)
	}
	top := ErrNone
	if len(members) == 1 {
		top = codes[0] // LeaveGroup v0-v2 answer with the member's error
	}
	return top, codes
}

func (c *Coordinator) remove(g *Group, m *Member) {
	g.Members = slices.DeleteFunc(g.Members, func(x *Member) bool { return x == m })
	if m.join != nil {
		m.join(JoinResult{Err: ErrUnknownMemberID, MemberID: m.ID, Generation: -1})
		m.join = nil
	}
	if m.sync != nil {
		m.sync(SyncResult{Err: ErrUnknownMemberID})
		m.sync = nil
	}
}

// membersGone moves a group on after members were removed.
func (c *Coordinator) membersGone(now time.Time, g *Group) {
	if len(g.Members) == 0 && g.State != PreparingRebalance {
		g.State, g.Protocol, g.Leader = Empty, "", ""
		g.Generation++
		c.changed(g)
		return
	}
	c.prepareRebalance(now, g)
	c.maybeCompleteJoin(now, g)
}

// Tick expires sessions and ends rebalances whose wait is over.
func (c *Coordinator) Tick(now time.Time) {
	for _, g := range c.Groups() {
		for id, until := range g.pending {
			if !now.Before(until) {
				delete(g.pending, id)
			}
		}
		var expired []*Member
		for _, m := range g.Members {
			if m.join == nil && m.sync == nil && !now.Before(m.expires) {
				expired = append(expired, m)
			}
		}
		for _, m := range expired {
			c.remove(g, m)
		}
		if len(expired) > 0 {
			c.membersGone(now, g)
		}
		c.maybeCompleteJoin(now, g)
	}
}

// Forget drops a group this coordinator no longer coordinates (another
// broker does now), without OnChange: its members' waiting JoinGroup and
// SyncGroup requests are answered NOT_COORDINATOR, so that they find the
// new coordinator.
func (c *Coordinator) Forget(group string) {
	g := c.groups[group]
	if g == nil {
		return
	}
	delete(c.groups, group)
	for _, m := range g.Members {
		if m.join != nil {
			m.join(JoinResult{Err: ErrNotCoordinator, MemberID: m.ID, Generation: -1})
			m.join = nil
		}
		if m.sync != nil {
			m.sync(SyncResult{Err: ErrNotCoordinator})
			m.sync = nil
		}
	}
}

// Delete removes an empty group: ErrGroupIDNotFound if unknown,
// ErrNonEmptyGroup if it has members.
func (c *Coordinator) Delete(group string) int16 {
	g := c.groups[group]
	switch {
	case g == nil:
		return ErrGroupIDNotFound
	case g.State != Empty:
		return ErrNonEmptyGroup
	}
	g.State = Dead
	delete(c.groups, group)
	c.changed(g)
	return ErrNone
}

// CheckCommit says whether an offset commit may go ahead (Kafka's
// rules): a commit with no member and generation -1 is a simple
// consumer's (or an admin's), allowed while the group has no members
// (creating it Empty if unknown); otherwise the member and generation
// must be current, and not while the assignment is being made. A commit
// from a member counts as its heartbeat.
func (c *Coordinator) CheckCommit(now time.Time, group, memberID, instanceID string, generation int32) int16 {
	g := c.groups[group]
	if generation < 0 && memberID == "" {
		if g == nil {
			c.groups[group] = &Group{ID: group, pending: map[string]time.Time{}}
			return ErrNone
		}
		if g.State == Empty {
			return ErrNone
		}
		return ErrUnknownMemberID
	}
	if g == nil || g.State == Dead {
		return ErrUnknownMemberID
	}
	m, code := g.identify(memberID, instanceID)
	switch {
	case code != ErrNone:
		return code
	case g.State == CompletingRebalance:
		return ErrRebalanceInProgress
	case generation != g.Generation:
		return ErrIllegalGeneration
	}
	m.expires = now.Add(m.SessionTimeout)
	return ErrNone
}
