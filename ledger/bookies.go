package ledger

import (
	"context"

	"github.com/magnetar-io/magnetar/bookie/client"
)

// Bookies is what a managed ledger needs of a bookie client: create,
// open and delete ledgers. ClientBookies adapts *client.Client; tests wrap
// it to count or fail calls.
//
// Errors are the client's (client.ErrFenced, client.ErrNoLedger, …),
// wrapped; the managed ledger tests them with errors.Is.
type Bookies interface {
	// CreateLedger creates a ledger and returns its writer.
	CreateLedger(ctx context.Context, o LedgerOptions) (LedgerWriter, error)
	// OpenLedger opens a ledger for reading. With recovery, a ledger that
	// is not closed is fenced (its writer can add nothing more) and closed
	// at its last recoverable entry.
	OpenLedger(ctx context.Context, id int64, recovery bool) (LedgerReader, error)
	// DeleteLedger deletes a ledger's entries and metadata.
	DeleteLedger(ctx context.Context, id int64) error
}

// LedgerOptions describe a new ledger: ensemble size, write and ack
// quorums, and free-form properties stored with its metadata.
type LedgerOptions struct {
	EnsembleSize, WriteQuorum, AckQuorum int
	Custom                               map[string]string
}

// LedgerWriter appends to a ledger it created; it is the ledger's only
// writer.
type LedgerWriter interface {
	ID() int64
	// Append adds payload as the next entry. The payload is the caller's
	// again when Append returns. done is called exactly once per Append,
	// in entry order, with the entry id or an error; after an error every
	// later Append fails too. Append must not call done before it
	// returns (the managed ledger calls it under its lock, because the
	// order of the calls is the order of the entries).
	Append(payload []byte, done func(entryID int64, err error))
	// Close waits for pending appends and closes the ledger at its last
	// acknowledged entry.
	Close(ctx context.Context) error
}

// reservingWriter is a LedgerWriter that can take an entry in place: buf
// starts with entry.HeaderSize free bytes for the writer's header, then
// the payload; buf is the writer's until done is called and the payload
// part is not changed (the managed ledger keeps reading it: its cache).
// client.Writer is one.
type reservingWriter interface {
	AppendReserved(buf []byte, done func(entryID int64, err error))
	// AppendReservedKnown is AppendReserved for a buf whose tail
	// buf[from:] has the CRC-32C tailCRC: the entry's checksum is
	// combined from it instead of read off the tail again.
	AppendReservedKnown(buf []byte, from int, tailCRC uint32, done func(entryID int64, err error))
}

// LedgerReader reads a ledger.
type LedgerReader interface {
	ID() int64
	// LastAddConfirmed is the last entry known to be readable (-1 if
	// none): the last entry of a closed ledger, else the last LAC learnt.
	LastAddConfirmed() int64
	// Length is the total payload bytes of a closed ledger (0 while open).
	Length() int64
	// ReadLAC refreshes LastAddConfirmed from the metadata and bookies.
	ReadLAC(ctx context.Context) (int64, error)
	// Read returns the payloads of entries first..last, which must not
	// pass LastAddConfirmed, and for each the buffer it lies in if the
	// caller holds that alone (else nil), which Entry.Release gives back
	// (bookie/entry's Recycle). The slices are the caller's.
	Read(ctx context.Context, first, last int64) (payloads, bufs [][]byte, err error)
}

// ClientBookies adapts a bookie client to Bookies.
func ClientBookies(c *client.Client) Bookies { return clientBookies{c} }

type clientBookies struct{ c *client.Client }

func (b clientBookies) CreateLedger(ctx context.Context, o LedgerOptions) (LedgerWriter, error) {
	w, err := b.c.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: o.EnsembleSize,
		WriteQuorum: o.WriteQuorum, AckQuorum: o.AckQuorum, Custom: o.Custom})
	if err != nil {
		return nil, err
	}
	return w, nil
}

func (b clientBookies) OpenLedger(ctx context.Context, id int64, recovery bool) (LedgerReader, error) {
	r, err := b.c.OpenLedger(ctx, id, client.OpenOptions{Recovery: recovery})
	if err != nil {
		return nil, err
	}
	return clientReader{r}, nil
}

func (b clientBookies) DeleteLedger(ctx context.Context, id int64) error {
	return b.c.DeleteLedger(ctx, id)
}

type clientReader struct{ *client.Reader }

func (r clientReader) Length() int64 {
	md := r.Metadata()
	if md.State != client.StateClosed {
		return 0
	}
	return md.Length
}

func (r clientReader) Read(ctx context.Context, first, last int64) ([][]byte, [][]byte, error) {
	es, err := r.Reader.Read(ctx, first, last)
	if err != nil {
		return nil, nil, err
	}
	payloads, bufs := make([][]byte, len(es)), make([][]byte, len(es))
	for i, e := range es {
		payloads[i], bufs[i] = e.Payload, e.Buf
	}
	return payloads, bufs, nil
}
