package storage

import (
	"errors"
	"fmt"

	"github.com/magnetar-io/magnetar/bookie/entry"
)

// Errors returned by Storage. Check them with errors.Is; most come back
// wrapped with the ledger or entry they concern.
var (
	// ErrFenced: the ledger is fenced; no more entries are accepted for it.
	ErrFenced = errors.New("storage: ledger fenced")
	// ErrNoLedger: the bookie holds nothing of the ledger, or it was deleted.
	ErrNoLedger = errors.New("storage: no such ledger")
	// ErrNoEntry: the ledger exists here but not that entry.
	ErrNoEntry = errors.New("storage: no such entry")
	// ErrClosed: the storage was closed.
	ErrClosed = errors.New("storage: closed")
	// ErrReadOnly: the storage refuses adds. Either an entry log, index
	// or checkpoint write failed: it then refuses every further mutation
	// (adds, fences, deletes) rather than acknowledge what it cannot
	// store, until a restart replays the journal, and the wrapped cause is
	// the first failure. Or a disk is above its usage threshold (disk.go):
	// adds only, until it is back under the warning threshold. Reads
	// still work.
	ErrReadOnly = errors.New("storage: read-only")
	// ErrCorruption is matched (errors.Is) by every *CorruptionError.
	ErrCorruption = errors.New("storage: corruption")

	// ErrChecksum and ErrMalformed are the entry package's errors: an add
	// whose bytes fail entry.Verify is refused with them.
	ErrChecksum  = entry.ErrChecksum
	ErrMalformed = entry.ErrMalformed
)

// CorruptionError reports stored bytes that are not what was written: a
// short entry log, a record whose length prefix, checksum or header does
// not match the index, an undecodable index value. It says where: File is
// the path (an entry log, or the index directory) and Offset the byte
// offset in it (-1 when not meaningful). It is distinct from I/O errors
// (which come back as they are) and from bad client input (ErrChecksum,
// ErrMalformed on add).
type CorruptionError struct {
	File   string
	Offset int64
	Err    error
}

func (e *CorruptionError) Error() string {
	if e.Offset < 0 {
		return fmt.Sprintf("storage: corruption in %s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("storage: corruption in %s at offset %d: %v", e.File, e.Offset, e.Err)
}

func (e *CorruptionError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCorruption) true for every CorruptionError.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorruption }

func corruptf(file string, off int64, format string, args ...any) error {
	return &CorruptionError{File: file, Offset: off, Err: fmt.Errorf(format, args...)}
}
