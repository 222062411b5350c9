package main

// `magnetar admin bookies`: bookie auto-recovery, /admin/v2/autorecovery/...

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// underReplicatedLedger is one entry of GET /admin/v2/autorecovery/under-replicated.
type underReplicatedLedger struct {
	LedgerID       int64    `json:"ledgerId"`
	MissingBookies []string `json:"missingBookies"`
	MarkedAt       int64    `json:"markedAt"`
	ReplicatingBy  string   `json:"replicatingBy"`
	EntriesCopied  int64    `json:"entriesCopied"`
}

func newAdminBookiesCommand(a *app) *cobra.Command {
	cmd := groupCommand("bookies", "Inspect bookie auto-recovery",
		"  magnetar admin bookies under-replicated")
	cmd.AddCommand(a.adminLeaf(&cobra.Command{
		Use:   "under-replicated",
		Short: "List the ledgers marked under-replicated, and their re-replication",
		Long: `List the ledgers the auditor marked under-replicated: a bookie their
ensembles name has been gone longer than the grace period. For each: the
missing bookies, when it was marked, and the bookie re-replicating it with
the entries copied so far (if one is). An empty list means every ledger is
fully replicated as of the last audit.`,
		Args:    cobra.NoArgs,
		Example: "  magnetar admin bookies under-replicated\n  magnetar admin bookies under-replicated -o json",
	}, func(r *adminRun, _ []string) error {
		resp, err := r.call("GET", "/admin/v2/autorecovery/under-replicated", nil, nil)
		if err != nil {
			return err
		}
		if r.json {
			return r.show(resp)
		}
		var list []underReplicatedLedger
		if err := json.Unmarshal(resp.Body, &list); err != nil {
			return runtimeError(fmt.Errorf("unexpected answer %.200q: %w", resp.Body, err))
		}
		return writeUnderReplicated(r, list)
	}))
	return cmd
}

// writeUnderReplicated prints the list as a table, or a line saying it is
// empty.
func writeUnderReplicated(r *adminRun, list []underReplicatedLedger) error {
	if len(list) == 0 {
		_, err := fmt.Fprintln(r.out, "no under-replicated ledgers")
		return err
	}
	tw := tabwriter.NewWriter(r.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LEDGER\tMISSING BOOKIES\tMARKED\tREPLICATING BY\tENTRIES COPIED")
	for _, l := range list {
		by, copied := "-", "-"
		if l.ReplicatingBy != "" {
			by, copied = l.ReplicatingBy, fmt.Sprint(l.EntriesCopied)
		}
		marked := time.UnixMilli(l.MarkedAt).UTC().Format(time.RFC3339)
		if ago := r.now().Sub(time.UnixMilli(l.MarkedAt)); ago >= 0 {
			marked += fmt.Sprintf(" (%s ago)", ago.Truncate(time.Second))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", l.LedgerID, strings.Join(l.MissingBookies, ","), marked, by, copied)
	}
	return tw.Flush()
}
