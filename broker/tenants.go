package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"

	"github.com/magnetar-io/magnetar/meta"
)

// Clusters and tenants, stored as Pulsar stores them:
//
//	/admin/clusters/<cluster>  ClusterData JSON
//	/admin/tenants/<tenant>    TenantInfo JSON
//
// Names follow checkNamePart (Pulsar's NamedEntity rule). Every change is
// a create, a compare-and-set or a delete of one node, so concurrent
// admins see each other's changes or fail cleanly.

// ClusterData describes a cluster: where its brokers serve (Pulsar's
// ClusterData; JSON field names as Pulsar's REST API shows them).
type ClusterData struct {
	ServiceURL          string   `json:"serviceUrl,omitempty"`
	ServiceURLTLS       string   `json:"serviceUrlTls,omitempty"`
	BrokerServiceURL    string   `json:"brokerServiceUrl,omitempty"`
	BrokerServiceURLTLS string   `json:"brokerServiceUrlTls,omitempty"`
	PeerClusterNames    []string `json:"peerClusterNames,omitempty"`
}

func (c ClusterData) validate() error {
	for _, u := range []struct{ field, v string }{
		{"serviceUrl", c.ServiceURL}, {"serviceUrlTls", c.ServiceURLTLS},
		{"brokerServiceUrl", c.BrokerServiceURL}, {"brokerServiceUrlTls", c.BrokerServiceURLTLS},
	} {
		if u.v == "" {
			continue
		}
		if p, err := url.Parse(u.v); err != nil || p.Scheme == "" || p.Host == "" {
			return fmt.Errorf("%w: %s %q is not a URL", ErrPreconditionFailed, u.field, u.v)
		}
	}
	return nil
}

// TenantInfo is a tenant's definition (Pulsar's TenantInfo).
type TenantInfo struct {
	AdminRoles      []string `json:"adminRoles"`
	AllowedClusters []string `json:"allowedClusters"`
}

// checkName validates a cluster, tenant or namespace name; what names it
// in errors. Pulsar answers an invalid name with 412 (its validate*Name
// helpers), hence ErrPreconditionFailed.
func checkName(what, v string) error {
	if err := checkNamePart(v); err != nil {
		return fmt.Errorf("%w: %s name %q is not valid: it %s", ErrPreconditionFailed, what, v, err)
	}
	return nil
}

// Bootstrap creates what exists from a broker's first start, as in
// Pulsar: the broker's cluster (its service URLs updated when they
// changed), the tenant "public" allowed on it and the namespace
// "public/default". It leaves existing definitions alone otherwise.
func (b *Broker) Bootstrap(ctx context.Context) error {
	want := ClusterData{ServiceURL: b.cfg.ServiceURL, BrokerServiceURL: b.cfg.BrokerServiceURL}
	cur, err := b.Cluster(ctx, b.cfg.Cluster)
	switch {
	case errors.Is(err, ErrClusterNotFound):
		if err := b.CreateCluster(ctx, b.cfg.Cluster, want); err != nil && !errors.Is(err, ErrAlreadyExists) {
			return err
		}
	case err != nil:
		return err
	case (want.ServiceURL != "" && cur.ServiceURL != want.ServiceURL) ||
		(want.BrokerServiceURL != "" && cur.BrokerServiceURL != want.BrokerServiceURL):
		if want.ServiceURL != "" {
			cur.ServiceURL = want.ServiceURL
		}
		if want.BrokerServiceURL != "" {
			cur.BrokerServiceURL = want.BrokerServiceURL
		}
		if err := b.UpdateCluster(ctx, b.cfg.Cluster, cur); err != nil {
			return err
		}
	}
	err = b.CreateTenant(ctx, DefaultTenant, TenantInfo{AllowedClusters: []string{b.cfg.Cluster}})
	if err != nil && !errors.Is(err, ErrAlreadyExists) {
		return err
	}
	err = b.CreateNamespace(ctx, DefaultTenant, DefaultNamespace, nil)
	if err != nil && !errors.Is(err, ErrAlreadyExists) {
		return err
	}
	return nil
}

// ClusterName is the name of the broker's own cluster.
func (b *Broker) ClusterName() string { return b.cfg.Cluster }

func clusterPath(name string) string { return meta.Join(meta.ClustersRoot, name) }
func tenantPath(name string) string  { return meta.Join(meta.TenantsRoot, name) }

// Clusters lists the clusters, sorted.
func (b *Broker) Clusters(ctx context.Context) ([]string, error) {
	names, err := b.children(ctx, meta.ClustersRoot)
	return nonNil(names), err
}

// Cluster returns a cluster's data (ErrClusterNotFound).
func (b *Broker) Cluster(ctx context.Context, name string) (ClusterData, error) {
	var c ClusterData
	if err := checkName("cluster", name); err != nil {
		return c, err
	}
	_, err := b.readJSON(ctx, clusterPath(name), &c)
	if errors.Is(err, meta.ErrNotFound) {
		return c, fmt.Errorf("%w: cluster %s", ErrClusterNotFound, name)
	}
	return c, err
}

// CreateCluster records a cluster (ErrAlreadyExists; ErrPreconditionFailed
// for a bad name or URL).
func (b *Broker) CreateCluster(ctx context.Context, name string, c ClusterData) error {
	if err := checkName("cluster", name); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	if err := b.createJSON(ctx, clusterPath(name), c); err != nil {
		if errors.Is(err, meta.ErrExists) {
			return fmt.Errorf("%w: cluster %s", ErrAlreadyExists, name)
		}
		return err
	}
	b.log.Info("cluster created", "cluster", name)
	return nil
}

// UpdateCluster replaces a cluster's data (ErrClusterNotFound).
func (b *Broker) UpdateCluster(ctx context.Context, name string, c ClusterData) error {
	if err := checkName("cluster", name); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	err := b.setJSON(ctx, clusterPath(name), c, meta.AnyVersion)
	if errors.Is(err, meta.ErrNotFound) {
		return fmt.Errorf("%w: cluster %s", ErrClusterNotFound, name)
	}
	return err
}

// DeleteCluster removes a cluster. The broker's own cluster and clusters
// a tenant allows or a namespace replicates to are refused with
// ErrPreconditionFailed.
func (b *Broker) DeleteCluster(ctx context.Context, name string) error {
	if _, err := b.Cluster(ctx, name); err != nil {
		return err
	}
	if name == b.cfg.Cluster {
		return fmt.Errorf("%w: cluster %s is this broker's cluster", ErrPreconditionFailed, name)
	}
	tenants, err := b.Tenants(ctx)
	if err != nil {
		return err
	}
	for _, t := range tenants {
		ti, err := b.Tenant(ctx, t)
		if errors.Is(err, ErrTenantNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if slices.Contains(ti.AllowedClusters, name) {
			return fmt.Errorf("%w: cluster %s is used by tenant %s", ErrPreconditionFailed, name, t)
		}
	}
	err = b.cfg.Meta.Delete(ctx, clusterPath(name), meta.AnyVersion)
	if errors.Is(err, meta.ErrNotFound) {
		return fmt.Errorf("%w: cluster %s", ErrClusterNotFound, name)
	}
	if err == nil {
		b.log.Info("cluster deleted", "cluster", name)
	}
	return err
}

// Tenants lists the tenants, sorted.
func (b *Broker) Tenants(ctx context.Context) ([]string, error) {
	names, err := b.children(ctx, meta.TenantsRoot)
	return nonNil(names), err
}

// Tenant returns a tenant's definition (ErrTenantNotFound).
func (b *Broker) Tenant(ctx context.Context, name string) (TenantInfo, error) {
	var ti TenantInfo
	if err := checkName("tenant", name); err != nil {
		return ti, err
	}
	_, err := b.readJSON(ctx, tenantPath(name), &ti)
	if errors.Is(err, meta.ErrNotFound) {
		return ti, fmt.Errorf("%w: tenant %s", ErrTenantNotFound, name)
	}
	ti.AdminRoles, ti.AllowedClusters = nonNil(ti.AdminRoles), nonNil(ti.AllowedClusters)
	return ti, err
}

// checkTenantInfo refuses, as Pulsar does, an empty or blank list of
// allowed clusters and clusters that do not exist (ErrPreconditionFailed).
func (b *Broker) checkTenantInfo(ctx context.Context, ti TenantInfo) error {
	if len(ti.AllowedClusters) == 0 {
		return fmt.Errorf("%w: clusters can not be empty", ErrPreconditionFailed)
	}
	var missing []string
	for _, c := range ti.AllowedClusters {
		if checkNamePart(c) != nil {
			missing = append(missing, c)
			continue
		}
		_, ok, err := b.cfg.Meta.Exists(ctx, clusterPath(c))
		if err != nil {
			return err
		}
		if !ok {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: clusters %q do not exist", ErrPreconditionFailed, missing)
	}
	return nil
}

// CreateTenant records a tenant (ErrAlreadyExists; ErrPreconditionFailed
// for a bad name or bad clusters).
func (b *Broker) CreateTenant(ctx context.Context, name string, ti TenantInfo) error {
	if err := checkName("tenant", name); err != nil {
		return err
	}
	if err := b.checkTenantInfo(ctx, ti); err != nil {
		return err
	}
	ti.AdminRoles, ti.AllowedClusters = nonNil(ti.AdminRoles), nonNil(ti.AllowedClusters)
	if err := b.createJSON(ctx, tenantPath(name), ti); err != nil {
		if errors.Is(err, meta.ErrExists) {
			return fmt.Errorf("%w: tenant %s", ErrAlreadyExists, name)
		}
		return err
	}
	b.log.Info("tenant created", "tenant", name, "clusters", ti.AllowedClusters)
	return nil
}

// UpdateTenant replaces a tenant's definition (ErrTenantNotFound,
// ErrPreconditionFailed).
func (b *Broker) UpdateTenant(ctx context.Context, name string, ti TenantInfo) error {
	if err := checkName("tenant", name); err != nil {
		return err
	}
	if err := b.checkTenantInfo(ctx, ti); err != nil {
		return err
	}
	ti.AdminRoles, ti.AllowedClusters = nonNil(ti.AdminRoles), nonNil(ti.AllowedClusters)
	err := b.setJSON(ctx, tenantPath(name), ti, meta.AnyVersion)
	if errors.Is(err, meta.ErrNotFound) {
		return fmt.Errorf("%w: tenant %s", ErrTenantNotFound, name)
	}
	return err
}

// DeleteTenant removes a tenant. A tenant with namespaces is refused with
// ErrNotEmpty unless force, which deletes its namespaces (and their
// topics) first.
func (b *Broker) DeleteTenant(ctx context.Context, name string, force bool) error {
	if _, err := b.Tenant(ctx, name); err != nil {
		return err
	}
	nss, err := b.Namespaces(ctx, name)
	if err != nil {
		return err
	}
	if len(nss) > 0 && !force {
		return fmt.Errorf("%w: tenant %s still has namespaces %v", ErrNotEmpty, name, nss)
	}
	for _, ns := range nss {
		if err := b.DeleteNamespace(ctx, name, ns[len(name)+1:], true); err != nil && !errors.Is(err, ErrNamespaceNotFound) {
			return err
		}
	}
	// The policies parent goes first: a namespace created meanwhile makes
	// it fail with ErrNotEmpty and the tenant stays.
	if err := b.deleteIfEmpty(ctx, meta.Join(meta.PoliciesRoot, name)); err != nil {
		if errors.Is(err, meta.ErrNotEmpty) {
			return fmt.Errorf("%w: tenant %s got a namespace while being deleted", ErrNotEmpty, name)
		}
		return err
	}
	err = b.cfg.Meta.Delete(ctx, tenantPath(name), meta.AnyVersion)
	if errors.Is(err, meta.ErrNotFound) {
		return fmt.Errorf("%w: tenant %s", ErrTenantNotFound, name)
	}
	if err != nil {
		return err
	}
	for _, root := range []string{meta.ManagedLedgersRoot, meta.PartitionedTopicsRoot, meta.SchemasRoot} {
		_ = b.deleteIfEmpty(ctx, meta.Join(root, name))
	}
	b.log.Info("tenant deleted", "tenant", name, "force", force)
	return nil
}

// readJSON reads node p into v and returns its version.
func (b *Broker) readJSON(ctx context.Context, p string, v any) (meta.Version, error) {
	data, st, err := b.cfg.Meta.Get(ctx, p)
	if err != nil {
		return 0, err
	}
	if len(data) == 0 {
		return st.Version, nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return 0, fmt.Errorf("broker: %s: bad metadata: %w", p, err)
	}
	return st.Version, nil
}

// createJSON creates node p holding v, creating missing parents.
func (b *Broker) createJSON(ctx context.Context, p string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := meta.EnsurePath(ctx, b.cfg.Meta, meta.Parent(p)); err != nil {
		return err
	}
	_, err = b.cfg.Meta.Create(ctx, p, data, 0)
	return err
}

// setJSON sets node p to v if its version is expected.
func (b *Broker) setJSON(ctx context.Context, p string, v any, expected meta.Version) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = b.cfg.Meta.Set(ctx, p, data, expected)
	return err
}

// deleteIfEmpty deletes node p if it exists (meta.ErrNotEmpty if it has
// children).
func (b *Broker) deleteIfEmpty(ctx context.Context, p string) error {
	err := b.cfg.Meta.Delete(ctx, p, meta.AnyVersion)
	if errors.Is(err, meta.ErrNotFound) {
		return nil
	}
	return err
}

// nonNil makes a nil list empty, so that it shows as [] in JSON.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// SetPeerClusters replaces the peer clusters of cluster name; each must
// exist and differ from name (ErrPreconditionFailed).
func (b *Broker) SetPeerClusters(ctx context.Context, name string, peers []string) error {
	for {
		var c ClusterData
		if err := checkName("cluster", name); err != nil {
			return err
		}
		v, err := b.readJSON(ctx, clusterPath(name), &c)
		if errors.Is(err, meta.ErrNotFound) {
			return fmt.Errorf("%w: cluster %s", ErrClusterNotFound, name)
		}
		if err != nil {
			return err
		}
		for _, p := range peers {
			if p == name {
				return fmt.Errorf("%w: cluster %s cannot be its own peer", ErrPreconditionFailed, name)
			}
			if _, err := b.Cluster(ctx, p); err != nil {
				if errors.Is(err, ErrClusterNotFound) {
					return fmt.Errorf("%w: peer cluster %s does not exist", ErrPreconditionFailed, p)
				}
				return err
			}
		}
		c.PeerClusterNames = slices.Clone(peers)
		if err := b.setJSON(ctx, clusterPath(name), c, v); !errors.Is(err, meta.ErrBadVersion) {
			return err
		}
	}
}
