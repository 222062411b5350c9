// Package client stores ledgers on several bookies: the replicated log that
// managed ledgers are built on, modelled on Apache BookKeeper's client.
//
// # Ledgers and quorums
//
// A ledger is an append-only sequence of entries 0, 1, 2, … with exactly one
// writer. It is stored on an ensemble of E bookies with a write quorum Qw and
// an ack quorum Qa (E ≥ Qw ≥ Qa ≥ 1). Entry e is sent to its write set: the
// Qw bookies of the ensemble at positions (e + i) mod E, i = 0 … Qw-1.
//
// An add is acknowledged (its done callback reports success) when Qa bookies
// of its write set have stored it durably AND every earlier entry is
// acknowledged. Completions are therefore delivered strictly in entry order,
// and the last-add-confirmed (LAC) — the last acknowledged entry — never has
// a gap below it. "Acknowledged" is the promise: nothing acknowledged is lost
// unless Qa bookies of its write set lose their disks, and every reader and
// every recovery sees it.
//
// The writer piggybacks its LAC in the header of each entry it sends
// (bookie/entry). Bookies remember the largest LAC they have seen, and
// readers of a ledger still being written ask them for it: a reader never
// reads past a LAC, so it never sees an entry that might later vanish.
//
// # Metadata
//
// A ledger's metadata (quorums, ensembles, state OPEN / IN_RECOVERY /
// CLOSED, last entry, length) is a JSON node in meta at
// /ledgers/<id/100000>/<id> (see LedgerMetadata). It is only ever changed by
// compare-and-set on the node's version; a writer or recoverer that loses a
// race re-reads the node and decides again.
//
// # Ensemble change
//
// When a bookie fails during writes (connection error, timeout, or an error
// status other than fenced), the writer replaces it by an available bookie
// not already in the ensemble. The new ensemble starts at LAC+1: every entry
// before it is acknowledged on the old one, and while the change is in
// flight no completion is delivered, so the LAC cannot move past the start
// of the new ensemble. The metadata is updated first (if the compare-and-set
// finds the ledger IN_RECOVERY or CLOSED, another client has taken it over
// and the writer is fenced); then every pending entry whose write set
// contained the failed bookie forgets that bookie's ack and is sent to the
// replacement. Entries stay ordered and nothing acknowledged is lost. Changes
// are serialized: a failure seen during a change is handled after it.
//
// # Fencing and recovery
//
// When a writer dies, its ledger stays OPEN with a tail nobody knows. A
// client opening the ledger with recovery closes it:
//
//  1. The metadata goes to IN_RECOVERY (so the old writer can no longer
//     change ensembles; an existing IN_RECOVERY means a recoverer died, and
//     recovery simply runs again).
//  2. Every bookie of the last ensemble is fenced (ReadLAC with FlagFence):
//     from then on it refuses the old writer's adds. Recovery waits until,
//     in every write set, at least Qw-Qa+1 bookies are fenced. Then at most
//     Qa-1 bookies of any write set can still accept an add, so the old
//     writer can never again gather the Qa acks an acknowledgement needs.
//     (Fencing fewer could let the old writer acknowledge an entry after
//     recovery decided the ledger's end.)
//  3. Starting after the largest LAC the fenced bookies report, entries are
//     read one by one from their write sets. An entry some bookie returns is
//     found; it is re-written with FlagRecovery to its whole write set,
//     repairing a tail that may sit on fewer than Qa bookies (bookies that
//     are down are skipped with a warning: recovery does not change
//     ensembles, and needs no more than one copy to be correct). An entry that
//     Qw-Qa+1 bookies of its write set do not have is absent: it can be on
//     at most Qa-1 bookies, so it was never acknowledged, and neither was
//     anything after it. Recovery stops there. When too many bookies are
//     unreachable to decide either way, recovery fails rather than guess.
//  4. The metadata goes to CLOSED with the last found entry and its length.
//     Concurrent recoveries race on that compare-and-set; the loser adopts
//     the winner's result.
//
// Every acknowledged entry is found (it sits on Qa bookies, so at most Qw-Qa
// can miss it), hence the closed ledger contains every acknowledged entry, in
// order. An entry that reached some bookies but was never acknowledged may
// end up either side of the end; both are allowed.
//
// # Concurrency
//
// Client, Writer and Reader are safe for concurrent use. Done callbacks run
// one at a time, in entry order, on a goroutine of the writer's own; they
// must not block on the same writer (AppendSync, Close).
//
// # Errors
//
// ErrFenced, ErrClosed, ErrNotEnoughBookies, ErrNoLedger and
// ErrReadBeyondLAC are returned wrapped; test them with errors.Is. Bookie
// statuses come back as the bookie/wire sentinels (wire.ErrNoEntry, …), and
// a replica whose bytes fail their checksum as entry.ErrChecksum.
package client
