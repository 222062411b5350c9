package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Bundles: a namespace's topics are split by the hash of their full name
// (each partition of a partitioned topic on its own) into hash ranges,
// the bundles, as in Pulsar. A bundle is the unit of ownership: one broker
// serves every topic of it (ownership.go). The boundaries are part of the
// namespace's policies (Policies.Bundles), "0x00000000" to "0xffffffff";
// a namespace without them (public/default before anyone set its
// policies) has DefaultNumBundles equal ones.
//
// A topic's hash is Murmur3-32 (seed 0) of its full name
// ("persistent://tenant/ns/topic-partition-2"), the hash Pulsar uses.

// Bundle is one hash range of a namespace: [Lo, Hi), or [Lo, Hi] when Hi
// is 0xffffffff (the last bundle holds the top of the range).
type Bundle struct {
	Tenant, Namespace string
	Lo, Hi            uint32
}

// Range is the bundle's name within its namespace, as Pulsar writes it:
// "0x00000000_0x40000000".
func (b Bundle) Range() string { return fmt.Sprintf("0x%08x_0x%08x", b.Lo, b.Hi) }

// String is "tenant/namespace/0x00000000_0x40000000".
func (b Bundle) String() string { return b.Tenant + "/" + b.Namespace + "/" + b.Range() }

// Contains says whether hash h falls in the bundle.
func (b Bundle) Contains(h uint32) bool {
	return h >= b.Lo && (h < b.Hi || b.Hi == 0xffffffff)
}

// overlaps says whether b and o share a hash.
func (b Bundle) overlaps(o Bundle) bool {
	return b.Contains(o.Lo) || o.Contains(b.Lo)
}

// ParseBundle parses "tenant/namespace/0xLO_0xHI" (or the range alone
// with tenant and namespace given).
func ParseBundle(tenant, namespace, rng string) (Bundle, error) {
	b := Bundle{Tenant: tenant, Namespace: namespace}
	if err := checkNamespaceName(tenant, namespace); err != nil {
		return b, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	lo, hi, ok := strings.Cut(rng, "_")
	var err error
	if ok {
		if b.Lo, err = parseHash(lo); err == nil {
			b.Hi, err = parseHash(hi)
		}
	}
	if !ok || err != nil || b.Lo >= b.Hi {
		return b, fmt.Errorf("%w: bundle %q: want 0xLOWER_0xUPPER with 8 hex digits each, lower below upper", ErrInvalidRequest, rng)
	}
	return b, nil
}

func parseHash(s string) (uint32, error) {
	if len(s) != 10 || !strings.HasPrefix(s, "0x") {
		return 0, errors.New("want 0x and 8 hex digits")
	}
	v, err := strconv.ParseUint(s[2:], 16, 32)
	return uint32(v), err
}

// TopicHash is the hash that places t in a bundle.
func TopicHash(t TopicName) uint32 { return murmur3([]byte(t.String())) }

// bundlesOf returns the bundles of tenant/namespace from its boundaries.
func bundlesOf(tenant, namespace string, bd *BundlesData) ([]Bundle, error) {
	bounds := bundleBoundaries(DefaultNumBundles)
	if bd != nil && len(bd.Boundaries) > 0 {
		bounds = bd.Boundaries
	}
	out := make([]Bundle, 0, len(bounds)-1)
	for i := 1; i < len(bounds); i++ {
		lo, err1 := parseHash(bounds[i-1])
		hi, err2 := parseHash(bounds[i])
		if err := errors.Join(err1, err2); err != nil || lo >= hi {
			return nil, fmt.Errorf("broker: namespace %s/%s: bad bundle boundaries %v", tenant, namespace, bounds)
		}
		out = append(out, Bundle{Tenant: tenant, Namespace: namespace, Lo: lo, Hi: hi})
	}
	return out, nil
}

// Bundles returns the bundles of tenant/namespace, in hash order.
func (b *Broker) Bundles(ctx context.Context, tenant, namespace string) ([]Bundle, error) {
	p, err := b.topicPolicies(ctx, TopicName{Tenant: tenant, Namespace: namespace, Local: "x", Partition: -1})
	if err != nil {
		return nil, err
	}
	return bundlesOf(tenant, namespace, p.Bundles)
}

// BundleOf returns the bundle t belongs to now.
func (b *Broker) BundleOf(ctx context.Context, t TopicName) (Bundle, error) {
	bs, err := b.Bundles(ctx, t.Tenant, t.Namespace)
	if err != nil {
		return Bundle{}, err
	}
	h := TopicHash(t)
	for _, bd := range bs {
		if bd.Contains(h) {
			return bd, nil
		}
	}
	return Bundle{}, fmt.Errorf("broker: no bundle of %s holds hash 0x%08x", t.NamespaceName(), h)
}

// splitBoundaries returns bounds with the bundle [lo, hi) split in two
// equal halves (Pulsar's range_equally_divide).
func splitBoundaries(bounds []string, bd Bundle) ([]string, error) {
	if bd.Hi-bd.Lo < 2 {
		return nil, fmt.Errorf("%w: bundle %s is too small to split", ErrPreconditionFailed, bd)
	}
	lo := fmt.Sprintf("0x%08x", bd.Lo)
	i := slices.Index(bounds, lo)
	if i < 0 || i+1 >= len(bounds) || bounds[i+1] != fmt.Sprintf("0x%08x", bd.Hi) {
		return nil, fmt.Errorf("%w: %s is not a bundle of %s/%s", ErrBundleNotFound, bd.Range(), bd.Tenant, bd.Namespace)
	}
	if len(bounds)-1 >= MaxNumBundles {
		return nil, fmt.Errorf("%w: namespace %s/%s has %d bundles already, the most allowed", ErrPreconditionFailed, bd.Tenant, bd.Namespace, MaxNumBundles)
	}
	mid := bd.Lo + (bd.Hi-bd.Lo)/2
	return slices.Insert(slices.Clone(bounds), i+1, fmt.Sprintf("0x%08x", mid)), nil
}
