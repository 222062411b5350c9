package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/journal"
)

// Index keys and values (Pebble, big-endian). These are an on-disk format.
//
//	"v"                         → version u32 = 1
//	"e" ledger u64 entry u64    → log u64 | offset u64 | size u32   (entry location)
//	"l" ledger u64              → flags u8 | fencedAt pos | deletedAt pos
//	"m" log u64                 → validLength u64 | n u32 | n × (ledger u64 | bytes u64)
//	"c"                         → checkpoint pos
//
//	pos = journal file u64 | journal offset u64 (a journal.Position)
//	flags: 1 fenced, 2 deleted
//
// "l" exists for every ledger the bookie holds or held: written with its
// first entry or its fence, kept as a tombstone (flag 2) after a delete so
// late adds are refused. fencedAt/deletedAt are the journal end positions
// of the fence and delete records: replay, which may find the index ahead
// of the record it replays (Pebble flushes memtables on its own), honours
// a flag only for records after it.
//
// "m" is a finished entry log's metadata for GC: its length and the record
// bytes per ledger. It is written only once the log is complete and
// fsynced, so a log without it is the current one or a crashed one. In
// metadata GC rebuilt for a crashed log, ledger -1 (garbageLedger) counts
// the bytes no index entry referenced.
//
// "c" is the checkpoint: every journal record ending at or before it is in
// fsynced entry logs and in flushed index state.
const (
	indexVersion = 1

	keyVersion    = 'v'
	keyEntry      = 'e'
	keyLedger     = 'l'
	keyLogMeta    = 'm'
	keyCheckpoint = 'c'

	locSize       = 8 + 8 + 4
	ledgerRecSize = 1 + 2*posSize
	posSize       = 16

	flagFenced  = 1
	flagDeleted = 2

	garbageLedger = -1
)

// index is the (ledger, entry) → location map and the ledger states in
// Pebble, with its WAL off: the journal is the write-ahead log, so every
// write is NoSync and Flush is the durability point.
type index struct {
	db  *pebble.DB
	dir string
}

func openIndex(fs vfs.FS, dir string, logger *slog.Logger) (*index, error) {
	db, err := pebble.Open(dir, &pebble.Options{
		FS:                 fs,
		DisableWAL:         true,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             pebbleLogger{logger},
	})
	if err != nil {
		return nil, fmt.Errorf("storage: open index: %w", err)
	}
	x := &index{db: db, dir: dir}
	v, ok, err := x.get([]byte{keyVersion})
	switch {
	case err != nil:
		db.Close()
		return nil, err
	case !ok:
		err = db.Set([]byte{keyVersion}, binary.BigEndian.AppendUint32(nil, indexVersion), pebble.NoSync)
	case len(v) != 4:
		err = x.corrupt("version value of %d bytes", len(v))
	case binary.BigEndian.Uint32(v) != indexVersion:
		err = fmt.Errorf("storage: index version %d, this build reads %d", binary.BigEndian.Uint32(v), indexVersion)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return x, nil
}

func (x *index) close() error { return x.db.Close() }

// flush makes every write so far durable (the memtable becomes an sstable).
func (x *index) flush() error {
	if err := x.db.Flush(); err != nil {
		return fmt.Errorf("storage: flush index: %w", err)
	}
	return nil
}

func (x *index) corrupt(format string, args ...any) error {
	return corruptf(x.dir, -1, format, args...)
}

// get returns a copy of key's value.
func (x *index) get(key []byte) ([]byte, bool, error) {
	v, closer, err := x.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("storage: index get: %w", err)
	}
	out := append([]byte(nil), v...)
	closer.Close()
	return out, true, nil
}

func entryKey(ledger, entryID int64) []byte {
	k := entryKeyArray(ledger, entryID)
	return k[:]
}

// entryKeyArray is entryKey without the allocation, for the apply path.
func entryKeyArray(ledger, entryID int64) (k [17]byte) {
	k[0] = keyEntry
	binary.BigEndian.PutUint64(k[1:], uint64(ledger))
	binary.BigEndian.PutUint64(k[9:], uint64(entryID))
	return k
}

// ledgerEntries is the key range of a ledger's entries. Ledger ids are
// non-negative (AddEntry refuses others), so ledger+1 does not wrap.
func ledgerEntries(ledger int64) (lower, upper []byte) {
	lower = entryKey(ledger, 0)[:9]
	upper = entryKey(ledger+1, 0)[:9]
	return lower, upper
}

func ledgerKey(ledger int64) []byte {
	k := make([]byte, 9)
	k[0] = keyLedger
	binary.BigEndian.PutUint64(k[1:], uint64(ledger))
	return k
}

func logMetaKey(id uint64) []byte {
	k := make([]byte, 9)
	k[0] = keyLogMeta
	binary.BigEndian.PutUint64(k[1:], id)
	return k
}

func encodeLoc(loc location) []byte {
	v := locArray(loc)
	return v[:]
}

// locArray is encodeLoc without the allocation, for the apply path.
func locArray(loc location) (v [locSize]byte) {
	binary.BigEndian.PutUint64(v[:], loc.log)
	binary.BigEndian.PutUint64(v[8:], uint64(loc.offset))
	binary.BigEndian.PutUint32(v[16:], loc.size)
	return v
}

func (x *index) decodeLoc(v []byte) (location, error) {
	if len(v) != locSize {
		return location{}, x.corrupt("entry location of %d bytes", len(v))
	}
	return location{
		log:    binary.BigEndian.Uint64(v),
		offset: int64(binary.BigEndian.Uint64(v[8:])),
		size:   binary.BigEndian.Uint32(v[16:]),
	}, nil
}

func appendPos(b []byte, p journal.Position) []byte {
	b = binary.BigEndian.AppendUint64(b, p.File)
	return binary.BigEndian.AppendUint64(b, uint64(p.Offset))
}

func decodePos(b []byte) journal.Position {
	return journal.Position{File: binary.BigEndian.Uint64(b), Offset: int64(binary.BigEndian.Uint64(b[8:]))}
}

// ledgerRecord is the persistent part of a ledger's state.
type ledgerRecord struct {
	fenced, deleted     bool
	fencedAt, deletedAt journal.Position // end positions of the fence and delete records
}

func (r ledgerRecord) encode() []byte {
	var flags byte
	if r.fenced {
		flags |= flagFenced
	}
	if r.deleted {
		flags |= flagDeleted
	}
	v := make([]byte, 1, ledgerRecSize)
	v[0] = flags
	v = appendPos(v, r.fencedAt)
	return appendPos(v, r.deletedAt)
}

func (x *index) decodeLedger(v []byte) (ledgerRecord, error) {
	if len(v) != ledgerRecSize {
		return ledgerRecord{}, x.corrupt("ledger state of %d bytes", len(v))
	}
	return ledgerRecord{
		fenced:    v[0]&flagFenced != 0,
		deleted:   v[0]&flagDeleted != 0,
		fencedAt:  decodePos(v[1:]),
		deletedAt: decodePos(v[1+posSize:]),
	}, nil
}

// location returns where the entry is, if the index has it.
func (x *index) location(ledger, entryID int64) (location, bool, error) {
	v, ok, err := x.get(entryKey(ledger, entryID))
	if !ok || err != nil {
		return location{}, ok, err
	}
	loc, err := x.decodeLoc(v)
	return loc, err == nil, err
}

// lastEntry returns the ledger's largest indexed entry id and its location.
func (x *index) lastEntry(ledger int64) (int64, location, bool, error) {
	lower, upper := ledgerEntries(ledger)
	it, err := x.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return 0, location{}, false, err
	}
	defer it.Close()
	if !it.Last() {
		return 0, location{}, false, it.Error()
	}
	id := int64(binary.BigEndian.Uint64(it.Key()[9:]))
	loc, err := x.decodeLoc(it.Value())
	if err != nil {
		return 0, location{}, false, err
	}
	return id, loc, true, nil
}

// ledger returns the ledger's persistent state, if it has one.
func (x *index) ledger(ledger int64) (ledgerRecord, bool, error) {
	v, ok, err := x.get(ledgerKey(ledger))
	if !ok || err != nil {
		return ledgerRecord{}, ok, err
	}
	r, err := x.decodeLedger(v)
	return r, err == nil, err
}

// ledgers calls fn for every ledger state, in ledger order.
func (x *index) ledgers(fn func(ledger int64, r ledgerRecord) error) error {
	it, err := x.db.NewIter(&pebble.IterOptions{LowerBound: []byte{keyLedger}, UpperBound: []byte{keyLedger + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if len(it.Key()) != 9 {
			return x.corrupt("ledger key of %d bytes", len(it.Key()))
		}
		r, err := x.decodeLedger(it.Value())
		if err != nil {
			return err
		}
		if err := fn(int64(binary.BigEndian.Uint64(it.Key()[1:])), r); err != nil {
			return err
		}
	}
	return it.Error()
}

// entries calls fn for every entry location in the index (GC's full scan).
func (x *index) entries(fn func(ledger, entryID int64, loc location) error) error {
	it, err := x.db.NewIter(&pebble.IterOptions{LowerBound: []byte{keyEntry}, UpperBound: []byte{keyEntry + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != 17 {
			return x.corrupt("entry key of %d bytes", len(k))
		}
		loc, err := x.decodeLoc(it.Value())
		if err != nil {
			return err
		}
		if err := fn(int64(binary.BigEndian.Uint64(k[1:])), int64(binary.BigEndian.Uint64(k[9:])), loc); err != nil {
			return err
		}
	}
	return it.Error()
}

// logMeta is a finished entry log's metadata ("m"): bytes up to
// validLength are whole records; ledgers has the record bytes per ledger.
type logMeta struct {
	validLength int64
	ledgers     map[int64]int64
}

func (m logMeta) encode() []byte {
	v := make([]byte, 0, 12+16*len(m.ledgers))
	v = binary.BigEndian.AppendUint64(v, uint64(m.validLength))
	v = binary.BigEndian.AppendUint32(v, uint32(len(m.ledgers)))
	for l, n := range m.ledgers {
		v = binary.BigEndian.AppendUint64(v, uint64(l))
		v = binary.BigEndian.AppendUint64(v, uint64(n))
	}
	return v
}

func (x *index) decodeLogMeta(v []byte) (logMeta, error) {
	if len(v) < 12 {
		return logMeta{}, x.corrupt("log metadata of %d bytes", len(v))
	}
	m := logMeta{validLength: int64(binary.BigEndian.Uint64(v)), ledgers: make(map[int64]int64)}
	n := int(binary.BigEndian.Uint32(v[8:]))
	v = v[12:]
	if len(v) != 16*n {
		return logMeta{}, x.corrupt("log metadata: %d ledgers in %d bytes", n, len(v))
	}
	for i := 0; i < n; i++ {
		m.ledgers[int64(binary.BigEndian.Uint64(v[16*i:]))] = int64(binary.BigEndian.Uint64(v[16*i+8:]))
	}
	return m, nil
}

// logMetas returns the metadata of every finished log.
func (x *index) logMetas() (map[uint64]logMeta, error) {
	it, err := x.db.NewIter(&pebble.IterOptions{LowerBound: []byte{keyLogMeta}, UpperBound: []byte{keyLogMeta + 1}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	out := make(map[uint64]logMeta)
	for ok := it.First(); ok; ok = it.Next() {
		if len(it.Key()) != 9 {
			return nil, x.corrupt("log metadata key of %d bytes", len(it.Key()))
		}
		m, err := x.decodeLogMeta(it.Value())
		if err != nil {
			return nil, err
		}
		out[binary.BigEndian.Uint64(it.Key()[1:])] = m
	}
	return out, it.Error()
}

// checkpoint returns the recorded checkpoint (zero if none).
func (x *index) checkpoint() (journal.Position, error) {
	v, ok, err := x.get([]byte{keyCheckpoint})
	if !ok || err != nil {
		return journal.Position{}, err
	}
	if len(v) != posSize {
		return journal.Position{}, x.corrupt("checkpoint of %d bytes", len(v))
	}
	return decodePos(v), nil
}

// pebbleLogger sends Pebble's log lines to slog.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "component", "pebble")
	panic(msg)
}
