package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/meta/zk"
)

// TestBookieClusterSurvivesSIGKILL runs four `magnetar bookie` processes on
// ZooKeeper, writes a ledger with E/Qw/Qa 3/2/2 and SIGKILLs one bookie of
// its ensemble in the middle of a stream of adds. The writer must go on
// through an ensemble change (onto the fourth, spare bookie: an ensemble
// change needs a bookie outside the ensemble), every add must succeed, and
// every acknowledged entry must read back in order after the ledger is
// closed.
func TestBookieClusterSurvivesSIGKILL(t *testing.T) {
	zkAddr, chroot := testZKChroot(t, "magnetar-cluster-test")
	store := "zk:" + zkAddr + chroot

	procs := map[string]*proc{}
	for i := range 4 {
		addr := freePort(t)
		p := startMagnetar(t, "bookie", "--data-dir", filepath.Join(t.TempDir(), fmt.Sprint("b", i)),
			"--bookie-listen", addr, "--metadata-store", store, "--zk-session-timeout", "4s", "--log-format", "json")
		p.waitLine(`"msg":"magnetar bookie ready"`, 60*time.Second)
		procs[addr] = p
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ms, err := zk.Open(ctx, store[len("zk:"):], zk.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	c, err := client.New(client.Config{Meta: ms, Logger: slog.New(slog.DiscardHandler), AddTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := c.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	first := w.Metadata().Ensembles[0].Bookies
	victim := first[1]

	const total, window = 3000, 200
	type result struct {
		id  int64
		err error
	}
	results := make(chan result, total)
	slots := make(chan struct{}, window)
	go func() {
		for i := range total {
			slots <- struct{}{}
			w.Append(fmt.Appendf(nil, "entry-%d", i), func(id int64, err error) {
				<-slots
				results <- result{id, err}
			})
		}
	}()
	var ids []int64
	for len(ids) < total {
		select {
		case res := <-results:
			if res.err != nil {
				t.Fatalf("add %d failed after %d acknowledged: %v", len(ids), len(ids), res.err)
			}
			ids = append(ids, res.id)
			if len(ids) == 500 {
				procs[victim].signal(syscall.SIGKILL)
				t.Logf("SIGKILLed bookie %s after 500 acknowledged adds", victim)
			}
		case <-ctx.Done():
			t.Fatalf("only %d of %d adds completed", len(ids), total)
		}
	}
	for i, id := range ids {
		if id != int64(i) {
			t.Fatalf("completion %d reported entry %d: completions out of order", i, id)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}

	rd, err := c.OpenLedger(ctx, w.ID(), client.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	md := rd.Metadata()
	if md.State != client.StateClosed || md.LastEntry != total-1 {
		t.Fatalf("metadata after close: state %s, last entry %d", md.State, md.LastEntry)
	}
	if len(md.Ensembles) < 2 {
		t.Fatalf("no ensemble change recorded: %+v", md.Ensembles)
	}
	last := md.Ensembles[len(md.Ensembles)-1].Bookies
	if slices.Contains(last, victim) {
		t.Fatalf("killed bookie %s still in the last ensemble %v", victim, last)
	}
	t.Logf("ensembles: %+v", md.Ensembles)
	for from := int64(0); from < total; from += 500 {
		entries, err := rd.Read(ctx, from, min(from+499, total-1))
		if err != nil {
			t.Fatalf("reading %d..: %v", from, err)
		}
		for i, e := range entries {
			if want := fmt.Sprintf("entry-%d", from+int64(i)); e.ID != from+int64(i) || string(e.Payload) != want {
				t.Fatalf("entry %d: id %d payload %q, want %q", from+int64(i), e.ID, e.Payload, want)
			}
		}
	}
	for addr, p := range procs {
		if addr != victim {
			p.signal(syscall.SIGTERM)
			if code := p.wait(15 * time.Second); code != 0 {
				t.Errorf("bookie %s exit code %d", addr, code)
			}
		}
	}
}

// testZKChroot returns the test ZooKeeper's address (MAGNETAR_TEST_ZK,
// failing the test if unset) and a fresh chroot under /prefix.
func testZKChroot(t *testing.T, prefix string) (addr, chroot string) {
	t.Helper()
	addr = os.Getenv("MAGNETAR_TEST_ZK")
	if addr == "" {
		t.Fatal("MAGNETAR_TEST_ZK is not set: run `make test`, or `scripts/zookeeper.sh start` and export the address it prints")
	}
	var r [6]byte
	rand.Read(r[:])
	return addr, "/" + prefix + "/" + hex.EncodeToString(r[:])
}
