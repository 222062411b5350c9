package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/magnetar-io/magnetar/meta"
)

// metadataFormat is the "format" of the managed ledger node this package
// writes and reads. The JSON (see storedList) is a stored format: change
// it only with a new format number.
const metadataFormat = 1

// Managed ledger states in the metadata.
const (
	stateOpen       = "open"
	stateTerminated = "terminated"
)

// storedList is the value of /managed-ledgers/<name>:
//
//	{"format":1,"state":"open",
//	 "ledgers":[
//	   {"ledgerId":7,"closed":true,"entries":500,"size":524288,
//	    "firstOffset":0,"messages":9000,
//	    "firstPublishTime":1764450000000,"lastPublishTime":1764450060000},
//	   {"ledgerId":9,"closed":false,"firstOffset":9000}]}
//
// Ledgers are in entry order (increasing ids). A closed ledger's fields are
// final; the others (at the tail only) are being written or were being
// written when their writer went away: opening recovers them. firstOffset
// is -1 while unknown (a ledger created ahead of a rollover, not yet
// switched to). When terminated, every ledger is closed and terminatedAt
// is the last entry.
type storedList struct {
	Format       int            `json:"format"`
	State        string         `json:"state"`
	Ledgers      []storedLedger `json:"ledgers"`
	TerminatedAt *Position      `json:"terminatedAt,omitempty"`
}

type storedLedger struct {
	LedgerID         int64 `json:"ledgerId"`
	Closed           bool  `json:"closed"`
	Entries          int64 `json:"entries,omitempty"`
	Size             int64 `json:"size,omitempty"`
	FirstOffset      int64 `json:"firstOffset"`
	Messages         int64 `json:"messages,omitempty"`
	FirstPublishTime int64 `json:"firstPublishTime,omitempty"`
	LastPublishTime  int64 `json:"lastPublishTime,omitempty"`
}

// validate checks the invariants of a stored list.
func (l *storedList) validate() error {
	switch {
	case l.Format != metadataFormat:
		return fmt.Errorf("format %d, this broker reads %d", l.Format, metadataFormat)
	case l.State != stateOpen && l.State != stateTerminated:
		return fmt.Errorf("unknown state %q", l.State)
	case l.State == stateTerminated && l.TerminatedAt == nil:
		return errors.New("terminated without terminatedAt")
	}
	open := false
	for i, s := range l.Ledgers {
		switch {
		case i > 0 && s.LedgerID <= l.Ledgers[i-1].LedgerID:
			return fmt.Errorf("ledger %d follows ledger %d", s.LedgerID, l.Ledgers[i-1].LedgerID)
		case s.Closed && open:
			return fmt.Errorf("closed ledger %d follows an open one", s.LedgerID)
		case s.Closed && s.FirstOffset < 0:
			return fmt.Errorf("closed ledger %d has no first offset", s.LedgerID)
		case s.Entries < 0 || s.Size < 0 || s.Messages < s.Entries:
			return fmt.Errorf("ledger %d: %d entries, %d bytes, %d messages", s.LedgerID, s.Entries, s.Size, s.Messages)
		case i > 0 && s.FirstOffset >= 0 && l.Ledgers[i-1].Closed &&
			s.FirstOffset != l.Ledgers[i-1].FirstOffset+l.Ledgers[i-1].Messages:
			p := l.Ledgers[i-1]
			return fmt.Errorf("ledger %d starts at offset %d, but ledger %d ends at %d",
				s.LedgerID, s.FirstOffset, p.LedgerID, p.FirstOffset+p.Messages)
		case l.State == stateTerminated && !s.Closed:
			return fmt.Errorf("terminated, but ledger %d is open", s.LedgerID)
		}
		open = open || !s.Closed
	}
	return nil
}

func encodeList(l *storedList) ([]byte, error) {
	if err := l.validate(); err != nil {
		return nil, fmt.Errorf("ledger: invalid managed ledger list: %w", err)
	}
	b, err := json.Marshal(l)
	if err != nil {
		return nil, err
	}
	return b, meta.CheckValue(b)
}

// decodeList decodes a node's value; an empty value (a node created by
// EnsurePath, e.g. for a cursor) is a new, empty list.
func decodeList(path string, b []byte) (storedList, error) {
	l := storedList{Format: metadataFormat, State: stateOpen}
	if len(b) == 0 {
		return l, nil
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return l, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	if err := l.validate(); err != nil {
		return l, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	return l, nil
}

// readList reads the list, creating the node (and its parents) if missing.
func readList(ctx context.Context, s meta.Store, path string) (storedList, meta.Version, error) {
	for {
		b, st, err := s.Get(ctx, path)
		if err == nil {
			l, err := decodeList(path, b)
			return l, st.Version, err
		}
		if !errors.Is(err, meta.ErrNotFound) {
			return storedList{}, 0, err
		}
		if err := meta.EnsurePath(ctx, s, meta.Parent(path)); err != nil {
			return storedList{}, 0, err
		}
		b, err = encodeList(&storedList{Format: metadataFormat, State: stateOpen})
		if err != nil {
			return storedList{}, 0, err
		}
		if _, err := s.Create(ctx, path, b, 0); err != nil && !errors.Is(err, meta.ErrExists) {
			return storedList{}, 0, err
		}
	}
}
