package admin

// Auto-recovery of bookies: the ledgers the auditor marked as
// under-replicated, read from the metadata store (bookie/autorecovery).
//
//	GET /admin/v2/autorecovery/under-replicated
//	→ [{"ledgerId": 12, "missingBookies": ["10.0.0.2:3181"], "markedAt": 1700000000000,
//	    "replicatingBy": "10.0.0.3:3181", "entriesCopied": 1200}, ...]
//
// replicatingBy (absent when no worker holds the ledger) and entriesCopied
// come from the worker's lock; markedAt is Unix milliseconds. An empty
// list means every ledger is fully replicated (as of the last audit).

import (
	"net/http"

	"github.com/magnetar-io/magnetar/bookie/autorecovery"
)

func init() { registrations = append(registrations, registerAutorecovery) }

func registerAutorecovery(a *api, s *Server) {
	a.handle(s, "GET /admin/v2/autorecovery/under-replicated", a.underReplicated)
}

func (a *api) underReplicated(w http.ResponseWriter, r *http.Request) error {
	if a.cfg.Meta == nil {
		return errStatus(http.StatusServiceUnavailable, "this broker has no access to the metadata store")
	}
	list, err := autorecovery.UnderReplicated(r.Context(), a.cfg.Meta)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}
