package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/magnetar-io/magnetar/meta"
)

// Namespaces and their policies, stored as Pulsar stores them:
//
//	/admin/policies/<tenant>/<namespace>  Policies JSON
//
// Policies keeps Pulsar's JSON field names (those of Pulsar's Policies
// class, which pulsar-admin and pulsaradmin read), for the fields Magnetar
// supports. Every change is a compare-and-set of the node (retried on a
// version conflict), so concurrent changes of different policies of one
// namespace do not undo each other.
//
// What is enforced (see docs/design/0005-admin.md):
//   - deduplicationEnabled overrides Config.Deduplication for the
//     namespace's topics; a change unloads the namespace's loaded topics so
//     that they load again with it (clients reconnect, as after an unload).
//   - autoTopicCreationOverride overrides Config.AutoTopicCreation (and
//     AutoTopicPartitions) for the namespace.
//   - a topic can only be created in a namespace that exists (public/default
//     always does).
//   - retention_policies and message_ttl_in_seconds (enforce.go), and
//     backlog_quota_map (quota.go).

// Policies are a namespace's policies.
type Policies struct {
	Bundles                   *BundlesData               `json:"bundles,omitempty"`
	ReplicationClusters       []string                   `json:"replication_clusters"`
	RetentionPolicies         *RetentionPolicies         `json:"retention_policies,omitempty"`
	MessageTTLInSeconds       *int                       `json:"message_ttl_in_seconds,omitempty"`
	DeduplicationEnabled      *bool                      `json:"deduplicationEnabled,omitempty"`
	AutoTopicCreationOverride *AutoTopicCreationOverride `json:"autoTopicCreationOverride,omitempty"`
	BacklogQuotaMap           map[string]BacklogQuota    `json:"backlog_quota_map"`
	Persistence               *PersistencePolicies       `json:"persistence,omitempty"`
	// SchemaCompatibilityStrategy is stored and served; "UNDEFINED" means
	// the broker's setting applies.
	SchemaCompatibilityStrategy string `json:"schema_compatibility_strategy,omitempty"`
	// Deleted is set while the namespace is being deleted: no topic may be
	// created in it.
	Deleted bool `json:"deleted"`
}

// BundlesData is how a namespace is split into bundles: hash range
// boundaries (hex, "0x00000000" to "0xffffffff").
type BundlesData struct {
	Boundaries []string `json:"boundaries"`
	NumBundles int      `json:"numBundles"`
}

// PersistencePolicies set how the namespace's new ledgers are replicated
// (Pulsar's names): over BookkeeperEnsemble bookies, each entry on
// BookkeeperWriteQuorum of them, acknowledged once BookkeeperAckQuorum
// have it. ManagedLedgerMaxMarkDeleteRate is kept for Pulsar's tools;
// Magnetar's cursors persist on their own schedule.
type PersistencePolicies struct {
	BookkeeperEnsemble             int     `json:"bookkeeperEnsemble"`
	BookkeeperWriteQuorum          int     `json:"bookkeeperWriteQuorum"`
	BookkeeperAckQuorum            int     `json:"bookkeeperAckQuorum"`
	ManagedLedgerMaxMarkDeleteRate float64 `json:"managedLedgerMaxMarkDeleteRate"`
}

// RetentionPolicies keep acknowledged messages up to this age or size
// (-1: no limit; both 0: no retention).
type RetentionPolicies struct {
	RetentionTimeInMinutes int   `json:"retentionTimeInMinutes"`
	RetentionSizeInMB      int64 `json:"retentionSizeInMB"`
}

// BacklogQuota limits a subscription's backlog by size (bytes) or age
// (seconds) and says what happens when it is reached.
type BacklogQuota struct {
	LimitSize int64  `json:"limitSize"`
	LimitTime int64  `json:"limitTime"`
	Policy    string `json:"policy"`
}

// Backlog quota types and policies (Pulsar's names).
const (
	BacklogQuotaDestinationStorage = "destination_storage"
	BacklogQuotaMessageAge         = "message_age"

	BacklogPolicyProducerRequestHold     = "producer_request_hold"
	BacklogPolicyProducerException       = "producer_exception"
	BacklogPolicyConsumerBacklogEviction = "consumer_backlog_eviction"
)

// AutoTopicCreationOverride is a namespace's auto topic creation setting.
type AutoTopicCreationOverride struct {
	Allow                bool   `json:"allowAutoTopicCreation"`
	TopicType            string `json:"topicType"` // "partitioned" or "non-partitioned"
	DefaultNumPartitions *int   `json:"defaultNumPartitions,omitempty"`
}

// Defaults and limits of namespaces.
const (
	DefaultNumBundles = 4
	MaxNumBundles     = 128
)

// bundleBoundaries splits the 32-bit hash range into n equal bundles, as
// Pulsar does: boundaries at multiples of 2^32/n, the last one 0xffffffff.
func bundleBoundaries(n int) []string {
	const full = uint64(1) << 32
	seg := full / uint64(n)
	out := make([]string, 0, n+1)
	for i := range n {
		out = append(out, fmt.Sprintf("0x%08x", uint64(i)*seg))
	}
	return append(out, fmt.Sprintf("0x%08x", full-1))
}

func namespacePath(tenant, ns string) string { return meta.Join(meta.PoliciesRoot, tenant, ns) }

func checkNamespaceName(tenant, ns string) error {
	if err := checkName("tenant", tenant); err != nil {
		return err
	}
	return checkName("namespace", ns)
}

// Namespaces lists the namespaces of tenant as "tenant/namespace", sorted
// (ErrTenantNotFound).
func (b *Broker) Namespaces(ctx context.Context, tenant string) ([]string, error) {
	if _, err := b.Tenant(ctx, tenant); err != nil {
		return nil, err
	}
	names, err := b.children(ctx, meta.Join(meta.PoliciesRoot, tenant))
	if err != nil {
		return nil, err
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = tenant + "/" + n
	}
	return out, nil
}

// CreateNamespace creates tenant/ns with policies p (nil: defaults). The
// bundles default to DefaultNumBundles; replication clusters default to
// the broker's cluster and must be allowed by the tenant. Errors:
// ErrTenantNotFound, ErrAlreadyExists, ErrPreconditionFailed (bad name,
// bad bundles or clusters, bad policies), ErrInvalidRequest.
func (b *Broker) CreateNamespace(ctx context.Context, tenant, ns string, p *Policies) error {
	if err := checkNamespaceName(tenant, ns); err != nil {
		return err
	}
	ti, err := b.Tenant(ctx, tenant)
	if err != nil {
		return err
	}
	var pol Policies
	if p != nil {
		pol = *p
	}
	pol.Deleted = false
	if err := b.completePolicies(ctx, tenant, ti, &pol); err != nil {
		return err
	}
	if err := b.createJSON(ctx, namespacePath(tenant, ns), pol); err != nil {
		if errors.Is(err, meta.ErrExists) {
			return fmt.Errorf("%w: namespace %s/%s", ErrAlreadyExists, tenant, ns)
		}
		return err
	}
	b.log.Info("namespace created", "namespace", tenant+"/"+ns)
	return nil
}

// completePolicies validates the policies of a new namespace and fills in
// defaults.
func (b *Broker) completePolicies(ctx context.Context, tenant string, ti TenantInfo, p *Policies) error {
	switch {
	case p.Bundles == nil || (p.Bundles.NumBundles == 0 && len(p.Bundles.Boundaries) == 0):
		p.Bundles = &BundlesData{NumBundles: DefaultNumBundles, Boundaries: bundleBoundaries(DefaultNumBundles)}
	case len(p.Bundles.Boundaries) == 0:
		n := p.Bundles.NumBundles
		if n < 1 || n > MaxNumBundles {
			return fmt.Errorf("%w: invalid number of bundles %d: it has to be in the range (0, %d]", ErrPreconditionFailed, n, MaxNumBundles)
		}
		p.Bundles = &BundlesData{NumBundles: n, Boundaries: bundleBoundaries(n)}
	default:
		if err := checkBoundaries(p.Bundles.Boundaries); err != nil {
			return err
		}
		p.Bundles = &BundlesData{NumBundles: len(p.Bundles.Boundaries) - 1, Boundaries: slices.Clone(p.Bundles.Boundaries)}
	}
	if len(p.ReplicationClusters) == 0 {
		p.ReplicationClusters = []string{b.cfg.Cluster}
	}
	for _, c := range p.ReplicationClusters {
		if _, err := b.Cluster(ctx, c); err != nil {
			if errors.Is(err, ErrClusterNotFound) {
				return fmt.Errorf("%w: cluster %s does not exist", ErrPreconditionFailed, c)
			}
			return err
		}
		if !slices.Contains(ti.AllowedClusters, c) {
			return fmt.Errorf("%w: cluster %s is not in the list of allowed clusters of tenant %s", ErrPreconditionFailed, c, tenant)
		}
	}
	if p.RetentionPolicies != nil {
		if err := checkRetention(*p.RetentionPolicies); err != nil {
			return err
		}
	}
	if p.MessageTTLInSeconds != nil && *p.MessageTTLInSeconds < 0 {
		return fmt.Errorf("%w: invalid value for message TTL, message TTL must >= 0", ErrPreconditionFailed)
	}
	if p.AutoTopicCreationOverride != nil {
		if err := checkAutoTopicCreation(*p.AutoTopicCreationOverride); err != nil {
			return err
		}
	}
	if p.BacklogQuotaMap == nil {
		p.BacklogQuotaMap = map[string]BacklogQuota{}
	}
	for typ, q := range p.BacklogQuotaMap {
		if err := checkBacklogQuota(typ, q, p.RetentionPolicies); err != nil {
			return err
		}
	}
	if p.SchemaCompatibilityStrategy == "" {
		p.SchemaCompatibilityStrategy = "UNDEFINED"
	} else if p.SchemaCompatibilityStrategy != "UNDEFINED" {
		if _, err := ParseCompatibilityStrategy(p.SchemaCompatibilityStrategy); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidRequest, err)
		}
	}
	return nil
}

func checkBoundaries(bs []string) error {
	if len(bs) < 2 || bs[0] != "0x00000000" || bs[len(bs)-1] != "0xffffffff" {
		return fmt.Errorf("%w: bundle boundaries must go from 0x00000000 to 0xffffffff", ErrPreconditionFailed)
	}
	if len(bs)-1 > MaxNumBundles {
		return fmt.Errorf("%w: more than %d bundles", ErrPreconditionFailed, MaxNumBundles)
	}
	prev := int64(-1)
	for _, s := range bs {
		var v int64
		if len(s) != 10 || !strings.HasPrefix(s, "0x") {
			return fmt.Errorf("%w: bundle boundary %q: want 0x and 8 hex digits", ErrPreconditionFailed, s)
		}
		if _, err := fmt.Sscanf(s[2:], "%x", &v); err != nil || v <= prev {
			return fmt.Errorf("%w: bundle boundaries must be increasing hex numbers (at %q)", ErrPreconditionFailed, s)
		}
		prev = v
	}
	return nil
}

func checkRetention(r RetentionPolicies) error {
	switch {
	case r.RetentionSizeInMB < -1:
		return fmt.Errorf("%w: invalid retention policy: size limit must be >= -1", ErrPreconditionFailed)
	case r.RetentionTimeInMinutes < -1:
		return fmt.Errorf("%w: invalid retention policy: time limit must be >= -1", ErrPreconditionFailed)
	case (r.RetentionSizeInMB == 0) != (r.RetentionTimeInMinutes == 0):
		return fmt.Errorf("%w: invalid retention policy: setting one of time or size to 0 is invalid when the other is not: use -1 for no limit; both 0 disable retention", ErrPreconditionFailed)
	}
	return nil
}

func checkAutoTopicCreation(o AutoTopicCreationOverride) error {
	switch o.TopicType {
	case "partitioned":
		if o.Allow && (o.DefaultNumPartitions == nil || *o.DefaultNumPartitions < 1) {
			return fmt.Errorf("%w: [defaultNumPartitions] cannot be less than 1 for partitioned topics", ErrPreconditionFailed)
		}
	case "non-partitioned":
		if o.DefaultNumPartitions != nil {
			return fmt.Errorf("%w: [defaultNumPartitions] is not allowed for non-partitioned topics", ErrPreconditionFailed)
		}
	case "":
		if o.Allow {
			return fmt.Errorf("%w: topicType required: partitioned or non-partitioned", ErrPreconditionFailed)
		}
	default:
		return fmt.Errorf("%w: invalid topicType %q: want partitioned or non-partitioned", ErrPreconditionFailed, o.TopicType)
	}
	return nil
}

// checkBacklogQuota validates a quota of type typ against the retention
// policies r (nil: none). As in Pulsar, a destination_storage quota must
// stay below the retention limits.
func checkBacklogQuota(typ string, q BacklogQuota, r *RetentionPolicies) error {
	switch typ {
	case BacklogQuotaDestinationStorage, BacklogQuotaMessageAge:
	default:
		return fmt.Errorf("%w: invalid backlog quota type %q: want destination_storage or message_age", ErrInvalidRequest, typ)
	}
	switch q.Policy {
	case BacklogPolicyProducerRequestHold, BacklogPolicyProducerException, BacklogPolicyConsumerBacklogEviction:
	default:
		return fmt.Errorf("%w: invalid backlog quota policy %q: want producer_request_hold, producer_exception or consumer_backlog_eviction", ErrInvalidRequest, q.Policy)
	}
	if q.LimitSize < -1 || q.LimitTime < -1 {
		return fmt.Errorf("%w: backlog quota limits must be >= -1", ErrPreconditionFailed)
	}
	if typ != BacklogQuotaDestinationStorage || r == nil {
		return nil
	}
	if r.RetentionSizeInMB > 0 && q.LimitSize >= r.RetentionSizeInMB<<20 ||
		r.RetentionTimeInMinutes > 0 && q.LimitTime >= int64(r.RetentionTimeInMinutes)*60 {
		return fmt.Errorf("%w: backlog quota exceeds configured retention quota for namespace: increase retention quota and retry", ErrPreconditionFailed)
	}
	return nil
}

// NamespacePolicies returns the policies of tenant/ns
// (ErrNamespaceNotFound).
func (b *Broker) NamespacePolicies(ctx context.Context, tenant, ns string) (Policies, error) {
	p, _, err := b.namespacePolicies(ctx, tenant, ns)
	return p, err
}

func (b *Broker) namespacePolicies(ctx context.Context, tenant, ns string) (Policies, meta.Version, error) {
	var p Policies
	if err := checkNamespaceName(tenant, ns); err != nil {
		return p, 0, err
	}
	v, err := b.readJSON(ctx, namespacePath(tenant, ns), &p)
	if errors.Is(err, meta.ErrNotFound) {
		if _, terr := b.Tenant(ctx, tenant); terr != nil {
			return p, 0, terr
		}
		return p, 0, fmt.Errorf("%w: namespace %s/%s", ErrNamespaceNotFound, tenant, ns)
	}
	if p.BacklogQuotaMap == nil {
		p.BacklogQuotaMap = map[string]BacklogQuota{}
	}
	p.ReplicationClusters = nonNil(p.ReplicationClusters)
	return p, v, err
}

// UpdateNamespacePolicies applies f to the policies of tenant/ns and stores
// the result (compare-and-set, f is called again on a conflict). An error
// from f is returned and nothing changes. A namespace being deleted is
// ErrNamespaceNotFound.
func (b *Broker) UpdateNamespacePolicies(ctx context.Context, tenant, ns string, f func(*Policies) error) error {
	for {
		p, v, err := b.namespacePolicies(ctx, tenant, ns)
		if err != nil {
			return err
		}
		if p.Deleted {
			return fmt.Errorf("%w: namespace %s/%s is being deleted", ErrNamespaceNotFound, tenant, ns)
		}
		if err := f(&p); err != nil {
			return err
		}
		err = b.setJSON(ctx, namespacePath(tenant, ns), p, v)
		if errors.Is(err, meta.ErrBadVersion) {
			continue
		}
		if errors.Is(err, meta.ErrNotFound) {
			return fmt.Errorf("%w: namespace %s/%s", ErrNamespaceNotFound, tenant, ns)
		}
		if err == nil {
			b.policiesChanged(tenant, ns, p)
		}
		return err
	}
}

// SetRetention sets (r != nil) or removes the retention policies of
// tenant/ns. ErrPreconditionFailed for invalid limits or limits below the
// backlog quota.
func (b *Broker) SetRetention(ctx context.Context, tenant, ns string, r *RetentionPolicies) error {
	if r != nil {
		if err := checkRetention(*r); err != nil {
			return err
		}
	}
	return b.UpdateNamespacePolicies(ctx, tenant, ns, func(p *Policies) error {
		if q, ok := p.BacklogQuotaMap[BacklogQuotaDestinationStorage]; ok && r != nil {
			if err := checkBacklogQuota(BacklogQuotaDestinationStorage, q, r); err != nil {
				return fmt.Errorf("%w: retention quota must exceed configured backlog quota for namespace", ErrPreconditionFailed)
			}
		}
		p.RetentionPolicies = r
		return nil
	})
}

// SetMessageTTL sets (secs != nil) or removes the message TTL of tenant/ns
// (ErrPreconditionFailed if negative).
func (b *Broker) SetMessageTTL(ctx context.Context, tenant, ns string, secs *int) error {
	if secs != nil && *secs < 0 {
		return fmt.Errorf("%w: invalid value for message TTL, message TTL must >= 0", ErrPreconditionFailed)
	}
	return b.UpdateNamespacePolicies(ctx, tenant, ns, func(p *Policies) error {
		p.MessageTTLInSeconds = secs
		return nil
	})
}

// SetBacklogQuota sets (q != nil) or removes the backlog quota of type typ
// ("" means destination_storage) of tenant/ns.
func (b *Broker) SetBacklogQuota(ctx context.Context, tenant, ns, typ string, q *BacklogQuota) error {
	if typ == "" {
		typ = BacklogQuotaDestinationStorage
	}
	if q == nil && typ != BacklogQuotaDestinationStorage && typ != BacklogQuotaMessageAge {
		return fmt.Errorf("%w: invalid backlog quota type %q", ErrInvalidRequest, typ)
	}
	return b.UpdateNamespacePolicies(ctx, tenant, ns, func(p *Policies) error {
		if q == nil {
			delete(p.BacklogQuotaMap, typ)
			return nil
		}
		if err := checkBacklogQuota(typ, *q, p.RetentionPolicies); err != nil {
			return err
		}
		p.BacklogQuotaMap[typ] = *q
		return nil
	})
}

// SetDeduplication sets (on != nil) or removes the deduplication setting
// of tenant/ns. The namespace's loaded topics are unloaded so that they
// load again with it.
func (b *Broker) SetDeduplication(ctx context.Context, tenant, ns string, on *bool) error {
	err := b.UpdateNamespacePolicies(ctx, tenant, ns, func(p *Policies) error {
		p.DeduplicationEnabled = on
		return nil
	})
	if err != nil {
		return err
	}
	return b.unloadNamespace(ctx, tenant, ns)
}

// SetPersistence sets (pp != nil) or removes the replication of
// tenant/ns's new ledgers (E ≥ Qw ≥ Qa ≥ 1, E at most 64). The
// namespace's topics loaded here are unloaded, so that they load again
// and roll to a ledger replicated so; elsewhere the change applies when a
// topic next loads.
func (b *Broker) SetPersistence(ctx context.Context, tenant, ns string, pp *PersistencePolicies) error {
	if pp != nil {
		e, qw, qa := pp.BookkeeperEnsemble, pp.BookkeeperWriteQuorum, pp.BookkeeperAckQuorum
		if !(e >= qw && qw >= qa && qa >= 1 && e <= 64) || pp.ManagedLedgerMaxMarkDeleteRate < 0 {
			return fmt.Errorf("%w: bookkeeper ensemble %d, write quorum %d, ack quorum %d: want ensemble ≥ write quorum ≥ ack quorum ≥ 1 (ensemble at most 64)",
				ErrPreconditionFailed, e, qw, qa)
		}
	}
	err := b.UpdateNamespacePolicies(ctx, tenant, ns, func(p *Policies) error {
		p.Persistence = pp
		return nil
	})
	if err != nil {
		return err
	}
	return b.unloadNamespace(ctx, tenant, ns)
}

// SetAutoTopicCreation sets (o != nil) or removes the auto topic creation
// override of tenant/ns.
func (b *Broker) SetAutoTopicCreation(ctx context.Context, tenant, ns string, o *AutoTopicCreationOverride) error {
	if o != nil {
		if err := checkAutoTopicCreation(*o); err != nil {
			return err
		}
		if !o.Allow && o.TopicType == "" {
			c := *o
			c.TopicType = "non-partitioned"
			o = &c
		}
	}
	return b.UpdateNamespacePolicies(ctx, tenant, ns, func(p *Policies) error {
		p.AutoTopicCreationOverride = o
		return nil
	})
}

// DeleteNamespace deletes tenant/ns. A namespace with topics is refused
// with ErrNotEmpty unless force, which deletes them (see deleteTopics).
// The namespace is marked deleted first, so that no topic is created in
// it meanwhile; a refused delete clears the mark.
func (b *Broker) DeleteNamespace(ctx context.Context, tenant, ns string, force bool) error {
	err := b.UpdateNamespacePolicies(ctx, tenant, ns, func(p *Policies) error {
		p.Deleted = true
		return nil
	})
	if err != nil {
		return err
	}
	undo := func() {
		_ = b.setDeleted(ctx, tenant, ns, false)
	}
	topics, err := b.TopicsOfNamespace(ctx, tenant, ns)
	if err != nil {
		undo()
		return err
	}
	if len(topics) > 0 {
		if !force {
			undo()
			return fmt.Errorf("%w: cannot delete non empty namespace %s/%s (%d topics)", ErrNotEmpty, tenant, ns, len(topics))
		}
		if err := b.deleteNamespaceTopics(ctx, tenant, ns); err != nil {
			undo()
			return err
		}
	}
	if err := b.cfg.Meta.Delete(ctx, namespacePath(tenant, ns), meta.AnyVersion); err != nil && !errors.Is(err, meta.ErrNotFound) {
		return err
	}
	for _, root := range []string{meta.ManagedLedgersRoot, meta.PartitionedTopicsRoot, meta.SchemasRoot} {
		_ = b.deleteIfEmpty(ctx, meta.Join(root, tenant, ns, "persistent"))
		_ = b.deleteIfEmpty(ctx, meta.Join(root, tenant, ns))
	}
	b.log.Info("namespace deleted", "namespace", tenant+"/"+ns, "force", force)
	return nil
}

// setDeleted sets the deleted mark of tenant/ns, even on a namespace
// marked deleted.
func (b *Broker) setDeleted(ctx context.Context, tenant, ns string, deleted bool) error {
	for {
		p, v, err := b.namespacePolicies(ctx, tenant, ns)
		if err != nil {
			return err
		}
		p.Deleted = deleted
		err = b.setJSON(ctx, namespacePath(tenant, ns), p, v)
		if !errors.Is(err, meta.ErrBadVersion) {
			return err
		}
	}
}

// unloadNamespace closes the loaded topics of tenant/ns; they load again
// on next use (clients reconnect).
func (b *Broker) unloadNamespace(ctx context.Context, tenant, ns string) error {
	prefix := "persistent://" + tenant + "/" + ns + "/"
	b.mu.Lock()
	var loaded []*Topic
	for key, tl := range b.topics {
		if !strings.HasPrefix(key, prefix) {
			continue
		}
		select {
		case <-tl.done:
			if tl.t != nil {
				loaded = append(loaded, tl.t)
			}
		default:
			// Still loading: it reads the new setting unless it read the
			// policies before the change (then the next unload applies it).
		}
	}
	b.mu.Unlock()
	var errs []error
	for _, t := range loaded {
		if err := t.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// isDefaultNamespace says whether t is in public/default, which always
// exists for topics (even before Bootstrap).
func isDefaultNamespace(t TopicName) bool {
	return t.Tenant == DefaultTenant && t.Namespace == DefaultNamespace
}

// topicPolicies returns the policies of t's namespace for creating or
// loading t: ErrTopicNotFound (wrapping ErrNamespaceNotFound) if the
// namespace does not exist or is being deleted; zero Policies for
// public/default when it has no node.
func (b *Broker) topicPolicies(ctx context.Context, t TopicName) (Policies, error) {
	p, err := b.NamespacePolicies(ctx, t.Tenant, t.Namespace)
	switch {
	case err == nil && !p.Deleted:
		return p, nil
	case err == nil:
		return p, fmt.Errorf("%w: %s: %w: %s is being deleted", ErrTopicNotFound, t, ErrNamespaceNotFound, t.NamespaceName())
	case (errors.Is(err, ErrNamespaceNotFound) || errors.Is(err, ErrTenantNotFound)) && isDefaultNamespace(t):
		return Policies{}, nil
	case errors.Is(err, ErrNamespaceNotFound) || errors.Is(err, ErrTenantNotFound):
		return p, fmt.Errorf("%w: %s: %w: %s", ErrTopicNotFound, t, ErrNamespaceNotFound, t.NamespaceName())
	}
	return p, err
}

// CheckNamespace returns nil if a topic may be created in t's namespace:
// it exists and is not being deleted (public/default always may).
// Otherwise ErrTopicNotFound wrapping ErrNamespaceNotFound.
func (b *Broker) CheckNamespace(ctx context.Context, t TopicName) error {
	_, err := b.topicPolicies(ctx, t)
	return err
}

// autoCreation is the auto topic creation mode and partition count for
// topics of t's namespace: the namespace's override, else the broker's.
func (b *Broker) autoCreation(ctx context.Context, t TopicName) (AutoTopicCreation, int, error) {
	p, err := b.topicPolicies(ctx, t)
	if err != nil {
		return AutoCreateOff, 0, err
	}
	o := p.AutoTopicCreationOverride
	switch {
	case o == nil:
		return b.cfg.AutoTopicCreation, b.cfg.AutoTopicPartitions, nil
	case !o.Allow:
		return AutoCreateOff, 0, nil
	case o.TopicType == "partitioned":
		n := b.cfg.AutoTopicPartitions
		if o.DefaultNumPartitions != nil && *o.DefaultNumPartitions > 0 {
			n = *o.DefaultNumPartitions
		}
		return AutoCreatePartitioned, n, nil
	}
	return AutoCreateNonPartitioned, b.cfg.AutoTopicPartitions, nil
}

// deduplication says whether t's topics deduplicate: the namespace's
// setting, else the broker's.
func (b *Broker) deduplication(ctx context.Context, t TopicName) (bool, error) {
	p, err := b.topicPolicies(ctx, t)
	if errors.Is(err, ErrNamespaceNotFound) {
		// A topic stored before its namespace was recorded (or whose
		// namespace is going away) keeps the broker's setting.
		return b.cfg.Deduplication, nil
	}
	if err != nil {
		return false, err
	}
	if p.DeduplicationEnabled != nil {
		return *p.DeduplicationEnabled, nil
	}
	return b.cfg.Deduplication, nil
}

// deleteNamespaceTopics deletes every topic of tenant/ns (force delete):
// partitioned topics, then what is left (non-partitioned topics and stray
// partitions), disconnecting their clients.
func (b *Broker) deleteNamespaceTopics(ctx context.Context, tenant, ns string) error {
	parted, err := b.PartitionedTopicsOfNamespace(ctx, tenant, ns)
	if err != nil {
		return err
	}
	for _, name := range parted {
		t, err := ParseTopicName(name)
		if err != nil {
			return err
		}
		if err := b.DeletePartitioned(ctx, t, true); err != nil && !errors.Is(err, ErrTopicNotFound) {
			return err
		}
	}
	topics, err := b.TopicsOfNamespace(ctx, tenant, ns)
	if err != nil {
		return err
	}
	for _, name := range topics {
		t, err := ParseTopicName(name)
		if err != nil {
			return err
		}
		if err := b.DeleteTopic(ctx, t, true); err != nil && !errors.Is(err, ErrTopicNotFound) {
			return err
		}
	}
	if left, err := b.TopicsOfNamespace(ctx, tenant, ns); err != nil || len(left) > 0 {
		if err == nil {
			err = fmt.Errorf("%w: namespace %s/%s still has topics %v", ErrNotEmpty, tenant, ns, left)
		}
		return err
	}
	return nil
}

// SetReplicationClusters replaces the replication clusters of tenant/ns:
// at least one, each existing and allowed by the tenant
// (ErrPreconditionFailed).
func (b *Broker) SetReplicationClusters(ctx context.Context, tenant, ns string, clusters []string) error {
	if len(clusters) == 0 {
		return fmt.Errorf("%w: replication clusters can not be empty", ErrPreconditionFailed)
	}
	ti, err := b.Tenant(ctx, tenant)
	if err != nil {
		return err
	}
	for _, c := range clusters {
		if _, err := b.Cluster(ctx, c); err != nil {
			if errors.Is(err, ErrClusterNotFound) {
				return fmt.Errorf("%w: cluster %s does not exist", ErrPreconditionFailed, c)
			}
			return err
		}
		if !slices.Contains(ti.AllowedClusters, c) {
			return fmt.Errorf("%w: cluster %s is not in the list of allowed clusters of tenant %s", ErrPreconditionFailed, c, tenant)
		}
	}
	return b.UpdateNamespacePolicies(ctx, tenant, ns, func(p *Policies) error {
		p.ReplicationClusters = slices.Clone(clusters)
		return nil
	})
}
