package meta

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Roots of the tree. Every layer builds its paths from these; see
// DESIGN.md, "Coordination".
const (
	LedgersRoot           = "/ledgers"                  // ledger metadata and id allocation
	BookiesAvailableRoot  = "/bookies/available"        // one ephemeral node per live bookie
	BookiesReadOnlyRoot   = "/bookies/readonly"         // one ephemeral node per bookie refusing adds
	ManagedLedgersRoot    = "/managed-ledgers"          // ledger lists and cursors per topic
	ClustersRoot          = "/admin/clusters"           // cluster definitions (service URLs)
	TenantsRoot           = "/admin/tenants"            // tenant definitions
	PoliciesRoot          = "/admin/policies"           // namespace policies, /<tenant>/<ns>
	PartitionedTopicsRoot = "/admin/partitioned-topics" // partition counts
	TopicConfigRoot       = "/admin/topic-config"       // a topic's own settings (Kafka topic configs)
	BrokersRoot           = "/brokers"                  // one ephemeral node per live broker
	NamespaceOwnerRoot    = "/namespace"                // ephemeral bundle ownership
	KafkaGroupsRoot       = "/kafka/groups"             // Kafka consumer group state
	KafkaProducerIDPath   = "/kafka/producer-ids"       // counter of Kafka producer ids (InitProducerId)
	SchemasRoot           = "/schemas"                  // topic schemas, /<tenant>/<ns>/<topic>
)

// Ledger metadata lives at /ledgers/<id / LedgerBucketSize>/<id>, so that
// no node has more than LedgerBucketSize children; ledger ids come from the
// counter at LedgerIDCounterPath.
const (
	LedgerBucketSize    = 100_000
	LedgerIDCounterPath = LedgersRoot + "/idgen"
)

// Auto-recovery (bookie/autorecovery) keeps its state under
// UnderReplicationRoot, beside the ledger buckets (whose names are numbers).
const (
	UnderReplicationRoot       = LedgersRoot + "/underreplication"
	AuditorPath                = UnderReplicationRoot + "/auditor" // ephemeral: the elected auditor
	UnderReplicatedLedgersRoot = UnderReplicationRoot + "/ledgers" // a mark per under-replicated ledger, /<id>
	ReplicationLocksRoot       = UnderReplicationRoot + "/locks"   // ephemeral lock per ledger being re-replicated, /<id>
)

// LedgerPath is the metadata node of ledger id.
func LedgerPath(id int64) string {
	return Join(LedgersRoot, strconv.FormatInt(id/LedgerBucketSize, 10), strconv.FormatInt(id, 10))
}

// ValidatePath checks that p is an absolute, clean path: it starts with
// "/", has no empty, "." or ".." elements, no trailing "/", is valid UTF-8
// without control characters or the code points ZooKeeper refuses, and is at
// most MaxPathLength bytes. "/" itself is valid.
func ValidatePath(p string) error {
	if err := validatePath(p); err != nil {
		return fmt.Errorf("%w %q: %s", ErrInvalidPath, p, err)
	}
	return nil
}

func validatePath(p string) error {
	switch {
	case p == "":
		return errors.New("empty")
	case len(p) > MaxPathLength:
		return fmt.Errorf("%d bytes, longer than %d", len(p), MaxPathLength)
	case p[0] != '/':
		return errors.New("must start with /")
	case p == "/":
		return nil
	case p[len(p)-1] == '/':
		return errors.New("must not end with /")
	case !utf8.ValidString(p):
		return errors.New("not valid UTF-8")
	}
	for _, elem := range strings.Split(p[1:], "/") {
		switch elem {
		case "":
			return errors.New("empty element")
		case ".", "..":
			return fmt.Errorf("relative element %q", elem)
		}
	}
	for i, r := range p {
		// The ranges ZooKeeper's PathUtils rejects. It checks UTF-16 code
		// units, so every code point above U+FFFF (a surrogate pair there)
		// is refused too.
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) || (r >= 0xd800 && r <= 0xf8ff) || r >= 0xfff0 {
			return fmt.Errorf("character %U at byte %d is not allowed", r, i)
		}
	}
	return nil
}

// CheckValue checks a value against MaxValueSize.
func CheckValue(v []byte) error {
	if len(v) > MaxValueSize {
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, len(v), MaxValueSize)
	}
	return nil
}

// Parent returns the parent of a valid path; the parent of "/" is "/".
func Parent(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// Base returns the last element of a valid path ("" for "/").
func Base(p string) string {
	return p[strings.LastIndexByte(p, '/')+1:]
}

// Join joins a path and elements with "/". It does not validate.
func Join(p string, elems ...string) string {
	var b strings.Builder
	b.WriteString(strings.TrimSuffix(p, "/"))
	for _, e := range elems {
		b.WriteByte('/')
		b.WriteString(e)
	}
	return b.String()
}

// EnsurePath creates p and any missing ancestors as empty persistent
// nodes. Nodes that already exist are left as they are.
func EnsurePath(ctx context.Context, s Store, p string) error {
	if err := ValidatePath(p); err != nil {
		return &PathError{Op: "create", Path: p, Err: err}
	}
	if p == "/" {
		return nil
	}
	if _, ok, err := s.Exists(ctx, p); err != nil || ok {
		return err
	}
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		_, err := s.Create(ctx, p[:i], nil, 0)
		if err != nil && !errors.Is(err, ErrExists) {
			return err
		}
	}
	return nil
}
