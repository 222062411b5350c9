package main

import (
	"strings"
	"testing"
)

// TestAdminBookiesUnderReplicated: `admin bookies under-replicated` asks
// the auto-recovery endpoint and prints a table (or the JSON with -o
// json, or a line when nothing is under-replicated).
func TestAdminBookiesUnderReplicated(t *testing.T) {
	clearEnv(t)
	const list = `[{"ledgerId":7,"missingBookies":["10.0.0.4:3181"],"markedAt":1700000000000,"entriesCopied":0},` +
		`{"ledgerId":12,"missingBookies":["10.0.0.2:3181","10.0.0.4:3181"],"markedAt":1700000000000,"replicatingBy":"10.0.0.3:3181","entriesCopied":1200}]`
	f := newFakeAdmin(t, map[string]fakeAnswer{"GET /admin/v2/autorecovery/under-replicated": ok(list)})
	r := run(t, "admin", "bookies", "under-replicated", "--url", f.URL)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "LEDGER") ||
		!strings.Contains(lines[1], "7 ") || !strings.Contains(lines[1], "10.0.0.4:3181") || !strings.HasSuffix(lines[1], "-") ||
		!strings.Contains(lines[2], "10.0.0.2:3181,10.0.0.4:3181") || !strings.Contains(lines[2], "2023-11-14T22:13:20Z") ||
		!strings.Contains(lines[2], "10.0.0.3:3181") || !strings.HasSuffix(lines[2], "1200") {
		t.Errorf("text output:\n%s", r.stdout)
	}
	if got := f.got(); len(got) != 1 || got[0] != "GET /admin/v2/autorecovery/under-replicated" {
		t.Errorf("requests %v", got)
	}

	r = run(t, "admin", "bookies", "under-replicated", "-o", "json", "--url", f.URL)
	if r.code != 0 || !strings.Contains(r.stdout, `"replicatingBy": "10.0.0.3:3181"`) {
		t.Errorf("json output: exit %d, %s", r.code, r.stdout)
	}

	empty := newFakeAdmin(t, map[string]fakeAnswer{"GET /admin/v2/autorecovery/under-replicated": ok(`[]`)})
	r = run(t, "admin", "bookies", "under-replicated", "--url", empty.URL)
	if r.code != 0 || r.stdout != "no under-replicated ledgers\n" {
		t.Errorf("empty list: exit %d, stdout %q", r.code, r.stdout)
	}
}
