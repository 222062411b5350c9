package kafka

import (
	"context"
	"errors"
	"net"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/kafkagroup"
)

// FindCoordinator: v0–v4. JoinGroup: v0–v9. SyncGroup: v0–v5. Heartbeat:
// v0–v4. LeaveGroup: v0–v5. DescribeGroups: v0–v5. ListGroups: v0–v4.
// DeleteGroups: v0–v2.
//
// The classic group protocol. This file is the driver of the coordinator
// state machine (broker/kafkagroup): it turns requests into its inputs
// with the time, its replies into responses (a JoinGroup or SyncGroup
// answers when the rebalance gets there; the connection's later requests
// queue behind it, as in Kafka), ticks it every tickInterval to expire
// sessions, and persists each group's record (members, generation,
// assignments, topics with offsets) when it changes, so groups survive a
// restart and members go on heartbeating. Transactions' coordinators are
// refused.
//
// In a cluster a group is coordinated by the owner of its bundle
// (broker.KafkaGroupTopic): FindCoordinator names it, and the other
// brokers answer the group's requests NOT_COORDINATOR. A broker loads a
// group from its stored record when it starts coordinating it (each time
// it takes the group's bundle: the record may have moved on under another
// coordinator), writes the record only while it coordinates, and drops the
// group when its bundle goes (waiting requests are answered
// NOT_COORDINATOR).

const (
	tickInterval = 100 * time.Millisecond
	// DefaultInitialRebalanceDelay is Kafka's group.initial.rebalance.delay.ms.
	DefaultInitialRebalanceDelay = 3 * time.Second
)

type groups struct {
	s      *Server
	used   atomic.Bool // a FindCoordinator came: Metadata shows __consumer_offsets
	mu     sync.Mutex
	c      *kafkagroup.Coordinator
	topics map[string]map[string]bool // group → full names of topics it committed on
	epochs map[string]uint64          // group → the taking of its bundle it was loaded in (broker.OwnerEpoch)

	dirty    map[string]bool // groups whose record is to be written
	wake     chan struct{}
	stop     chan struct{}
	stopped  chan struct{}
	stopOnce sync.Once // close may be called again (a second Shutdown)
}

func newGroups(s *Server) *groups {
	g := &groups{s: s, c: kafkagroup.New(kafkagroup.Config{InitialRebalanceDelay: s.cfg.InitialRebalanceDelay}),
		topics: map[string]map[string]bool{}, epochs: map[string]uint64{}, dirty: map[string]bool{}, wake: make(chan struct{}, 1),
		stop: make(chan struct{}), stopped: make(chan struct{})}
	g.c.OnChange = func(gr *kafkagroup.Group) { g.markDirty(gr.ID) }
	return g
}

// load notes whether groups were used before (Metadata then shows
// __consumer_offsets). Groups themselves load when first asked for
// (coordinate).
func (g *groups) load(ctx context.Context) error {
	recs, err := g.s.b.KafkaGroups(ctx)
	if err != nil {
		return err
	}
	if len(recs) > 0 {
		g.used.Store(true)
	}
	return nil
}

const errNotCoordinator = kafkagroup.ErrNotCoordinator

// coordinate returns 0 if this broker coordinates group (taking the
// group's bundle if nobody owns it), NOT_COORDINATOR if another broker
// does, COORDINATOR_NOT_AVAILABLE while it moves. A group this broker
// (re)starts coordinating is first read back from its stored record.
// Called without g.mu.
func (g *groups) coordinate(ctx context.Context, group string) int16 {
	b := g.s.b
	gt := b.KafkaGroupTopic(group)
	epoch, ok := b.OwnerEpoch(gt)
	if !ok {
		l, err := b.LookupTopic(ctx, gt, true)
		switch {
		case err != nil:
			return errCoordinatorNotAvailable
		case !l.Self:
			return errNotCoordinator
		}
		if epoch, ok = b.OwnerEpoch(gt); !ok {
			return errCoordinatorNotAvailable
		}
	}
	g.mu.Lock()
	cur, seen := g.epochs[group]
	g.mu.Unlock()
	if seen && cur == epoch {
		return 0
	}
	rec, found, err := b.KafkaGroupRecord(ctx, group)
	if err != nil {
		g.s.log.Warn("reading a Kafka group's record failed", "group", group, "err", err)
		return errCoordinatorNotAvailable
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if cur, seen := g.epochs[group]; seen && cur == epoch {
		return 0 // loaded meanwhile
	}
	g.c.Forget(group)
	delete(g.topics, group)
	if found {
		gr, topics, err := kafkagroup.Unmarshal(rec)
		if err != nil {
			g.s.log.Warn("a stored Kafka group record is unreadable; the group starts empty", "group", group, "err", err)
		} else {
			g.c.Restore(g.s.cfg.Clock(), gr)
			g.topics[group] = map[string]bool{}
			for _, t := range topics {
				g.topics[group][t] = true
			}
			g.used.Store(true)
		}
	}
	g.epochs[group] = epoch
	return 0
}

// sweep, with g.mu held, drops the groups whose bundle this broker no
// longer holds (or took again since they were loaded).
func (g *groups) sweep() {
	for _, gr := range g.c.Groups() {
		epoch, ok := g.s.b.OwnerEpoch(g.s.b.KafkaGroupTopic(gr.ID))
		if cur, seen := g.epochs[gr.ID]; !ok || !seen || cur != epoch {
			g.c.Forget(gr.ID)
			delete(g.epochs, gr.ID)
			delete(g.topics, gr.ID)
			delete(g.dirty, gr.ID)
		}
	}
}

func (g *groups) markDirty(id string) {
	g.dirty[id] = true
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// run ticks the coordinator and writes dirty records until close.
func (g *groups) run() {
	defer close(g.stopped)
	t := time.NewTicker(tickInterval)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			g.flush()
			return
		case <-t.C:
			g.mu.Lock()
			g.sweep()
			g.c.Tick(g.s.cfg.Clock())
			g.mu.Unlock()
			g.flush()
		case <-g.wake:
			g.flush()
		}
	}
}

// flush writes the records of dirty groups (deleting those of deleted
// ones).
func (g *groups) flush() {
	g.mu.Lock()
	type write struct {
		id   string
		data []byte // nil: delete
	}
	var ws []write
	for id := range g.dirty {
		if e, ok := g.epochs[id]; !ok {
			continue // not coordinated here
		} else if cur, held := g.s.b.OwnerEpoch(g.s.b.KafkaGroupTopic(id)); !held || cur != e {
			continue // not any more: another broker may write it now
		}
		gr := g.c.Group(id)
		if gr == nil {
			ws = append(ws, write{id: id})
			continue
		}
		data, err := kafkagroup.Marshal(gr, g.topicList(id))
		if err != nil {
			g.s.log.Error("Kafka group record not written", "group", id, "err", err)
			continue
		}
		ws = append(ws, write{id, data})
	}
	clear(g.dirty)
	g.mu.Unlock()
	for _, w := range ws {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		var err error
		if w.data == nil {
			err = g.s.b.DeleteKafkaGroup(ctx, w.id)
		} else {
			err = g.s.b.SaveKafkaGroup(ctx, w.id, w.data)
		}
		cancel()
		if err != nil {
			g.s.log.Warn("Kafka group record not written; retried on the next change", "group", w.id, "err", err)
		}
	}
}

func (g *groups) topicList(id string) []string {
	var out []string
	for t := range g.topics[id] {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

func (g *groups) close() {
	g.stopOnce.Do(func() { close(g.stop) })
	<-g.stopped
}

func clientHost(c *conn) string {
	host, _, err := net.SplitHostPort(c.nc.RemoteAddr().String())
	if err != nil {
		return "/" + c.nc.RemoteAddr().String()
	}
	return "/" + host
}

func strOr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func ptrOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func handleFindCoordinator(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.FindCoordinatorRequest)
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	c.s.groups.used.Store(true)
	keys := req.CoordinatorKeys
	if req.Version < 4 {
		keys = []string{req.CoordinatorKey}
	}
	for _, key := range keys {
		co := kmsg.NewFindCoordinatorResponseCoordinator()
		co.Key = key
		if req.CoordinatorType != 0 {
			co.ErrorCode = errInvalidRequest
			co.ErrorMessage = strPtr("transaction coordinators are not served: transactions are not supported yet")
			co.NodeID = -1
		} else {
			c.s.findCoordinator(c.ctx, &co)
		}
		resp.Coordinators = append(resp.Coordinators, co)
	}
	if req.Version < 4 && len(resp.Coordinators) == 1 {
		co := resp.Coordinators[0]
		resp.ErrorCode, resp.ErrorMessage, resp.NodeID, resp.Host, resp.Port = co.ErrorCode, co.ErrorMessage, co.NodeID, co.Host, co.Port
	}
	sl.finish(resp)
}

// findCoordinator fills in the coordinator of co.Key: the owner of the
// group's bundle, or the broker chosen to take it.
func (s *Server) findCoordinator(ctx context.Context, co *kmsg.FindCoordinatorResponseCoordinator) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	l, err := s.b.LookupTopic(ctx, s.b.KafkaGroupTopic(co.Key), false)
	switch {
	case err != nil || (!l.Self && l.Owner.KafkaHost == ""):
		co.NodeID, co.ErrorCode = -1, errCoordinatorNotAvailable
		if err != nil {
			co.ErrorMessage = strPtr(err.Error())
		}
	case l.Self:
		co.NodeID, co.Host, co.Port = s.cfg.NodeID, s.cfg.AdvertisedHost, s.cfg.AdvertisedPort
	default:
		co.NodeID, co.Host, co.Port = l.Owner.NodeID, l.Owner.KafkaHost, l.Owner.KafkaPort
	}
}

func handleJoinGroup(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.JoinGroupRequest)
	jr := kafkagroup.JoinRequest{Group: req.Group, MemberID: req.MemberID, InstanceID: strOr(req.InstanceID),
		ClientID: sl.clientID, ClientHost: clientHost(c), ProtocolType: req.ProtocolType,
		SessionTimeout: time.Duration(req.SessionTimeoutMillis) * time.Millisecond, RequireKnownMemberID: req.Version >= 4,
		SkipAssignment: req.Version >= 9}
	if req.Version >= 1 {
		jr.RebalanceTimeout = time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond
	}
	for _, p := range req.Protocols {
		jr.Protocols = append(jr.Protocols, kafkagroup.Protocol{Name: p.Name, Metadata: p.Metadata})
	}
	g := c.s.groups
	if code := g.coordinateReq(c, req.Group); code != 0 {
		resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode, resp.Generation = code, -1
		sl.finish(resp)
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.c.Join(c.s.cfg.Clock(), jr, func(r kafkagroup.JoinResult) {
		resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode, resp.Generation, resp.MemberID, resp.LeaderID = r.Err, r.Generation, r.MemberID, r.Leader
		resp.SkipAssignment = r.SkipAssignment
		resp.ProtocolType = ptrOrNil(r.ProtocolType)
		if r.Err == 0 || req.Version < 7 {
			p := r.Protocol
			resp.Protocol = &p
		}
		for _, m := range r.Members {
			rm := kmsg.NewJoinGroupResponseMember()
			rm.MemberID, rm.InstanceID, rm.ProtocolMetadata = m.MemberID, ptrOrNil(m.InstanceID), m.Metadata
			resp.Members = append(resp.Members, rm)
		}
		sl.finish(resp)
	})
}

func handleSyncGroup(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.SyncGroupRequest)
	sr := kafkagroup.SyncRequest{Group: req.Group, MemberID: req.MemberID, InstanceID: strOr(req.InstanceID),
		Generation: req.Generation, ProtocolType: strOr(req.ProtocolType), Protocol: strOr(req.Protocol)}
	if len(req.GroupAssignment) > 0 {
		sr.Assignments = map[string][]byte{}
		for _, a := range req.GroupAssignment {
			sr.Assignments[a.MemberID] = a.MemberAssignment
		}
	}
	g := c.s.groups
	if code := g.coordinateReq(c, req.Group); code != 0 {
		resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
		resp.ErrorCode, resp.MemberAssignment = code, []byte{}
		sl.finish(resp)
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.c.Sync(c.s.cfg.Clock(), sr, func(r kafkagroup.SyncResult) {
		resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
		resp.ErrorCode, resp.MemberAssignment = r.Err, r.Assignment
		if resp.MemberAssignment == nil {
			resp.MemberAssignment = []byte{}
		}
		resp.ProtocolType, resp.Protocol = ptrOrNil(r.ProtocolType), ptrOrNil(r.Protocol)
		sl.finish(resp)
	})
}

func handleHeartbeat(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.HeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	g := c.s.groups
	if resp.ErrorCode = g.coordinateReq(c, req.Group); resp.ErrorCode == 0 {
		g.mu.Lock()
		resp.ErrorCode = g.c.Heartbeat(c.s.cfg.Clock(), req.Group, req.MemberID, strOr(req.InstanceID), req.Generation)
		g.mu.Unlock()
	}
	sl.finish(resp)
}

func handleLeaveGroup(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.LeaveGroupRequest)
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	var ms []kafkagroup.LeaveMember
	if req.Version < 3 {
		ms = []kafkagroup.LeaveMember{{MemberID: req.MemberID}}
	} else {
		for _, m := range req.Members {
			ms = append(ms, kafkagroup.LeaveMember{MemberID: m.MemberID, InstanceID: strOr(m.InstanceID)})
		}
	}
	g := c.s.groups
	top := g.coordinateReq(c, req.Group)
	codes := make([]int16, len(ms))
	if top == 0 {
		g.mu.Lock()
		top, codes = g.c.Leave(c.s.cfg.Clock(), req.Group, ms)
		g.mu.Unlock()
	} else {
		for i := range codes {
			codes[i] = top
		}
	}
	if req.Version < 3 {
		resp.ErrorCode = top
	} else {
		for i, m := range req.Members {
			rm := kmsg.NewLeaveGroupResponseMember()
			rm.MemberID, rm.InstanceID, rm.ErrorCode = m.MemberID, m.InstanceID, codes[i]
			resp.Members = append(resp.Members, rm)
		}
	}
	sl.finish(resp)
}

func handleDescribeGroups(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.DescribeGroupsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	g := c.s.groups
	codes := make([]int16, len(req.Groups))
	for i, id := range req.Groups {
		codes[i] = g.coordinateReq(c, id)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, id := range req.Groups {
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group = id
		if codes[i] != 0 {
			rg.ErrorCode = codes[i]
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		gr := g.c.Group(id)
		if gr == nil {
			rg.State = "Dead"
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		rg.State, rg.ProtocolType, rg.Protocol = gr.State.String(), gr.ProtocolType, gr.Protocol
		if gr.State == kafkagroup.Empty && rg.ProtocolType == "" {
			rg.ProtocolType = "consumer"
		}
		for _, m := range gr.Members {
			rm := kmsg.NewDescribeGroupsResponseGroupMember()
			rm.MemberID, rm.InstanceID, rm.ClientID, rm.ClientHost = m.ID, ptrOrNil(m.InstanceID), m.ClientID, m.ClientHost
			for _, p := range m.Protocols {
				if p.Name == gr.Protocol {
					rm.ProtocolMetadata = p.Metadata
				}
			}
			rm.MemberAssignment = m.Assignment
			rg.Members = append(rg.Members, rm)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	sl.finish(resp)
}

func handleListGroups(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.ListGroupsRequest)
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	g := c.s.groups
	g.loadListed(c)
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, gr := range g.c.Groups() {
		if _, ok := g.epochs[gr.ID]; !ok {
			continue
		}
		state := gr.State.String()
		if len(req.StatesFilter) > 0 && !slices.Contains(req.StatesFilter, state) {
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.ProtocolType, lg.GroupState, lg.GroupType = gr.ID, gr.ProtocolType, state, "classic"
		if lg.ProtocolType == "" {
			lg.ProtocolType = "consumer"
		}
		if len(req.TypesFilter) > 0 && !slices.Contains(req.TypesFilter, "classic") {
			continue
		}
		resp.Groups = append(resp.Groups, lg)
	}
	sl.finish(resp)
}

func handleDeleteGroups(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.DeleteGroupsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
	defer cancel()
	g := c.s.groups
	for _, id := range req.Groups {
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group = id
		if rg.ErrorCode = g.coordinateReq(c, id); rg.ErrorCode != 0 {
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		g.mu.Lock()
		rg.ErrorCode = g.c.Delete(id)
		topics := g.topicList(id)
		if rg.ErrorCode == 0 {
			delete(g.topics, id)
		}
		g.mu.Unlock()
		if rg.ErrorCode == 0 {
			// The group's subscriptions go with it.
			for _, full := range topics {
				t, err := broker.ParseTopicName(full)
				if err != nil {
					continue
				}
				if err := c.s.deleteGroupOffsets(ctx, t, id, nil); err != nil {
					c.log.Warn("DeleteGroups: a subscription of the group was not deleted", "group", id, "topic", full, "err", err)
				}
			}
			c.log.Info("Kafka group deleted", "group", id)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	sl.finish(resp)
}

// deleteGroupOffsets deletes group's positions (subscriptions) on the
// given partitions of t, or on all of them (parts nil).
func (s *Server) deleteGroupOffsets(ctx context.Context, t broker.TopicName, group string, parts []int32) error {
	if parts == nil {
		n, err := s.b.KafkaPartitions(ctx, t, false)
		if err != nil {
			return err
		}
		for i := range n {
			parts = append(parts, int32(i))
		}
	}
	for _, p := range parts {
		tp, err := s.b.KafkaPartition(ctx, t, p)
		if owner, pt, ok := elsewhere(err); ok {
			err = s.b.DeleteKafkaOffsetAt(ctx, owner, pt, group)
		} else if err == nil {
			err = tp.DeleteKafkaOffset(ctx, group)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// elsewhere says whether err is a partition's being owned by another
// broker, and which broker and partition.
func elsewhere(err error) (broker.BrokerInfo, broker.TopicName, bool) {
	var ne *broker.NotOwnerError
	if !errors.As(err, &ne) || ne.Owner.WebURL == "" {
		return broker.BrokerInfo{}, broker.TopicName{}, false
	}
	t, perr := broker.ParseTopicName(ne.Topic)
	return ne.Owner, t, perr == nil
}

// coordinateReq is coordinate for a request of connection c.
func (g *groups) coordinateReq(c *conn, group string) int16 {
	ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
	defer cancel()
	return g.coordinate(ctx, group)
}

// loadListed loads the stored groups this broker coordinates (or is the
// one chosen to), so that ListGroups lists them.
func (g *groups) loadListed(c *conn) {
	ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
	defer cancel()
	recs, err := g.s.b.KafkaGroups(ctx)
	if err != nil {
		c.log.Warn("ListGroups: reading the stored groups failed", "err", err)
		return
	}
	for _, rec := range recs {
		gr, _, err := kafkagroup.Unmarshal(rec)
		if err != nil {
			continue
		}
		if l, err := g.s.b.LookupTopic(ctx, g.s.b.KafkaGroupTopic(gr.ID), false); err == nil && l.Self {
			g.coordinate(ctx, gr.ID)
		}
	}
}
