package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/meta"
)

// Errors. They come back wrapped; test with errors.Is.
var (
	// ErrFenced: another client recovered (fenced and closed) the ledger;
	// this writer's adds and Close fail.
	ErrFenced = errors.New("bookie client: ledger fenced by another client")
	// ErrClosed: the writer or the client was closed.
	ErrClosed = errors.New("bookie client: closed")
	// ErrNotEnoughBookies: too few available bookies for an ensemble or a
	// replacement. The message says how many were needed and available.
	ErrNotEnoughBookies = errors.New("bookie client: not enough bookies")
	// ErrNoLedger: the ledger has no metadata (never created, or deleted).
	ErrNoLedger = errors.New("bookie client: no such ledger")
	// ErrReadBeyondLAC: a read asked for entries past the last-add-confirmed.
	ErrReadBeyondLAC = errors.New("bookie client: read beyond last add confirmed")
	// ErrNoQuorum: recovery could not hear from enough bookies to decide
	// safely (fencing did not cover every write set, or an entry could be
	// neither found nor proven absent). Nothing was changed; retry when the
	// bookies are back.
	ErrNoQuorum = errors.New("bookie client: too few bookies answered to decide")
)

// Config configures a Client. Zero durations take the defaults.
type Config struct {
	// Meta is the metadata store: ledger metadata, id allocation and the
	// registry of available bookies. Required. The client does not close it.
	Meta   meta.Store
	Logger *slog.Logger // default slog.Default()
	// DialTimeout bounds connecting to a bookie. Default 5 s.
	DialTimeout time.Duration
	// AddTimeout: a bookie that has not acknowledged an add within it is
	// treated as failed, and replaced by an ensemble change. Default 10 s.
	AddTimeout time.Duration
	// ReadTimeout bounds reads, LAC queries, fencing and deletes on each
	// bookie. Default 10 s.
	ReadTimeout time.Duration
	// Dial connects to a bookie's address. Default: TCP.
	Dial func(addr string, timeout time.Duration) (net.Conn, error)
	// Local, if set, returns the bookie at addr when it runs in this
	// process (the standalone's), or nil: requests to it are calls, not
	// frames on a socket.
	Local func(addr string) Local
}

// Local is a bookie in the client's process (bookie.Server's Call): it
// answers each request by calling done exactly once, possibly before Call
// returns, with the status and the response body after it as parts (the
// parts are the client's to keep). body does not change until then. The
// entry a Read answers with has been verified (entry.Verify) since the
// bookie read it from its disk, so the client checks only that it is the
// entry asked for: its bytes crossed no wire since.
type Local interface {
	Call(op wire.Op, flags uint16, body []byte, done func(st wire.Status, payload [][]byte))
}

// Client creates, writes, opens, recovers and deletes ledgers.
type Client struct {
	cfg  Config
	log  *slog.Logger
	meta meta.Store
	ids  *meta.IDGenerator
	pool *pool

	mu      sync.Mutex
	writers map[*Writer]struct{}
	closed  bool

	roMu     sync.Mutex
	readOnly map[string]time.Time // bookie → until when placement leaves it out (markReadOnly)
}

// New checks cfg and returns a client. Connections to bookies are made on
// first use.
func New(cfg Config) (*Client, error) {
	if cfg.Meta == nil {
		return nil, errors.New("bookie client: Config.Meta is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.AddTimeout <= 0 {
		cfg.AddTimeout = 10 * time.Second
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 10 * time.Second
	}
	// One id at a time, not a block: ledger ids must grow along every
	// managed ledger, whose successive ledgers may be created by different
	// brokers (ownership moves); a block reserved earlier by one broker
	// could hold ids below another's latest. A ledger is created at a
	// rollover, so the extra metadata write is rare.
	ids, err := meta.NewIDGenerator(cfg.Meta, meta.LedgerIDCounterPath, 1)
	if err != nil {
		return nil, err
	}
	// Timeouts are enforced by a sweep, so they fire up to a twentieth late.
	sweep := min(cfg.AddTimeout, cfg.ReadTimeout) / 20
	sweep = max(min(sweep, 500*time.Millisecond), 5*time.Millisecond)
	log := cfg.Logger.With("component", "bookie-client")
	return &Client{cfg: cfg, log: log, meta: cfg.Meta, ids: ids,
		pool: newPool(cfg.DialTimeout, sweep, cfg.Dial, cfg.Local, log), writers: make(map[*Writer]struct{}),
		readOnly: make(map[string]time.Time)}, nil
}

// Close closes the connections to bookies. Pending and later adds of this
// client's writers fail with ErrClosed; their ledgers stay OPEN (recovery
// closes them). It does not close Config.Meta.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	writers := c.writers
	c.writers = nil
	c.mu.Unlock()
	for w := range writers {
		w.abort(ErrClosed)
	}
	c.pool.close()
	return nil
}

func (c *Client) perm(n int) []int { return rand.Perm(n) }

// LedgerOptions describe a new ledger.
type LedgerOptions struct {
	EnsembleSize, WriteQuorum, AckQuorum int
	Custom                               map[string]string // stored in the metadata as is
}

func (o LedgerOptions) validate() error {
	if !(o.EnsembleSize >= o.WriteQuorum && o.WriteQuorum >= o.AckQuorum && o.AckQuorum >= 1) {
		return fmt.Errorf("bookie client: ensemble %d, write quorum %d, ack quorum %d: want E ≥ Qw ≥ Qa ≥ 1",
			o.EnsembleSize, o.WriteQuorum, o.AckQuorum)
	}
	if o.WriteQuorum > maxWriteQuorum {
		return fmt.Errorf("bookie client: write quorum %d above %d", o.WriteQuorum, maxWriteQuorum)
	}
	return nil
}

// CreateLedger allocates a ledger id, places an ensemble on available
// bookies, stores the metadata (OPEN) and returns the ledger's writer.
func (c *Client) CreateLedger(ctx context.Context, o LedgerOptions) (*Writer, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	bookies, err := c.pickBookies(ctx, nil, o.EnsembleSize)
	if err != nil {
		return nil, fmt.Errorf("bookie client: creating ledger: %w", err)
	}
	id, err := c.ids.Next(ctx)
	if err != nil {
		return nil, fmt.Errorf("bookie client: allocating a ledger id: %w", err)
	}
	md := LedgerMetadata{
		Format: metadataFormat, EnsembleSize: o.EnsembleSize, WriteQuorum: o.WriteQuorum, AckQuorum: o.AckQuorum,
		State: StateOpen, LastEntry: -1, Ensembles: []Ensemble{{FirstEntry: 0, Bookies: bookies}},
		CreatedMs: time.Now().UnixMilli(), Custom: o.Custom,
	}
	md = md.Clone()
	v, err := c.createMetadata(ctx, id, &md)
	if err != nil {
		return nil, err
	}
	w := newWriter(c, id, versioned{md, v})
	c.mu.Lock()
	closed = c.closed
	if !closed {
		c.writers[w] = struct{}{}
	}
	c.mu.Unlock()
	if closed {
		w.abort(ErrClosed)
		return nil, fmt.Errorf("%w: ledger %d was created but stays OPEN", ErrClosed, id)
	}
	return w, nil
}

// forget drops a writer that is closed.
func (c *Client) forget(w *Writer) {
	c.mu.Lock()
	delete(c.writers, w)
	c.mu.Unlock()
}

// DeleteLedger deletes a ledger: Delete on every bookie of every ensemble,
// then the metadata node. Bookies that cannot be reached are logged and
// skipped (their garbage collection reclaims the space once the metadata is
// gone). ErrNoLedger if there is no such ledger.
func (c *Client) DeleteLedger(ctx context.Context, id int64) error {
	for {
		cur, err := c.readMetadata(ctx, id)
		if err != nil {
			return err
		}
		var bookies []string
		for _, e := range cur.md.Ensembles {
			for _, b := range e.Bookies {
				if !slices.Contains(bookies, b) {
					bookies = append(bookies, b)
				}
			}
		}
		replies := make(chan reply, len(bookies))
		for i, b := range bookies {
			c.request(b, wire.OpDelete, 0, wire.Ledger(id), c.cfg.ReadTimeout, i, replies)
		}
		for range bookies {
			var r reply
			select {
			case r = <-replies:
			case <-ctx.Done():
				return ctx.Err()
			}
			if err := r.Err(); err != nil && !errors.Is(err, wire.ErrNoLedger) {
				c.log.Warn("deleting ledger: bookie skipped; its GC reclaims the ledger later",
					"ledger", id, "bookie", r.addr, "err", err)
			}
		}
		err = c.meta.Delete(ctx, meta.LedgerPath(id), cur.version)
		switch {
		case err == nil, errors.Is(err, meta.ErrNotFound):
			return nil
		case errors.Is(err, meta.ErrBadVersion):
			continue // an ensemble may have been added: delete there too
		}
		return fmt.Errorf("bookie client: deleting ledger %d metadata: %w", id, err)
	}
}

// reply is a response gathered by request, tagged with the caller's index.
type reply struct {
	tag    int
	addr   string
	status wire.Status
	body   []byte // a copy: the receiver's
	local  bool   // from an in-process bookie: a read entry is verified already (Local)
	err    error
}

// Err is the transport error, else the status's error (naming the bookie).
func (r reply) Err() error {
	if r.err != nil {
		return r.err
	}
	if err := r.status.Err(); err != nil {
		return fmt.Errorf("bookie %s: %w", r.addr, err)
	}
	return nil
}

// request sends one request to addr and delivers exactly one reply on out,
// which must have room for it (a buffer of at least the number of requests
// not yet received), so that no connection goroutine ever blocks on it.
func (c *Client) request(addr string, op wire.Op, flags uint16, body []byte, timeout time.Duration, tag int, out chan<- reply) {
	err := c.pool.send(addr, op, flags, body, timeout, func(r response) {
		body := r.body
		if !r.owned {
			body = slices.Clone(body)
		}
		out <- reply{tag: tag, addr: addr, status: r.status, body: body, local: r.local, err: r.err}
	})
	if err != nil {
		out <- reply{tag: tag, addr: addr, err: err}
	}
}
