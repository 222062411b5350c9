// Package storage is the ledger storage of one bookie: the journal (its
// write-ahead log, package bookie/journal), entry logs, the (ledger, entry)
// index, ledger state (fenced, deleted, LAC), checkpoints, recovery and
// garbage collection.
//
// # Durability order
//
// An add is verified (entry.Verify), checked against the ledger's state
// (and the fences and deletes journaled but not yet applied), journaled,
// and once its journal record is fsynced (group commit) it is
// acknowledged and handed to the applier goroutine, while the journal goes
// on with the next group. The applier takes everything handed to it and
// applies it in journal order: entries appended to the current entry log
// (a buffer, written when full, its writeback started as it grows; or
// written with O_DIRECT by a goroutine while the next buffer fills,
// Options.EntryLogDirectIO, directwrite.go),
// indexed with one Pebble batch (not synced) up to the next fence or
// delete, counted in the ledgers' LACs. Reads and LAC queries that could
// concern an acknowledged add wait for the applier (ack.go). Fence and
// delete are journal records too, acknowledged once applied, in the same
// order, so they survive a crash and replay exactly where they were.
//
// A checkpoint (Checkpoint, every CheckpointInterval, and at Close) takes
// P, the end of the last applied journal record (records journaled but
// not yet applied lie after it); fsyncs the entry logs;
// records P in the index and flushes it; and releases the journal files
// before P. Open replays the journal from P into a new entry log; the apply
// path is idempotent, so records already applied before the crash just
// repoint the index at their new copies. See apply.go and checkpoint.go for
// the invariants this rests on.
//
// # Files under Dir
//
//	<Dir>/entrylogs/<16 hex digits>.log   entry logs
//	<Dir>/index/                          Pebble
//	<Dir>/journal/                        the journal (Options.JournalDir may move it)
//
// # Journal records (on-disk format)
//
//	type 1 add:    body = the entry bytes (bookie/entry format)
//	type 4 recovery add: body = the entry bytes; applied even to a fenced ledger
//	type 2 fence:  body = ledger u64
//	type 3 delete: body = ledger u64
//
// # Entry logs (on-disk format)
//
//	file:   header record*
//	header: magic u32 = 0x4d474c47 ("MGLG") | version u32 = 1
//	record: length u32 | entry (length bytes)
//
// Big-endian. Entry logs are shared by all ledgers and only appended to
// while current; each Open starts a new one, so a torn tail is never
// appended to. A finished log is rotated away from at EntryLogMaxSize.
// Logs written with O_DIRECT end in zeros up to a 4 KiB boundary, after
// their last record.
// The entry carries its own CRC-32C: reads verify it and check the length
// prefix and header against the index, and report a mismatch or missing
// bytes as a *CorruptionError with the file and offset.
//
// # Index (on-disk format)
//
//	"v"                       → version u32 = 1
//	"e" ledger u64 entry u64  → log u64 | offset u64 | size u32
//	"l" ledger u64            → flags u8 (1 fenced, 2 deleted) | fencedAt pos | deletedAt pos
//	"m" log u64               → validLength u64 | n u32 | n × (ledger u64 | bytes u64)
//	"c"                       → checkpoint pos
//
// pos is a journal.Position: file u64 | offset u64. Big-endian throughout,
// so an iterator over "e" ledger walks the ledger's entries in order (the
// last one gives lastEntry and, from its header, the LAC after a restart).
// index.go has the details.
//
// The checkpoint is a key in the index rather than a file of its own: the
// flush that makes the index durable makes the checkpoint durable with it,
// atomically (the index, WAL off, is durable as a prefix of its writes),
// with no extra file, rename or directory fsync.
//
// # Why Pebble
//
// The index takes one small put per entry, at the bookie's full add rate,
// from one goroutine; deletes drop a whole ledger's key range; lookups are
// point reads plus "last key of a ledger" seeks. Pebble (an LSM tree)
// turns the puts into sequential memtable flushes, deletes a ledger with
// one range tombstone, and runs with its WAL off: the journal already is
// the write-ahead log, so an index write costs no fsync and a memtable
// flush is the durability point the checkpoint needs. bbolt (a B+tree with
// copy-on-write pages) would fsync per transaction, rewrite pages for
// scattered small keys, delete a ledger key by key, and could not skip its
// own durability in favour of ours. Pebble also runs on the same vfs.FS
// seam, so crash and fault tests cover the index too.
//
// # Failures
//
// Bad input (checksum, malformed entry) is refused before anything is
// stored. A journal failure fails the add and, since the journal refuses
// everything after, makes the storage read-only. An entry-log or index
// write failure, or an fsync failure in a checkpoint, comes after the add
// was acknowledged (it is durable in the journal): the storage becomes
// read-only (ErrReadOnly). Reads of what was applied keep working; reads
// of acknowledged entries it could not apply fail with ErrReadOnly; no
// checkpoint covers them, so a restart replays them.
//
// A disk fuller than Options.DiskUsageThreshold makes adds fail with
// ErrReadOnly too, but only until it is back under
// DiskUsageWarnThreshold: nothing failed, and nothing is lost (disk.go).
//
// # Garbage collection
//
// GC (every GCInterval, or GC) removes finished entry logs whose ledgers
// are all deleted and compacts those whose live fraction fell below
// GCMinLiveRatio, copying live entries to the current log, batch by batch,
// fsyncing the copies before repointing the index at them, and removing
// the old log only once the index no longer points into it durably. See
// gc.go.
package storage
