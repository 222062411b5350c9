// Package local is the embedded metadata store: a meta.Store for one
// process, persistent and crash-safe in a directory, used by
// `magnetar standalone` by default.
//
// # Design
//
// All nodes live in memory in two trees of the same shape. A single writer
// goroutine takes write requests in batches, validates and applies each to
// the writer's tree (so compare-and-set is checked against every earlier
// write, durable or not), stores the batch's persistent changes in one
// bbolt transaction (one fsync for the whole batch: group commit), and only
// then replays the batch's mutations on the readers' tree, fires watches and
// answers the callers. Readers therefore never see a write that a crash
// could take back, and no lock is held across a disk sync.
//
// If the transaction fails (a full disk, an I/O error) the writer's tree is
// rebuilt from the readers' tree, every request of the batch fails with the
// error, and the store goes on: nothing half-written becomes visible.
//
// bbolt (go.etcd.io/bbolt) was chosen over Pebble for this store: the
// metadata is small, read from memory and written in small transactions, and
// a single-file copy-on-write B+tree with no background compaction is the
// simplest thing that is crash-safe. Its file lock also keeps a second
// process out of the directory.
//
// # Sessions
//
// Open returns the first session; NewSession opens more on the same store
// (the conformance suite uses several; standalone may give each component
// its own). Ephemeral nodes are kept only in memory: they belong to a
// session and vanish when it closes, expires (ExpireSession) or the process
// ends. The store closes when its last session closes.
//
// # On-disk format
//
// One bbolt file, meta.db, in the directory. Bucket "nodes" maps a node's
// path (UTF-8 bytes) to its record; the root "/" is stored only once it has
// a value or a sequential counter. Bucket "format" holds key "version" = 1.
//
//	record (big-endian):
//	+---------+---------+---------+---------+---------+-----------+
//	| fmt u8  | version | ctime   | mtime   | seq     | value ... |
//	| = 1     | i64     | i64 ns  | i64 ns  | i64     |           |
//	+---------+---------+---------+---------+---------+-----------+
//
// These constants are an on-disk format: change them only with a new
// format version and a migration.
package local
