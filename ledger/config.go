package ledger

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/meta"
)

// Defaults for Config fields left zero.
const (
	DefaultMaxEntriesPerLedger = 50_000
	DefaultMaxLedgerSize       = 1 << 30
	DefaultMaxLedgerAge        = 4 * time.Hour
	DefaultMinLedgerAge        = 10 * time.Minute

	DefaultCursorFlushInterval   = time.Second
	DefaultMaxPersistedAckRanges = 1000
	DefaultTrimInterval          = time.Minute
)

// Config configures a Factory and every managed ledger it opens. It is
// validated once, by NewFactory.
type Config struct {
	// Bookies creates, opens and deletes ledgers (ClientBookies adapts a
	// *client.Client). Required.
	Bookies Bookies
	// Meta holds the ledger lists. Required. Not closed by the factory.
	Meta meta.Store
	// Cache is the entry cache shared by every managed ledger. Required.
	// Not closed by the factory.
	Cache *Cache

	// EnsembleSize, WriteQuorum and AckQuorum of new ledgers. Default 1/1/1.
	EnsembleSize, WriteQuorum, AckQuorum int

	// Rollover: the current ledger is closed and a new one started once it
	// holds MaxEntriesPerLedger entries (default 50,000) or
	// MaxLedgerSize bytes (default 1 GiB), or is MaxLedgerAge old
	// (default 4 h) with at least one entry — but never before it is
	// MinLedgerAge old (default 10 min; negative means no minimum). The
	// limits are soft: appends go on to the current ledger while the next
	// one is prepared.
	MaxEntriesPerLedger int64
	MaxLedgerSize       int64
	MaxLedgerAge        time.Duration
	MinLedgerAge        time.Duration

	// Retention, applied by Trim to ledgers no durable cursor needs (with
	// no durable cursor: to every ledger): a ledger is kept while its
	// last entry is younger than RetentionTime AND the ledgers after it
	// hold less than RetentionSize bytes; past either limit it is
	// deleted. Zero keeps nothing (the default, as in Pulsar: a topic
	// without subscriptions keeps nothing); negative means no limit on
	// that side.
	RetentionTime time.Duration
	RetentionSize int64

	// CursorFlushInterval: a durable cursor writes its acknowledgements
	// to the metadata store at most once per interval (default 1 s),
	// coalescing the changes in between, and on Close. A broker crash
	// loses at most the acknowledgements of the last interval (their
	// messages are delivered again). Negative: write after every change
	// (still one write at a time, coalescing what arrives meanwhile).
	CursorFlushInterval time.Duration
	// MaxPersistedAckRanges bounds the ranges of individually
	// acknowledged entries a durable cursor writes (default 1000): beyond
	// them only the first ones are kept, and the entries of the others are
	// delivered again after a crash or a move.
	MaxPersistedAckRanges int
	// TrimInterval: besides after rollovers and cursor movements, the
	// ledgers no durable cursor needs are trimmed this often (default
	// 1 min), so that time retention expires data without other events.
	// Negative disables the timer.
	TrimInterval time.Duration

	// AddLatency, if set, observes the latency of every successful
	// append, in seconds: from Append to its confirmation (the entry
	// stored on its ack quorum, every earlier one confirmed); Pulsar's
	// storage write latency. Exported as
	// magnetar_ledger_add_entry_latency_seconds.
	AddLatency prometheus.Observer

	// cursorWriting and cursorWritten, if set, are called before and
	// after each write of a durable cursor's state, with the state (tests).
	cursorWriting, cursorWritten func(c *Cursor, s storedCursor)

	// Clock gives publish times and ledger ages. Default time.Now.
	Clock func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Bookies == nil:
		return c, errors.New("ledger: Config.Bookies is required")
	case c.Meta == nil:
		return c, errors.New("ledger: Config.Meta is required")
	case c.Cache == nil:
		return c, errors.New("ledger: Config.Cache is required")
	}
	if c.EnsembleSize == 0 && c.WriteQuorum == 0 && c.AckQuorum == 0 {
		c.EnsembleSize, c.WriteQuorum, c.AckQuorum = 1, 1, 1
	}
	if !(c.EnsembleSize >= c.WriteQuorum && c.WriteQuorum >= c.AckQuorum && c.AckQuorum >= 1) {
		return c, fmt.Errorf("ledger: ensemble %d, write quorum %d, ack quorum %d: want E ≥ Qw ≥ Qa ≥ 1",
			c.EnsembleSize, c.WriteQuorum, c.AckQuorum)
	}
	if c.MaxEntriesPerLedger == 0 {
		c.MaxEntriesPerLedger = DefaultMaxEntriesPerLedger
	}
	if c.MaxLedgerSize == 0 {
		c.MaxLedgerSize = DefaultMaxLedgerSize
	}
	if c.MaxLedgerAge == 0 {
		c.MaxLedgerAge = DefaultMaxLedgerAge
	}
	if c.MinLedgerAge == 0 {
		c.MinLedgerAge = DefaultMinLedgerAge
	}
	if c.MinLedgerAge < 0 {
		c.MinLedgerAge = 0
	}
	if c.MaxEntriesPerLedger < 0 || c.MaxLedgerSize < 0 || c.MaxLedgerAge < 0 {
		return c, errors.New("ledger: negative rollover limit")
	}
	switch {
	case c.CursorFlushInterval == 0:
		c.CursorFlushInterval = DefaultCursorFlushInterval
	case c.CursorFlushInterval < 0:
		c.CursorFlushInterval = 0
	}
	if c.MaxPersistedAckRanges == 0 {
		c.MaxPersistedAckRanges = DefaultMaxPersistedAckRanges
	}
	if c.MaxPersistedAckRanges < 0 {
		return c, errors.New("ledger: negative MaxPersistedAckRanges")
	}
	if c.TrimInterval == 0 {
		c.TrimInterval = DefaultTrimInterval
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}
