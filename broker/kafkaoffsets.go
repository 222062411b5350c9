package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/meta"
)

// Kafka consumer groups as subscriptions: the committed offset of group
// G on a partition is the durable cursor G of the partition's managed
// ledger — the subscription G Pulsar clients see. A commit of offset N
// (the next record to consume) resets the cursor to the entry holding N
// (everything before it acknowledged) and keeps, as cursor properties,
//
//	kafka.offset    N, exactly as committed
//	kafka.metadata  the commit's metadata string
//	kafka.md        the mark-delete position the commit left ("ledger:entry")
//
// OffsetFetch answers kafka.offset while the mark-delete position is still
// kafka.md; once a Pulsar consumer acknowledged further (or an admin reset
// the subscription), it answers the offset of the first entry after the
// mark-delete position. So group lag is subscription backlog, retention
// keeps what the group has not consumed, and a Pulsar consumer
// subscribing as G continues where the group left off (a commit inside a
// batch has the whole batch delivered again to Pulsar consumers).

// Cursor property names (a stored format).
const (
	propKafkaOffset   = "kafka.offset"
	propKafkaMetadata = "kafka.metadata"
	propKafkaMD       = "kafka.md"
)

// ErrInvalidGroup reports a group id that cannot name a subscription.
var ErrInvalidGroup = errors.New("invalid group id")

func (t *Topic) groupCursor(ctx context.Context, group string, create bool) (*ledger.Cursor, error) {
	if isInternalCursor(group) {
		return nil, fmt.Errorf("%w %q: reserved", ErrInvalidGroup, group)
	}
	if !create && !t.hasCursor(group) {
		return nil, nil
	}
	c, err := t.ml.OpenCursor(ctx, group, ledger.StartEarliest)
	if errors.Is(err, ledger.ErrInvalidCursorName) {
		return nil, fmt.Errorf("%w %q: %w", ErrInvalidGroup, group, err)
	}
	return c, err
}

// CommitKafkaOffset records offset (the next to consume) and metadata as
// group's committed position on t.
func (t *Topic) CommitKafkaOffset(ctx context.Context, group string, offset int64, metadata string) error {
	c, err := t.groupCursor(ctx, group, true)
	if err != nil {
		return err
	}
	props := c.Properties()
	if props[propKafkaOffset] != strconv.FormatInt(offset, 10) || props[propKafkaMD] != c.MarkDeletePosition().String() {
		to := min(max(offset, t.ml.FirstOffset()), t.ml.NextOffset())
		if err := c.ResetToOffset(ctx, to); err != nil {
			return err
		}
	} else if props[propKafkaMetadata] == metadata {
		return nil // the same commit again
	}
	err = c.MarkDelete(c.MarkDeletePosition(), map[string]string{
		propKafkaOffset:   strconv.FormatInt(offset, 10),
		propKafkaMetadata: metadata,
		propKafkaMD:       c.MarkDeletePosition().String(),
	})
	if err != nil {
		return err
	}
	// An acknowledged commit is stored, as in Kafka (the reset above
	// stored the position; this stores the offset and metadata with it).
	return c.Flush(ctx)
}

// KafkaCommittedOffset returns group's committed offset on t and its
// metadata; ok=false if the group has no position here.
func (t *Topic) KafkaCommittedOffset(ctx context.Context, group string) (offset int64, metadata string, ok bool, err error) {
	c, err := t.groupCursor(ctx, group, false)
	if err != nil || c == nil {
		return -1, "", false, err
	}
	md := c.MarkDeletePosition()
	props := c.Properties()
	if props[propKafkaMD] == md.String() {
		if n, err := strconv.ParseInt(props[propKafkaOffset], 10, 64); err == nil {
			return n, props[propKafkaMetadata], true, nil
		}
	}
	off, err := t.ml.OffsetAt(ctx, t.ml.Next(md))
	if err != nil {
		return -1, "", false, err
	}
	return off, "", true, nil
}

// DeleteKafkaOffset removes group's position on t (its subscription).
func (t *Topic) DeleteKafkaOffset(ctx context.Context, group string) error {
	if !t.hasCursor(group) || isInternalCursor(group) {
		return nil
	}
	t.mu.Lock()
	s := t.subs[group]
	t.mu.Unlock()
	if s != nil {
		return fmt.Errorf("%w: subscription %s of %s has Pulsar consumers", ErrSubscriptionBusy, group, t.name)
	}
	return t.ml.DeleteCursor(ctx, group)
}

// Kafka group records: the coordinator's state of each group, opaque to
// the broker, at /kafka/groups/<group id, path-escaped>.

func kafkaGroupPath(group string) (string, error) {
	p := meta.Join(meta.KafkaGroupsRoot, escapeGroup(group))
	if err := meta.ValidatePath(p); err != nil {
		return "", fmt.Errorf("%w %q: %v", ErrInvalidGroup, group, err)
	}
	return p, nil
}

// escapeGroup makes a group id one path element: bytes other than
// letters, digits and -_. become %XX.
func escapeGroup(g string) string {
	const hex = "0123456789ABCDEF"
	var b []byte
	for i := 0; i < len(g); i++ {
		c := g[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' && i > 0 {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hex[c>>4], hex[c&15])
	}
	return string(b)
}

// SaveKafkaGroup stores a group's record.
func (b *Broker) SaveKafkaGroup(ctx context.Context, group string, record []byte) error {
	p, err := kafkaGroupPath(group)
	if err != nil {
		return err
	}
	if _, err := b.cfg.Meta.Set(ctx, p, record, meta.AnyVersion); !errors.Is(err, meta.ErrNotFound) {
		return err
	}
	if err := meta.EnsurePath(ctx, b.cfg.Meta, meta.KafkaGroupsRoot); err != nil {
		return err
	}
	_, err = b.cfg.Meta.Create(ctx, p, record, 0)
	if errors.Is(err, meta.ErrExists) {
		_, err = b.cfg.Meta.Set(ctx, p, record, meta.AnyVersion)
	}
	return err
}

// DeleteKafkaGroup removes a group's record.
func (b *Broker) DeleteKafkaGroup(ctx context.Context, group string) error {
	p, err := kafkaGroupPath(group)
	if err != nil {
		return err
	}
	err = b.cfg.Meta.Delete(ctx, p, meta.AnyVersion)
	if errors.Is(err, meta.ErrNotFound) {
		return nil
	}
	return err
}

// KafkaGroups returns every stored group record.
func (b *Broker) KafkaGroups(ctx context.Context) ([][]byte, error) {
	names, err := b.children(ctx, meta.KafkaGroupsRoot)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, n := range names {
		v, _, err := b.cfg.Meta.Get(ctx, meta.Join(meta.KafkaGroupsRoot, n))
		if errors.Is(err, meta.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
