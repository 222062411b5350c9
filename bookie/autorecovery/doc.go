// Package autorecovery restores the replication of ledgers whose bookies
// are gone, as BookKeeper's auto-recovery does: an auditor finds
// under-replicated ledgers and marks them, and a replication worker in
// every bookie process copies their entries to other bookies.
//
// # Nodes
//
// Everything lives in the metadata store under meta.UnderReplicationRoot:
//
//	/ledgers/underreplication/auditor       ephemeral, the elected auditor:
//	                                        {"bookie":"10.0.0.1:3181","since":1700000000000}
//	/ledgers/underreplication/ledgers/<id>  persistent mark of an under-replicated ledger:
//	                                        {"missingBookies":["10.0.0.2:3181"],"markedAt":1700000000000}
//	/ledgers/underreplication/locks/<id>    ephemeral, held by the worker re-replicating <id>:
//	                                        {"bookie":"10.0.0.3:3181","startedAt":1700000000000,"entriesCopied":1200}
//
// These JSON values are a stored format: fields may be added, none
// renamed. Times are Unix milliseconds.
//
// # Roles
//
// The auditor (one per cluster, elected by creating the auditor node; the
// others watch it and try again when it goes) marks a ledger when an
// ensemble of it names a bookie that has been missing from
// /bookies/available for the grace period. It looks on every change of
// /bookies/available and every audit interval. A bookie that restarts
// within the grace period causes no copying.
//
// A worker takes a marked ledger by creating its lock, re-replicates it
// (client.ReplicateLedger), removes the mark if it did not change
// meanwhile, and removes the lock. A failure, or a ledger whose only lost
// bookie is in the last ensemble of a ledger still open, keeps the mark
// and is retried with backoff. A worker that dies loses its lock with its
// session, and another takes the ledger over.
package autorecovery
