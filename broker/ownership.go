package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/meta"
)

// Ownership: which broker serves which bundle (see bundles.go), as in
// Pulsar, through the metadata store:
//
//	/brokers/<id>                         ephemeral: BrokerInfo and its load (LoadReport)
//	/namespace/<tenant>/<ns>/<0xLO_0xHI>  ephemeral: the owner's BrokerInfo
//	/loadbalance/unloaded/<tenant>/<ns>/<0xLO_0xHI>  persistent hint: the broker it was unloaded from
//
// A broker owns a bundle while it holds the bundle's ephemeral node; only
// the owner loads the bundle's topics (Broker.Topic checks), so that two
// brokers never serve one topic. The node goes with the owner's session:
// when a broker dies, its bundles are free once ZooKeeper expires the
// session, and the next lookup gives them to a live broker, whose opening
// of each managed ledger fences the dead one's ledgers.
//
// A lookup of a topic (Pulsar LOOKUP, HTTP lookup, Kafka Metadata) answers
// with the owner of its bundle. A bundle nobody owns goes to the least
// loaded live broker (fewest bundles, then least traffic; see choose): if
// that is this broker it takes the bundle at once, otherwise the answer
// names the chosen broker, which takes it when the client comes
// (authoritative lookup, or first use of a topic).
//
// A broker gives up its bundles when told to (unload, split, shutdown): it
// refuses new lookups of the bundle with a retriable error, closes its
// topics (clients reconnect through lookup) and deletes the node. It
// loses them all when its session expires, or when it has been cut off
// from the store longer than Config.OwnershipLossTimeout: it then closes
// their topics at once, so that it never serves beside a new owner (whose
// fencing would anyway make its appends fail).

// Errors of ownership.
var (
	// ErrNotOwner: another broker owns the topic's bundle. It is a
	// *NotOwnerError naming the owner.
	ErrNotOwner = errors.New("topic owned by another broker")
	// ErrBundleUnloading: the bundle is being handed over or is not owned
	// by a reachable broker yet; try again shortly.
	ErrBundleUnloading = errors.New("bundle is being unloaded")
	// ErrBundleNotFound: no such bundle in the namespace.
	ErrBundleNotFound = errors.New("bundle not found")
)

// NotOwnerError says which broker owns a topic (Owner.ID is empty when
// none does yet and another was chosen: Owner is that one).
type NotOwnerError struct {
	Topic string
	Owner BrokerInfo
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("%v: %s is served by broker %s", ErrNotOwner, e.Topic, e.Owner.ID)
}

func (e *NotOwnerError) Unwrap() error { return ErrNotOwner }

// BrokerInfo is how clients reach a broker. ID is its Pulsar address
// (host:port), unique in the cluster; Instance differs at every start, so
// that a node left by a previous run of the same broker is told apart.
type BrokerInfo struct {
	ID        string `json:"id"`
	PulsarURL string `json:"pulsarServiceUrl"`
	WebURL    string `json:"webServiceUrl"`
	KafkaHost string `json:"kafkaHost,omitempty"`
	KafkaPort int32  `json:"kafkaPort,omitempty"`
	NodeID    int32  `json:"kafkaNodeId"`
	Instance  string `json:"instance"`
}

// LoadReport is a broker's load, in its registration.
type LoadReport struct {
	Bundles    int     `json:"bundles"`
	Topics     int     `json:"topics"`
	MsgRateIn  float64 `json:"msgRateIn"`
	MsgRateOut float64 `json:"msgRateOut"`
	CPU        float64 `json:"cpuPercent"` // of the whole machine
	AtMs       int64   `json:"reportedAtMs"`
}

// msgRate is the traffic used to compare brokers.
func (l LoadReport) msgRate() float64 { return l.MsgRateIn + l.MsgRateOut }

// brokerRecord is the value of /brokers/<id>.
type brokerRecord struct {
	BrokerInfo
	Cluster     string     `json:"cluster"`
	Version     string     `json:"version,omitempty"`
	StartedAtMs int64      `json:"startedAtMs"`
	Load        LoadReport `json:"load"`
}

// LiveBroker is a registered broker with its last load report.
type LiveBroker struct {
	Info        BrokerInfo
	Cluster     string
	StartedAtMs int64
	Load        LoadReport
}

const (
	unloadHintsRoot = "/loadbalance/unloaded"
	// unloadHintTTL: how long a broker a bundle was unloaded from is
	// passed over when the bundle is assigned again.
	unloadHintTTL = time.Minute
	// kafkaNodeIDsRoot maps broker ids to their Kafka node ids, which
	// stay the same across restarts.
	kafkaNodeIDsRoot   = "/kafka/node-ids"
	kafkaNodeIDCounter = "/kafka/node-id-counter"
)

// ownedBundle is a bundle this broker holds.
type ownedBundle struct {
	b         Bundle
	path      string
	releasing bool
	epoch     uint64 // distinct for every taking of a bundle by this broker
}

// ownership is a broker's side of bundle ownership.
type ownership struct {
	b     *Broker
	store meta.Store
	log   *slog.Logger
	self  BrokerInfo
	start time.Time
	// From Config, copied at start: the broker's config may not be read
	// by background goroutines.
	cluster, version                    string
	lossTimeout, reportEvery, shedEvery time.Duration
	shedThreshold                       float64

	mu       sync.Mutex
	owned    map[string]*ownedBundle // by Bundle.String()
	owners   map[string]*nsOwners    // by "tenant/ns"
	pending  map[string]pendingCount // bundles given to other brokers since their last report
	taking   int                     // bundles this broker chose itself for and is taking
	epochs   uint64                  // bundles taken so far (ownedBundle.epoch)
	assigned map[string]assignment   // bundles lately given to other brokers, by Bundle.String()
	brokers  *brokerList
	closed   bool

	stop chan struct{}
	done sync.WaitGroup

	loadMu     sync.Mutex              // guards the load sampling below (load.go)
	traffic    map[*Topic]topicTraffic // counters at the last load report
	lastReport time.Time
	lastCPU    time.Duration
}

// nsOwners caches the owner nodes of one namespace; a watch on the
// namespace's node marks it stale.
type nsOwners struct {
	mu     sync.Mutex
	valid  bool
	owners []bundleOwner
}

// pendingCount counts bundles given to a broker since a time.
type pendingCount struct {
	n     int
	since time.Time
}

type bundleOwner struct {
	b     Bundle
	owner BrokerInfo
}

// brokerList caches the live brokers; a watch on /brokers marks it stale.
type brokerList struct {
	mu    sync.Mutex
	valid bool
	armed bool // a watch is set
	list  []LiveBroker
}

func newInstanceID() string {
	var r [8]byte
	rand.Read(r[:])
	return hex.EncodeToString(r[:])
}

// startOwnership registers the broker and starts its background work:
// load reports, the load shedder and watching the session.
func (b *Broker) startOwnership(ctx context.Context) error {
	o := &ownership{b: b, store: b.cfg.Meta, log: b.log.With("component", "ownership"), self: b.cfg.Advertised,
		start: time.Now(), owned: map[string]*ownedBundle{}, owners: map[string]*nsOwners{}, pending: map[string]pendingCount{}, assigned: map[string]assignment{},
		brokers: &brokerList{}, stop: make(chan struct{})}
	o.cluster, o.version = b.cfg.Cluster, b.cfg.Version
	o.lossTimeout, o.reportEvery, o.shedEvery, o.shedThreshold = b.cfg.OwnershipLossTimeout, b.cfg.LoadReportInterval,
		b.cfg.LoadShedInterval, b.cfg.LoadShedThreshold
	o.self.Instance = newInstanceID()
	if o.self.ID == "" {
		o.self.ID = b.cfg.Name
	}
	id, err := o.kafkaNodeID(ctx)
	if err != nil {
		return fmt.Errorf("broker: Kafka node id: %w", err)
	}
	o.self.NodeID = id
	// Watched from before the registration, so that an expiry right after
	// it is seen (and the broker registers again).
	events, cancel := o.store.SessionEvents()
	if err := o.register(ctx); err != nil {
		cancel()
		return err
	}
	b.own = o
	o.done.Add(2)
	go func() {
		defer o.done.Done()
		defer cancel()
		o.watchSession(events)
	}()
	go func() {
		defer o.done.Done()
		o.reportLoop()
	}()
	return nil
}

// kafkaNodeID returns this broker's Kafka node id, allocating one on its
// first start.
func (o *ownership) kafkaNodeID(ctx context.Context) (int32, error) {
	p := meta.Join(kafkaNodeIDsRoot, escapeNodeName(o.self.ID))
	for {
		v, _, err := o.store.Get(ctx, p)
		if err == nil {
			var id int32
			if err := json.Unmarshal(v, &id); err != nil {
				return 0, fmt.Errorf("%s: %w", p, err)
			}
			return id, nil
		}
		if !errors.Is(err, meta.ErrNotFound) {
			return 0, err
		}
		gen, err := meta.NewIDGenerator(o.store, kafkaNodeIDCounter, 1)
		if err != nil {
			return 0, err
		}
		n, err := gen.Next(ctx)
		if err != nil {
			return 0, err
		}
		n-- // ids count from 1: the first broker is node 0, as in Kafka
		if n > 1<<31-1 {
			return 0, errors.New("out of Kafka node ids")
		}
		if err := meta.EnsurePath(ctx, o.store, kafkaNodeIDsRoot); err != nil {
			return 0, err
		}
		v, _ = json.Marshal(int32(n))
		if _, err := o.store.Create(ctx, p, v, 0); err != nil && !errors.Is(err, meta.ErrExists) {
			return 0, err
		}
	}
}

// escapeNodeName makes a broker id (host:port) one path element.
func escapeNodeName(s string) string {
	return strings.NewReplacer("%", "%25", "/", "%2F").Replace(s)
}

// registrationPath is /brokers/<id>.
func (o *ownership) registrationPath() string {
	return meta.Join(meta.BrokersRoot, escapeNodeName(o.self.ID))
}

func (o *ownership) record() brokerRecord {
	return brokerRecord{BrokerInfo: o.self, Cluster: o.cluster, Version: o.version,
		StartedAtMs: o.start.UnixMilli(), Load: o.load()}
}

// register creates /brokers/<id>. A node of the same id left by an
// earlier run (whose session has not expired yet) is replaced.
func (o *ownership) register(ctx context.Context) error {
	if err := meta.EnsurePath(ctx, o.store, meta.BrokersRoot); err != nil {
		return err
	}
	p := o.registrationPath()
	v, _ := json.Marshal(o.record())
	for range 3 {
		_, err := o.store.Create(ctx, p, v, meta.Ephemeral)
		if !errors.Is(err, meta.ErrExists) {
			if err != nil {
				return fmt.Errorf("broker: registering under %s: %w", meta.BrokersRoot, err)
			}
			return nil
		}
		var old brokerRecord
		cur, st, err := o.store.Get(ctx, p)
		if err == nil && json.Unmarshal(cur, &old) == nil && old.Instance == o.self.Instance {
			return nil // ours (a retried create that went through)
		}
		if err == nil {
			o.log.Info("replacing the registration of an earlier run of this broker", "path", p)
			err = o.store.Delete(ctx, p, st.Version)
		}
		if err != nil && !errors.Is(err, meta.ErrNotFound) && !errors.Is(err, meta.ErrBadVersion) {
			return err
		}
	}
	return fmt.Errorf("broker: %s is registered by another process: is a broker with the same advertised address running?", p)
}

// Self is this broker's BrokerInfo.
func (b *Broker) Self() BrokerInfo { return b.own.self }

// LiveBrokers returns the registered brokers, sorted by id.
func (b *Broker) LiveBrokers(ctx context.Context) ([]LiveBroker, error) {
	return b.own.liveBrokers(ctx, false)
}

// liveBrokers lists the registered brokers; fresh re-reads them (their
// loads change without a children event).
func (o *ownership) liveBrokers(ctx context.Context, fresh bool) ([]LiveBroker, error) {
	bl := o.brokers
	bl.mu.Lock()
	defer bl.mu.Unlock()
	if bl.valid && !fresh {
		return bl.list, nil
	}
	var names []string
	var ev <-chan meta.Event
	var err error
	if bl.armed {
		names, err = o.store.Children(ctx, meta.BrokersRoot) // a fresh read: the watch is set
	} else {
		names, ev, err = o.store.ChildrenW(ctx, meta.BrokersRoot)
	}
	if err != nil {
		return nil, err
	}
	var list []LiveBroker
	for _, n := range names {
		v, _, err := o.store.Get(ctx, meta.Join(meta.BrokersRoot, n))
		if errors.Is(err, meta.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var r brokerRecord
		if err := json.Unmarshal(v, &r); err != nil || r.ID == "" {
			o.log.Warn("ignoring a bad broker registration", "broker", n, "err", err)
			continue
		}
		if r.Cluster != "" && r.Cluster != o.cluster {
			continue
		}
		list = append(list, LiveBroker{Info: r.BrokerInfo, Cluster: r.Cluster, StartedAtMs: r.StartedAtMs, Load: r.Load})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Info.ID < list[j].Info.ID })
	bl.list, bl.valid = list, true
	if ev != nil {
		bl.armed = true
		go func() {
			<-ev
			bl.mu.Lock()
			bl.valid, bl.armed = false, false
			bl.mu.Unlock()
		}()
	}
	return list, nil
}

// Lookup is the answer to a topic lookup.
type Lookup struct {
	Owner BrokerInfo
	// Self: this broker owns the topic (or has just taken it).
	Self bool
	// Assigned: nobody owns the topic yet; Owner was chosen to and takes
	// it when asked with authority.
	Assigned bool
}

// LookupTopic says which broker serves t. A topic of a bundle nobody owns
// is given to the least loaded broker: this one takes it at once if it
// is the one, or if authoritative (the client was sent here by a
// lookup). ErrBundleUnloading while the bundle is being handed over.
func (b *Broker) LookupTopic(ctx context.Context, t TopicName, authoritative bool) (Lookup, error) {
	o := b.own
	h := TopicHash(t)
	for attempt := 0; ; attempt++ {
		l, ok, ours, err := o.ownerOf(ctx, t.Tenant, t.Namespace, h)
		if err == nil && ok && !l.Self && authoritative {
			// Sent here to take it: the cached owner may have just let it
			// go (the cache learns of that by a watch). Read again.
			o.invalidate(t.Tenant, t.Namespace)
			l, ok, ours, err = o.ownerOf(ctx, t.Tenant, t.Namespace, h)
		}
		if err != nil || ok {
			return l, err
		}
		bd, err := b.BundleOf(ctx, t)
		if err != nil {
			return Lookup{}, err
		}
		target, taking := o.self, false
		if !authoritative && !ours {
			if target, taking, err = o.choose(ctx, bd); err != nil {
				return Lookup{}, err
			}
		}
		if target.ID != o.self.ID {
			return Lookup{Owner: target, Assigned: true}, nil
		}
		l, err = o.claim(ctx, bd)
		if taking {
			o.mu.Lock()
			o.taking--
			o.mu.Unlock()
		}
		if errors.Is(err, errClaimRace) && attempt < 3 {
			continue
		}
		return l, err
	}
}

// assignmentTTL: how long a bundle given to another broker is given to it
// again while nobody owns it.
const assignmentTTL = 10 * time.Second

type assignment struct {
	to BrokerInfo
	at time.Time
}

// ensureOwned returns nil if this broker owns t's bundle, taking it if
// nobody does; a *NotOwnerError if another broker does.
func (b *Broker) ensureOwned(ctx context.Context, t TopicName) error {
	l, err := b.LookupTopic(ctx, t, true)
	if err != nil {
		return err
	}
	if !l.Self {
		return &NotOwnerError{Topic: t.String(), Owner: l.Owner}
	}
	return nil
}

// ownerOf finds the owner of hash h in tenant/ns, from what this broker
// holds, then the namespace's owner nodes. ours: the node is this
// broker's but not held (see below), so it should claim it.
func (o *ownership) ownerOf(ctx context.Context, tenant, ns string, h uint32) (_ Lookup, found, ours bool, _ error) {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return Lookup{}, false, false, ErrBrokerClosed
	}
	for _, ob := range o.owned {
		if ob.b.Tenant == tenant && ob.b.Namespace == ns && ob.b.Contains(h) {
			releasing := ob.releasing
			o.mu.Unlock()
			if releasing {
				return Lookup{}, false, false, fmt.Errorf("%w: %s", ErrBundleUnloading, ob.b)
			}
			return Lookup{Owner: o.self, Self: true}, true, false, nil
		}
	}
	o.mu.Unlock()
	owners, err := o.namespaceOwners(ctx, tenant, ns)
	if err != nil {
		return Lookup{}, false, false, err
	}
	for _, bo := range owners {
		if !bo.b.Contains(h) {
			continue
		}
		if bo.owner.ID == o.self.ID {
			// Ours but not held: left by an earlier run, or held through a
			// disconnection after which we closed our topics. Claim it
			// again (which adopts or replaces the node).
			return Lookup{}, false, true, nil
		}
		return Lookup{Owner: bo.owner}, true, false, nil
	}
	return Lookup{}, false, false, nil
}

func nsOwnerPath(tenant, ns string) string { return meta.Join(meta.NamespaceOwnerRoot, tenant, ns) }

// namespaceOwners returns the owner nodes of tenant/ns, cached until they
// change.
func (o *ownership) namespaceOwners(ctx context.Context, tenant, ns string) ([]bundleOwner, error) {
	key := tenant + "/" + ns
	o.mu.Lock()
	c := o.owners[key]
	if c == nil {
		c = &nsOwners{}
		o.owners[key] = c
	}
	o.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.valid {
		return c.owners, nil
	}
	dir := nsOwnerPath(tenant, ns)
	if err := meta.EnsurePath(ctx, o.store, dir); err != nil {
		return nil, err
	}
	names, ev, err := o.store.ChildrenW(ctx, dir)
	if err != nil {
		return nil, err
	}
	var owners []bundleOwner
	for _, n := range names {
		bd, err := ParseBundle(tenant, ns, n)
		if err != nil {
			continue
		}
		v, _, err := o.store.Get(ctx, meta.Join(dir, n))
		if errors.Is(err, meta.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var bi BrokerInfo
		if err := json.Unmarshal(v, &bi); err != nil || bi.ID == "" {
			o.log.Warn("ignoring a bad ownership node", "path", meta.Join(dir, n), "err", err)
			continue
		}
		owners = append(owners, bundleOwner{b: bd, owner: bi})
	}
	c.owners, c.valid = owners, true
	go func() {
		<-ev
		c.mu.Lock()
		c.valid = false
		c.mu.Unlock()
		o.checkHeld(tenant, ns)
	}()
	return owners, nil
}

// checkHeld, after a change of tenant/ns's owner nodes, gives up the
// bundles this broker holds whose node is gone (deleted by hand, or with
// an expired session).
func (o *ownership) checkHeld(tenant, ns string) {
	o.mu.Lock()
	var held []*ownedBundle
	for _, ob := range o.owned {
		if ob.b.Tenant == tenant && ob.b.Namespace == ns && !ob.releasing {
			held = append(held, ob)
		}
	}
	closed := o.closed
	o.mu.Unlock()
	if closed || len(held) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, ob := range held {
		v, _, err := o.store.Get(ctx, ob.path)
		var bi BrokerInfo
		if err == nil && json.Unmarshal(v, &bi) == nil && bi.Instance == o.self.Instance {
			continue
		}
		if err != nil && !errors.Is(err, meta.ErrNotFound) {
			continue // cannot tell; the session watcher handles a lost store
		}
		o.log.Warn("lost the ownership of a bundle: closing its topics", "bundle", ob.b.String())
		o.drop(ob)
	}
	o.namespaceOwners(ctx, tenant, ns) // re-arm the watch
}

var errClaimRace = errors.New("bundle boundaries changed while taking it")

// claim takes bundle bd for this broker, or finds its owner.
func (o *ownership) claim(ctx context.Context, bd Bundle) (Lookup, error) {
	p := meta.Join(nsOwnerPath(bd.Tenant, bd.Namespace), bd.Range())
	v, _ := json.Marshal(o.self)
	for range 3 {
		_, err := o.store.Create(ctx, p, v, meta.Ephemeral)
		if err == nil {
			break
		}
		if !errors.Is(err, meta.ErrExists) {
			return Lookup{}, fmt.Errorf("broker: taking bundle %s: %w", bd, err)
		}
		cur, st, err := o.store.Get(ctx, p)
		if errors.Is(err, meta.ErrNotFound) {
			continue
		}
		if err != nil {
			return Lookup{}, err
		}
		var bi BrokerInfo
		if err := json.Unmarshal(cur, &bi); err != nil {
			return Lookup{}, fmt.Errorf("broker: bad ownership node %s: %w", p, err)
		}
		switch {
		case bi.Instance == o.self.Instance:
			// Ours already (held through a disconnection): adopt it.
		case bi.ID == o.self.ID:
			o.log.Info("replacing the ownership node of an earlier run of this broker", "bundle", bd.String())
			if err := o.store.Delete(ctx, p, st.Version); err != nil && !errors.Is(err, meta.ErrNotFound) && !errors.Is(err, meta.ErrBadVersion) {
				return Lookup{}, err
			}
			continue
		default:
			o.invalidate(bd.Tenant, bd.Namespace)
			return Lookup{Owner: bi}, nil
		}
		break
	}
	// Check that the bundle still is one (a split may have just replaced
	// it) and that no node of an overlapping range is held, from a fresh
	// read: a node taken on boundaries read before a split is given back.
	ok, err := o.stillABundle(ctx, bd)
	if err != nil || !ok {
		o.store.Delete(context.WithoutCancel(ctx), p, meta.AnyVersion)
		o.invalidate(bd.Tenant, bd.Namespace)
		if err == nil {
			err = errClaimRace
		}
		return Lookup{}, err
	}
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		o.store.Delete(context.WithoutCancel(ctx), p, meta.AnyVersion)
		return Lookup{}, ErrBrokerClosed
	}
	delete(o.assigned, bd.String())
	if _, held := o.owned[bd.String()]; !held {
		o.epochs++
		o.owned[bd.String()] = &ownedBundle{b: bd, path: p, epoch: o.epochs}
		o.log.Info("bundle taken", "bundle", bd.String())
	}
	o.mu.Unlock()
	o.invalidate(bd.Tenant, bd.Namespace)
	o.store.Delete(context.WithoutCancel(ctx), meta.Join(unloadHintsRoot, bd.Tenant, bd.Namespace, bd.Range()), meta.AnyVersion)
	return Lookup{Owner: o.self, Self: true}, nil
}

func (o *ownership) stillABundle(ctx context.Context, bd Bundle) (bool, error) {
	bs, err := o.b.Bundles(ctx, bd.Tenant, bd.Namespace)
	if err != nil {
		return false, err
	}
	found := false
	for _, x := range bs {
		if x == bd {
			found = true
		}
	}
	if !found {
		return false, nil
	}
	names, err := o.store.Children(ctx, nsOwnerPath(bd.Tenant, bd.Namespace))
	if err != nil {
		return false, err
	}
	for _, n := range names {
		x, err := ParseBundle(bd.Tenant, bd.Namespace, n)
		if err == nil && x != bd && x.overlaps(bd) {
			return false, nil
		}
	}
	return true, nil
}

func (o *ownership) invalidate(tenant, ns string) {
	o.mu.Lock()
	c := o.owners[tenant+"/"+ns]
	o.mu.Unlock()
	if c != nil {
		c.mu.Lock()
		c.valid = false
		c.mu.Unlock()
	}
}

// unloadHint is the value of an unload hint.
type unloadHint struct {
	From string `json:"from"`
	AtMs int64  `json:"atMs"`
}

// choose picks the broker for bundle bd: the live broker with the fewest
// bundles (counting those it was given since its last report), then the
// least traffic, then this broker; the broker bd was just unloaded from
// only if it is the only one.
func (o *ownership) choose(ctx context.Context, bd Bundle) (BrokerInfo, bool, error) {
	// A decision made a moment ago is answered from memory and the cached
	// broker list: a Kafka client asks for an unowned partition's leader
	// at every metadata refresh until its broker takes it.
	if cached, err := o.liveBrokers(ctx, false); err == nil {
		o.mu.Lock()
		to, taking, ok := o.decidedLocked(bd, cached)
		o.mu.Unlock()
		if ok {
			return to, taking, nil
		}
	}
	list, err := o.liveBrokers(ctx, true)
	if err != nil {
		return BrokerInfo{}, false, err
	}
	var avoid string
	if v, _, err := o.store.Get(ctx, meta.Join(unloadHintsRoot, bd.Tenant, bd.Namespace, bd.Range())); err == nil {
		var h unloadHint
		if json.Unmarshal(v, &h) == nil && time.Since(time.UnixMilli(h.AtMs)) < unloadHintTTL {
			avoid = h.From
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	key := bd.String()
	if to, taking, ok := o.decidedLocked(bd, list); ok {
		return to, taking, nil // decided by a lookup that ran beside this one
	}
	for k, a := range o.assigned { // keep the map small
		if time.Since(a.at) > assignmentTTL {
			delete(o.assigned, k)
		}
	}
	var best *LiveBroker
	bestBundles := 0
	for i := range list {
		lb := &list[i]
		if lb.Info.ID == avoid && len(list) > 1 {
			continue
		}
		pc := o.pending[lb.Info.ID]
		if pc.n > 0 && lb.Load.AtMs > pc.since.UnixMilli() {
			pc = pendingCount{} // its report counts them (or they were never taken)
			delete(o.pending, lb.Info.ID)
		}
		n := lb.Load.Bundles + pc.n
		if lb.Info.ID == o.self.ID {
			n = len(o.owned) + o.taking // exact for ourselves
		}
		// Ties go to this broker: brokers choosing at once from the same
		// stale reports then spread new bundles over themselves instead of
		// all picking the same one.
		if best == nil || n < bestBundles || (n == bestBundles && (lb.Load.msgRate() < best.Load.msgRate() ||
			(lb.Load.msgRate() == best.Load.msgRate() && lb.Info.ID == o.self.ID))) {
			best, bestBundles = lb, n
		}
	}
	if best == nil {
		if avoid == o.self.ID || len(list) == 0 {
			// Registration lost (an expired session, being renewed): serve
			// it ourselves rather than fail.
			return o.self, o.noteChoiceLocked(o.self, true), nil
		}
		return BrokerInfo{}, false, fmt.Errorf("%w: no live broker", ErrBundleUnloading)
	}
	o.assigned[key] = assignment{to: best.Info, at: time.Now()}
	o.log.Debug("bundle assigned", "bundle", key, "broker", best.Info.ID)
	return best.Info, o.noteChoiceLocked(best.Info, true), nil
}

// decidedLocked returns the broker bd was given to lately, if any: this
// one if it has taken bd since, or the broker chosen, while it is live and
// the choice is younger than assignmentTTL.
func (o *ownership) decidedLocked(bd Bundle, live []LiveBroker) (BrokerInfo, bool, bool) {
	key := bd.String()
	if ob := o.owned[key]; ob != nil && !ob.releasing {
		return o.self, o.noteChoiceLocked(o.self, true), true
	}
	a, ok := o.assigned[key]
	if !ok || time.Since(a.at) > assignmentTTL {
		return BrokerInfo{}, false, false
	}
	for _, lb := range live {
		if lb.Info.ID == a.to.ID {
			// Not taken yet: the same answer, or lookups of its other
			// topics would choose again and split the bundle's clients.
			return a.to, o.noteChoiceLocked(a.to, false), true
		}
	}
	return BrokerInfo{}, false, false
}

// noteChoiceLocked counts a choice of broker to: one more bundle being
// taken by this broker (taking says so; LookupTopic undoes it after its
// claim), or given to another since its last report (when fresh).
func (o *ownership) noteChoiceLocked(to BrokerInfo, fresh bool) (taking bool) {
	if to.ID == o.self.ID {
		o.taking++
		return true
	}
	if fresh {
		pc := o.pending[to.ID]
		if pc.n == 0 {
			pc.since = time.Now()
		}
		pc.n++
		o.pending[to.ID] = pc
	}
	return false
}

// drop gives up ob without deleting its node (it is gone, or the store is
// unreachable): its topics close.
func (o *ownership) drop(ob *ownedBundle) {
	o.mu.Lock()
	if cur := o.owned[ob.b.String()]; cur == ob {
		delete(o.owned, ob.b.String())
	}
	o.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := o.b.closeBundleTopics(ctx, ob.b); err != nil {
		o.log.Warn("closing the topics of a lost bundle", "bundle", ob.b.String(), "err", err)
	}
}

// dropAll gives up every bundle (the session is lost).
func (o *ownership) dropAll(reason string) {
	o.mu.Lock()
	held := make([]*ownedBundle, 0, len(o.owned))
	for _, ob := range o.owned {
		held = append(held, ob)
	}
	o.mu.Unlock()
	if len(held) > 0 {
		o.log.Warn("giving up every bundle: closing their topics", "bundles", len(held), "reason", reason)
	}
	var wg sync.WaitGroup
	for _, ob := range held {
		wg.Go(func() { o.drop(ob) })
	}
	wg.Wait()
	// Topics loaded outside any held bundle cannot exist, but a load in
	// progress may finish after: it is closed by its next ownership check.
}

// closeBundleTopics closes the loaded topics of bd.
func (b *Broker) closeBundleTopics(ctx context.Context, bd Bundle) error {
	prefix := "persistent://" + bd.Tenant + "/" + bd.Namespace + "/"
	var in []*Topic
	for _, t := range b.loadedTopics() {
		if strings.HasPrefix(t.name.String(), prefix) && bd.Contains(TopicHash(t.name)) {
			in = append(in, t)
		}
	}
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, t := range in {
		wg.Go(func() {
			if err := t.Close(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// release hands bd over: lookups of it get ErrBundleUnloading, its topics
// close, then its node is deleted (after a hint, if from is set, that
// makes the next assignment pass this broker over).
func (o *ownership) release(ctx context.Context, bd Bundle, hint bool) error {
	o.mu.Lock()
	ob := o.owned[bd.String()]
	if ob == nil || ob.releasing {
		o.mu.Unlock()
		return nil
	}
	ob.releasing = true
	o.mu.Unlock()
	if hint {
		o.writeHint(ctx, bd)
	}
	err := o.b.closeBundleTopics(ctx, bd)
	if derr := o.store.Delete(ctx, ob.path, meta.AnyVersion); derr != nil && !errors.Is(derr, meta.ErrNotFound) {
		err = errors.Join(err, derr)
	}
	o.mu.Lock()
	if o.owned[bd.String()] == ob {
		delete(o.owned, bd.String())
	}
	o.mu.Unlock()
	o.invalidate(bd.Tenant, bd.Namespace)
	o.log.Info("bundle released", "bundle", bd.String())
	return err
}

func (o *ownership) writeHint(ctx context.Context, bd Bundle) {
	p := meta.Join(unloadHintsRoot, bd.Tenant, bd.Namespace, bd.Range())
	v, _ := json.Marshal(unloadHint{From: o.self.ID, AtMs: time.Now().UnixMilli()})
	if err := meta.EnsurePath(ctx, o.store, meta.Parent(p)); err == nil {
		if _, err := o.store.Set(ctx, p, v, meta.AnyVersion); errors.Is(err, meta.ErrNotFound) {
			o.store.Create(ctx, p, v, 0)
		}
	}
}

// OwnedBundles returns the bundles this broker holds, sorted.
func (b *Broker) OwnedBundles() []Bundle {
	o := b.own
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]Bundle, 0, len(o.owned))
	for _, ob := range o.owned {
		out = append(out, ob.b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// BundleOwner returns the broker owning bd, if any.
func (b *Broker) BundleOwner(ctx context.Context, bd Bundle) (BrokerInfo, bool, error) {
	if b.ownsBundle(bd) {
		return b.own.self, true, nil
	}
	owners, err := b.own.namespaceOwners(ctx, bd.Tenant, bd.Namespace)
	if err != nil {
		return BrokerInfo{}, false, err
	}
	for _, bo := range owners {
		if bo.b == bd {
			return bo.owner, true, nil
		}
	}
	return BrokerInfo{}, false, nil
}

// ownsTopic says whether this broker holds (and is not giving up) the
// bundle of t.
func (b *Broker) ownsTopic(t TopicName) bool {
	_, ok := b.OwnerEpoch(t)
	return ok
}

// OwnerEpoch says whether this broker holds (and is not giving up) the
// bundle of t, and which taking of it this is: the epoch changes each time
// the broker takes the bundle again, so state kept about it from an
// earlier taking can be told stale.
func (b *Broker) OwnerEpoch(t TopicName) (uint64, bool) {
	o := b.own
	h := TopicHash(t)
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, ob := range o.owned {
		if ob.b.Tenant == t.Tenant && ob.b.Namespace == t.Namespace && ob.b.Contains(h) {
			return ob.epoch, !ob.releasing
		}
	}
	return 0, false
}

func (b *Broker) ownsBundle(bd Bundle) bool {
	o := b.own
	o.mu.Lock()
	defer o.mu.Unlock()
	ob := o.owned[bd.String()]
	return ob != nil && !ob.releasing
}

// UnloadBundle gives up bd so that another broker takes it on next
// lookup (this broker is passed over for a minute when others are live).
// A *NotOwnerError if another broker owns it; nothing if nobody does.
func (b *Broker) UnloadBundle(ctx context.Context, bd Bundle) error {
	if err := b.checkBundle(ctx, bd); err != nil {
		return err
	}
	if !b.ownsBundle(bd) {
		owner, ok, err := b.BundleOwner(ctx, bd)
		if err != nil || !ok {
			return err
		}
		return &NotOwnerError{Topic: bd.String(), Owner: owner}
	}
	return b.own.release(ctx, bd, true)
}

func (b *Broker) checkBundle(ctx context.Context, bd Bundle) error {
	bs, err := b.Bundles(ctx, bd.Tenant, bd.Namespace)
	if err != nil {
		return err
	}
	for _, x := range bs {
		if x == bd {
			return nil
		}
	}
	return fmt.Errorf("%w: %s", ErrBundleNotFound, bd)
}

// SplitBundle splits bd into two equal halves. The owner splits (a
// *NotOwnerError elsewhere): the namespace's boundaries change, then bd is
// released and each half is assigned on its next lookup.
func (b *Broker) SplitBundle(ctx context.Context, bd Bundle) error {
	if err := b.checkBundle(ctx, bd); err != nil {
		return err
	}
	if !b.ownsBundle(bd) {
		owner, ok, err := b.BundleOwner(ctx, bd)
		if err != nil {
			return err
		}
		if ok {
			return &NotOwnerError{Topic: bd.String(), Owner: owner}
		}
	}
	err := b.UpdateNamespacePolicies(ctx, bd.Tenant, bd.Namespace, func(p *Policies) error {
		bounds := bundleBoundaries(DefaultNumBundles)
		if p.Bundles != nil && len(p.Bundles.Boundaries) > 0 {
			bounds = p.Bundles.Boundaries
		}
		nb, err := splitBoundaries(bounds, bd)
		if err != nil {
			return err
		}
		p.Bundles = &BundlesData{Boundaries: nb, NumBundles: len(nb) - 1}
		return nil
	})
	if err != nil {
		return err
	}
	b.log.Info("bundle split", "bundle", bd.String())
	return b.own.release(ctx, bd, false)
}

// UnloadTopicBundle unloads the bundle of t (partition or non-partitioned
// topic) when other brokers are live, so that the topic moves; with this
// broker alone it closes the topic only.
func (b *Broker) unloadTopicBundle(ctx context.Context, t TopicName) (bool, error) {
	list, err := b.own.liveBrokers(ctx, false)
	if err != nil || len(list) < 2 {
		return false, err
	}
	bd, err := b.BundleOf(ctx, t)
	if err != nil {
		return false, err
	}
	if !b.ownsBundle(bd) {
		return false, nil
	}
	return true, b.own.release(ctx, bd, true)
}

// watchSession follows the metadata store's session: an expiry, or a
// disconnection longer than OwnershipLossTimeout, gives up every bundle;
// a new session registers the broker again.
func (o *ownership) watchSession(events <-chan meta.SessionEvent) {
	var timer *time.Timer
	var fire <-chan time.Time
	expired := false
	for {
		select {
		case <-o.stop:
			if timer != nil {
				timer.Stop()
			}
			return
		case <-fire:
			fire = nil
			o.dropAll(fmt.Sprintf("cut off from the metadata store for %v", o.lossTimeout))
		case ev, ok := <-events:
			if !ok {
				return
			}
			switch ev.State {
			case meta.SessionDisconnected:
				if timer == nil {
					timer = time.NewTimer(o.lossTimeout)
				} else {
					timer.Reset(o.lossTimeout)
				}
				fire = timer.C
			case meta.SessionExpired:
				fire = nil
				expired = true
				o.dropAll("metadata store session expired")
			case meta.SessionConnected:
				fire = nil
				if timer != nil {
					timer.Stop()
				}
				if expired {
					expired = false
					o.brokers.mu.Lock()
					o.brokers.valid = false // its watch was lost with the session
					o.brokers.mu.Unlock()
					o.mu.Lock()
					for _, c := range o.owners {
						c.mu.Lock()
						c.valid = false
						c.mu.Unlock()
					}
					o.mu.Unlock()
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					if err := o.register(ctx); err != nil {
						o.log.Error("registering again after the session expired", "err", err)
					} else {
						o.log.Info("registered again with a new metadata store session")
					}
					cancel()
				}
			case meta.SessionClosed:
				return
			}
		}
	}
}

// close deregisters the broker and hands every bundle over: their topics
// close and their nodes go, so that other brokers take them.
func (o *ownership) close(ctx context.Context) error {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil
	}
	o.closed = true // no more claims; lookups get ErrBrokerClosed
	held := make([]*ownedBundle, 0, len(o.owned))
	for _, ob := range o.owned {
		held = append(held, ob)
	}
	o.mu.Unlock()
	close(o.stop)
	o.done.Wait()
	var errs []error
	if err := o.store.Delete(ctx, o.registrationPath(), meta.AnyVersion); err != nil && !errors.Is(err, meta.ErrNotFound) {
		errs = append(errs, err)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, ob := range held {
		wg.Go(func() {
			if err := o.release(ctx, ob.b, false); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// appendFailed closes the topic when an append failed because another
// broker opened its managed ledger (fencing this one): its clients
// reconnect through lookup and find the new owner.
func (t *Topic) appendFailed(err error) {
	if !errors.Is(err, ledger.ErrFenced) {
		return
	}
	t.fencedOnce.Do(func() {
		t.log.Warn("managed ledger fenced by another broker: closing the topic", "err", err)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			t.Close(ctx)
		}()
	})
}
