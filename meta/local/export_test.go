package local

import bolt "go.etcd.io/bbolt"

// SetCommitHook replaces the transaction runner of s's backend, so tests can
// make writes fail as a full disk would.
func SetCommitHook(s *Store, hook func(update func(*bolt.Tx) error) error) {
	if hook == nil {
		hook = s.b.db.Update
	}
	s.b.update = hook
}
