// Package ledger provides managed ledgers: named, unbounded logs of
// entries built on bookie ledgers (bookie/client), with a message index
// (Kafka offsets, publish times) and an entry cache shared by all of them.
// A topic partition is a managed ledger.
//
// # Model
//
// A managed ledger is a list of bookie ledgers, kept in the metadata store
// at /managed-ledgers/<name>; the last one is open for appends, the others
// are closed. Open (Factory.Open) reads the list, recovers the ledgers the
// previous owner left open — fencing it: its appends fail from then on —
// and starts a new ledger. Appends are asynchronous and complete in order
// with the entry's Position (ledger id, entry id). The current ledger rolls
// over to a new one by entry count, size or age (Config); appends are not
// stalled meanwhile (see rollover). Terminate ends the log for good;
// Delete removes it; Trim deletes leading ledgers that neither readers nor
// retention need.
//
// Every entry starts with a Header written by the managed ledger (format,
// offset of its first message, message count, publish time; header.go
// draws it). Offsets are message indexes, continuous over the whole
// managed ledger, across rollovers and restarts. FindOffset and FindTime
// locate entries from in-memory tables (index.go).
//
// # Cursors
//
// A cursor (cursor.go) reads a managed ledger and keeps what its reader
// acknowledged: a mark-delete position (every entry up to it) and the
// entries acknowledged individually after it, as ranges (acks.go, a pure
// state machine over a view of the ledger list). A durable cursor — a
// subscription, a Kafka consumer group on one partition — is written to
// the metadata store, rate-limited and on Close (cursorstore.go); a crash
// loses at most the last interval's acknowledgements, whose messages are
// delivered again, never skipped. Every durable cursor stored is loaded
// when the managed ledger opens, and the ledgers before the slowest one's
// written mark-delete position are trimmed once retention lets them go
// (cursors.go). Non-durable cursors live in memory and hold nothing back.
//
// # Metadata format
//
// The value of /managed-ledgers/<name> is JSON (storedList in metadata.go
// has an example); it is a stored format, versioned by its "format" field
// (1). It holds the state (open or terminated, with the last position when
// terminated) and the ledger list: per ledger its id, whether it is closed
// (its fields are then final), entries, bytes, first offset, message count
// and first and last publish times (milliseconds). The children of the
// node are the durable cursors, /managed-ledgers/<name>/<cursor>, each a
// JSON value versioned by its own "format" (storedCursor in
// cursorstore.go).
//
// # Invariants
//
//   - Offsets are continuous: each entry's first offset is its
//     predecessor's plus its message count; each ledger's first offset is
//     its predecessor's end. A success is reported for an append only when
//     every earlier append succeeded; after a failure, the offsets handed
//     out after it are reused (the ledgers are closed at their last
//     confirmed entry first).
//   - Completions are ordered: done callbacks run in Append order, one at
//     a time, across ledger switches.
//   - The list changes only by compare-and-set on the node's version, by
//     one operation at a time (ManagedLedger.ops). A version conflict means
//     another broker opened the managed ledger: this one is fenced.
//   - A ledger is listed before anything is appended to it, and unlisted
//     before it is deleted from the bookies: a crash leaves at worst
//     unlisted ledgers behind (their metadata names the managed ledger in
//     the custom property "managed-ledger"), never a list naming a missing
//     ledger.
//   - Trim never deletes the current ledger, the last ledger, or data
//     after a durable cursor's written mark-delete position or inside
//     retention.
//   - Publish times never decrease along a managed ledger: a clock going
//     back is clamped to the previous entry's time (so FindTime's binary
//     search holds).
//
// # Locking
//
// ManagedLedger.mu guards the state and is never held across a call to
// the metadata store or a bookie operation that waits; LedgerWriter.Append
// is called under it, as it only queues (the call order is the entry
// order). Operations that change the list take the ops token instead,
// which orders them without blocking appends or reads. Cursor.mu guards a
// cursor's state; it may be held while taking ManagedLedger.mu (never the
// other way round) and is never held across I/O either.
//
// # Errors
//
// ErrInvalidName, ErrAlreadyOpen, ErrFenced, ErrTerminated, ErrClosed,
// ErrOffsetOutOfRange and ErrCorrupt come back wrapped, naming the managed
// ledger; for cursors also ErrInvalidCursorName, ErrNoCursor and
// ErrCursorClosed (and ErrFenced when another broker took the cursor
// over). Test them with errors.Is. Bookie and metadata store errors are
// wrapped as they are.
package ledger
