package broker

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Topic names, as Pulsar writes them:
//
//	persistent://<tenant>/<namespace>/<local name>
//
// Short forms are accepted where clients send them: "<local name>" is
// persistent://public/default/<local name>, "<tenant>/<ns>/<local name>"
// is persistent://<tenant>/<ns>/<local name>. Partition N of a partitioned
// topic is the topic "<local name>-partition-N".

// Default tenant and namespace of short topic names.
const (
	DefaultTenant    = "public"
	DefaultNamespace = "default"
	partitionSuffix  = "-partition-"
	maxNameLength    = 256
)

// ErrInvalidTopicName reports a topic name that cannot be parsed.
var ErrInvalidTopicName = errors.New("invalid topic name")

// TopicName is a parsed, fully qualified persistent topic name.
type TopicName struct {
	Tenant    string
	Namespace string
	Local     string // without a partition suffix
	Partition int    // -1: not a partition
}

// ParseTopicName parses a full or short topic name.
func ParseTopicName(s string) (TopicName, error) {
	bad := func(why string) (TopicName, error) {
		return TopicName{}, fmt.Errorf("%w %q: %s", ErrInvalidTopicName, s, why)
	}
	rest := s
	if i := strings.Index(rest, "://"); i >= 0 {
		switch rest[:i] {
		case "persistent":
		case "non-persistent":
			return bad("non-persistent topics are not supported")
		default:
			return bad("domain must be persistent://")
		}
		rest = rest[i+3:]
	}
	parts := strings.Split(rest, "/")
	var t TopicName
	switch {
	case len(parts) == 1 && !strings.Contains(s, "://"):
		t = TopicName{Tenant: DefaultTenant, Namespace: DefaultNamespace, Local: parts[0]}
	case len(parts) == 3:
		t = TopicName{Tenant: parts[0], Namespace: parts[1], Local: parts[2]}
	case len(parts) == 4:
		return bad("names with a cluster (v1 names) are not supported")
	default:
		return bad("want persistent://tenant/namespace/topic")
	}
	for _, p := range []struct{ what, v string }{{"tenant", t.Tenant}, {"namespace", t.Namespace}, {"topic", t.Local}} {
		if err := checkNamePart(p.v); err != nil {
			return bad(p.what + " " + err.Error())
		}
	}
	t.Partition = -1
	if i := strings.LastIndex(t.Local, partitionSuffix); i > 0 {
		n, err := strconv.Atoi(t.Local[i+len(partitionSuffix):])
		if err == nil && n >= 0 && strconv.Itoa(n) == t.Local[i+len(partitionSuffix):] {
			t.Local, t.Partition = t.Local[:i], n
		}
	}
	return t, nil
}

// checkNamePart allows what Pulsar allows in tenant, namespace and topic
// names: letters, digits and - _ = : . (and nothing that would break a
// metadata path).
func checkNamePart(v string) error {
	if v == "" {
		return errors.New("is empty")
	}
	if len(v) > maxNameLength {
		return fmt.Errorf("is longer than %d bytes", maxNameLength)
	}
	if v == "." || v == ".." {
		return errors.New("may not be . or ..")
	}
	for _, r := range v {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == '-', r == '_', r == '=', r == ':', r == '.':
		default:
			return fmt.Errorf("has invalid character %q", r)
		}
	}
	return nil
}

// String is the full name, with the partition suffix if a partition.
func (t TopicName) String() string {
	return "persistent://" + t.Tenant + "/" + t.Namespace + "/" + t.LocalName()
}

// LocalName is the local name with the partition suffix if a partition.
func (t TopicName) LocalName() string {
	if t.Partition >= 0 {
		return t.Local + partitionSuffix + strconv.Itoa(t.Partition)
	}
	return t.Local
}

// IsPartition says whether t names one partition of a partitioned topic.
func (t TopicName) IsPartition() bool { return t.Partition >= 0 }

// Base is the partitioned topic t is a partition of (t itself if not).
func (t TopicName) Base() TopicName {
	t.Partition = -1
	return t
}

// PartitionName is partition i of t.
func (t TopicName) PartitionName(i int) TopicName {
	t.Partition = i
	return t
}

// NamespaceName is "tenant/namespace".
func (t TopicName) NamespaceName() string { return t.Tenant + "/" + t.Namespace }

// ManagedLedgerName is the managed ledger of the topic (Pulsar's layout:
// tenant/namespace/persistent/local).
func (t TopicName) ManagedLedgerName() string {
	return t.Tenant + "/" + t.Namespace + "/persistent/" + t.LocalName()
}

// metaPath is the topic's relative path under a per-topic root such as
// meta.PartitionedTopicsRoot or meta.SchemasRoot: tenant/ns/persistent/local.
func (t TopicName) metaPath() string { return t.ManagedLedgerName() }
