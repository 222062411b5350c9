package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/magnetar-io/magnetar/meta"
)

// metadataFormat is the value of the "format" field this package writes and
// reads. The JSON below is a stored format: change it only with a new
// format number.
const metadataFormat = 1

// LedgerState is the state of a ledger in its metadata.
type LedgerState string

const (
	StateOpen       LedgerState = "OPEN"        // a writer may be adding entries
	StateInRecovery LedgerState = "IN_RECOVERY" // a client is closing it for a writer that went away
	StateClosed     LedgerState = "CLOSED"      // LastEntry and Length are final
)

// Ensemble is the set of bookies that stores entries from FirstEntry on (up
// to the next ensemble's FirstEntry).
type Ensemble struct {
	FirstEntry int64    `json:"firstEntry"`
	Bookies    []string `json:"bookies"`
}

// LedgerMetadata is a ledger's metadata node, stored as JSON:
//
//	{"format":1,"ensembleSize":3,"writeQuorum":2,"ackQuorum":2,
//	 "state":"OPEN","lastEntry":-1,"length":0,
//	 "ensembles":[{"firstEntry":0,"bookies":["10.0.0.1:3181",...]}],
//	 "createdMs":1700000000000,"custom":{"k":"v"}}
//
// LastEntry and Length are final only when State is CLOSED (-1 and 0 before).
type LedgerMetadata struct {
	Format       int               `json:"format"`
	EnsembleSize int               `json:"ensembleSize"`
	WriteQuorum  int               `json:"writeQuorum"`
	AckQuorum    int               `json:"ackQuorum"`
	State        LedgerState       `json:"state"`
	LastEntry    int64             `json:"lastEntry"`
	Length       int64             `json:"length"`
	Ensembles    []Ensemble        `json:"ensembles"`
	CreatedMs    int64             `json:"createdMs"`
	Custom       map[string]string `json:"custom,omitempty"`
}

// Clone returns a deep copy.
func (m LedgerMetadata) Clone() LedgerMetadata {
	c := m
	c.Ensembles = make([]Ensemble, len(m.Ensembles))
	for i, e := range m.Ensembles {
		c.Ensembles[i] = Ensemble{FirstEntry: e.FirstEntry, Bookies: slices.Clone(e.Bookies)}
	}
	if m.Custom != nil {
		c.Custom = make(map[string]string, len(m.Custom))
		for k, v := range m.Custom {
			c.Custom[k] = v
		}
	}
	return c
}

// EnsembleFor returns the bookies storing entry (the last ensemble whose
// FirstEntry is at most entry). The slice must not be modified.
func (m *LedgerMetadata) EnsembleFor(entry int64) []string {
	for i := len(m.Ensembles) - 1; i > 0; i-- {
		if m.Ensembles[i].FirstEntry <= entry {
			return m.Ensembles[i].Bookies
		}
	}
	return m.Ensembles[0].Bookies
}

// last returns the last ensemble.
func (m *LedgerMetadata) last() Ensemble { return m.Ensembles[len(m.Ensembles)-1] }

// validate checks the invariants every stored metadata keeps.
func (m *LedgerMetadata) validate() error {
	switch {
	case m.Format != metadataFormat:
		return fmt.Errorf("format %d, this client reads %d", m.Format, metadataFormat)
	case !(m.EnsembleSize >= m.WriteQuorum && m.WriteQuorum >= m.AckQuorum && m.AckQuorum >= 1):
		return fmt.Errorf("quorums E=%d Qw=%d Qa=%d violate E ≥ Qw ≥ Qa ≥ 1", m.EnsembleSize, m.WriteQuorum, m.AckQuorum)
	case m.WriteQuorum > maxWriteQuorum:
		return fmt.Errorf("write quorum %d above %d", m.WriteQuorum, maxWriteQuorum)
	case m.State != StateOpen && m.State != StateInRecovery && m.State != StateClosed:
		return fmt.Errorf("unknown state %q", m.State)
	case len(m.Ensembles) == 0 || m.Ensembles[0].FirstEntry != 0:
		return errors.New("no ensemble starting at entry 0")
	}
	for i, e := range m.Ensembles {
		if len(e.Bookies) != m.EnsembleSize {
			return fmt.Errorf("ensemble %d has %d bookies, want %d", i, len(e.Bookies), m.EnsembleSize)
		}
		if i > 0 && e.FirstEntry <= m.Ensembles[i-1].FirstEntry {
			return fmt.Errorf("ensemble %d starts at %d, not after %d", i, e.FirstEntry, m.Ensembles[i-1].FirstEntry)
		}
	}
	return nil
}

func encodeMetadata(m *LedgerMetadata) ([]byte, error) {
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("bookie client: invalid ledger metadata: %w", err)
	}
	return json.Marshal(m)
}

func decodeMetadata(id int64, b []byte) (LedgerMetadata, error) {
	var m LedgerMetadata
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("bookie client: ledger %d metadata: %w", id, err)
	}
	if err := m.validate(); err != nil {
		return m, fmt.Errorf("bookie client: ledger %d metadata: %w", id, err)
	}
	return m, nil
}

// versioned is metadata with the node version it was read or written at.
type versioned struct {
	md      LedgerMetadata
	version meta.Version
}

// readMetadata reads ledger id's metadata; ErrNoLedger if there is none.
func (c *Client) readMetadata(ctx context.Context, id int64) (versioned, error) {
	b, st, err := c.meta.Get(ctx, meta.LedgerPath(id))
	if errors.Is(err, meta.ErrNotFound) {
		return versioned{}, fmt.Errorf("%w: ledger %d", ErrNoLedger, id)
	}
	if err != nil {
		return versioned{}, fmt.Errorf("bookie client: reading ledger %d metadata: %w", id, err)
	}
	md, err := decodeMetadata(id, b)
	return versioned{md, st.Version}, err
}

// createMetadata stores a new ledger's metadata.
func (c *Client) createMetadata(ctx context.Context, id int64, md *LedgerMetadata) (meta.Version, error) {
	b, err := encodeMetadata(md)
	if err != nil {
		return 0, err
	}
	p := meta.LedgerPath(id)
	if err := meta.EnsurePath(ctx, c.meta, meta.Parent(p)); err != nil {
		return 0, fmt.Errorf("bookie client: creating ledger %d metadata: %w", id, err)
	}
	if _, err := c.meta.Create(ctx, p, b, 0); err != nil {
		return 0, fmt.Errorf("bookie client: creating ledger %d metadata: %w", id, err)
	}
	return 0, nil
}

// updateMetadata changes ledger id's metadata by compare-and-set. change
// edits a copy of the latest metadata and says whether to write it; on a
// version conflict the node is re-read and change decides again on the new
// value. It returns the metadata as stored at the end (written, or found
// when change declined or failed) and change's error.
func (c *Client) updateMetadata(ctx context.Context, id int64, cur versioned, change func(*LedgerMetadata) (bool, error)) (versioned, error) {
	p := meta.LedgerPath(id)
	for {
		next := cur.md.Clone()
		write, err := change(&next)
		if err != nil || !write {
			return cur, err
		}
		b, err := encodeMetadata(&next)
		if err != nil {
			return cur, err
		}
		st, err := c.meta.Set(ctx, p, b, cur.version)
		if err == nil {
			return versioned{next, st.Version}, nil
		}
		if errors.Is(err, meta.ErrNotFound) {
			return cur, fmt.Errorf("%w: ledger %d was deleted", ErrNoLedger, id)
		}
		if !errors.Is(err, meta.ErrBadVersion) {
			return cur, fmt.Errorf("bookie client: updating ledger %d metadata: %w", id, err)
		}
		if cur, err = c.readMetadata(ctx, id); err != nil {
			return cur, err
		}
	}
}
