package ledger

import (
	"errors"

	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/bookie/wire"
)

// Errors. They come back wrapped, naming the managed ledger; test them
// with errors.Is.
var (
	// ErrInvalidName: the name does not make a valid metadata path (empty,
	// leading or trailing "/", empty or relative elements, forbidden
	// characters).
	ErrInvalidName = errors.New("ledger: invalid managed ledger name")
	// ErrAlreadyOpen: the managed ledger is open in this process already
	// (Factory.Open of the same name twice).
	ErrAlreadyOpen = errors.New("ledger: managed ledger already open")
	// ErrFenced: another broker opened the managed ledger (fencing this
	// one's ledger or changing its list). Pending and later appends fail;
	// this instance must be closed.
	ErrFenced = errors.New("ledger: managed ledger was opened elsewhere (fenced)")
	// ErrTerminated: the managed ledger was terminated; it takes no more
	// appends. Reads go on.
	ErrTerminated = errors.New("ledger: managed ledger terminated")
	// ErrClosed: the managed ledger (or its factory) was closed or deleted.
	ErrClosed = errors.New("ledger: managed ledger closed")
	// ErrOffsetOutOfRange: an offset, timestamp or position outside what
	// the managed ledger holds: beyond its end, or trimmed away.
	ErrOffsetOutOfRange = errors.New("ledger: offset out of range")
	// ErrCorrupt: stored data contradicts the managed ledger's invariants
	// (a malformed list, an entry header whose offset does not continue
	// its predecessor's). The message says where.
	ErrCorrupt = errors.New("ledger: corrupt managed ledger")
	// ErrNotEnoughBookies: too few writable bookies to create a ledger or
	// to replace a failed one (the bookie client's error, for the layers
	// above this one). The message says how many were needed and why the
	// others were left out.
	ErrNotEnoughBookies = client.ErrNotEnoughBookies
	// ErrBookieReadOnly: a bookie refused a write because its storage is
	// read-only (a failed or full disk; docs/bookies.md).
	ErrBookieReadOnly = wire.ErrReadOnly
	// ErrInvalidCursorName: a cursor name that is empty, contains "/" or
	// does not make a valid metadata path.
	ErrInvalidCursorName = errors.New("ledger: invalid cursor name")
	// ErrNoCursor: no durable cursor of that name (DeleteCursor), or the
	// cursor was deleted.
	ErrNoCursor = errors.New("ledger: no such cursor")
	// ErrCursorClosed: the cursor was closed (reopen it with OpenCursor).
	ErrCursorClosed = errors.New("ledger: cursor closed")
)
