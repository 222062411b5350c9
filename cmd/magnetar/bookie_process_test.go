package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/bookie/wire"
)

// freePort returns a loopback address whose port was free a moment ago. A
// bookie's address is its identity, so a restarted bookie needs the same
// one; port 0 would give it another.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func startBookieProc(t *testing.T, dataDir, addr string) *proc {
	t.Helper()
	p := startMagnetar(t, "bookie", "--data-dir", dataDir, "--bookie-listen", addr,
		"--metadata-store", "local:", "--log-format", "json")
	line := p.waitLine(`"msg":"magnetar bookie ready"`, 60*time.Second)
	var ready struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(line), &ready); err != nil || ready.ID != addr {
		t.Fatalf("ready line %s: id %q, want %q (%v)", line, ready.ID, addr, err)
	}
	return p
}

// TestBookieKeepsAcknowledgedEntriesAcrossSIGKILL streams pipelined adds
// to a `magnetar bookie` process, kills it with SIGKILL mid-stream,
// restarts it on the same disks and reads back every entry it acknowledged.
func TestBookieKeepsAcknowledgedEntriesAcrossSIGKILL(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	addr := freePort(t)
	p := startBookieProc(t, dataDir, addr)

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const ledger, total = 7, 20000
	acked := make(chan int64, total)
	go func() { // read acknowledgements until the connection dies
		r := bufio.NewReader(c)
		var buf []byte
		for {
			h, body, b, err := wire.ReadFrame(r, buf)
			buf = b
			if err != nil {
				close(acked)
				return
			}
			if st, _, _ := wire.ParseStatus(body); st == wire.StatusOK && h.Op == wire.OpAdd {
				acked <- int64(h.ReqID)
			}
		}
	}()
	go func() {
		w := bufio.NewWriter(c)
		for e := int64(0); e < total; e++ {
			payload := fmt.Appendf(nil, "entry-%d", e)
			frame := wire.AppendFrame(nil, wire.Header{Op: wire.OpAdd, ReqID: uint64(e)},
				entry.Encode(nil, entry.Header{Ledger: ledger, Entry: e, LAC: e - 1}, payload))
			if _, err := w.Write(frame); err != nil {
				return
			}
			if e%100 == 99 && w.Flush() != nil {
				return
			}
		}
		w.Flush()
	}()
	// Kill it once a good number of adds are acknowledged, while more are
	// in flight.
	var got []int64
	for len(got) < 2000 {
		select {
		case e, ok := <-acked:
			if !ok {
				t.Fatalf("connection closed after %d acknowledgements", len(got))
			}
			got = append(got, e)
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d adds acknowledged in 30s", len(got))
		}
	}
	p.signal(syscall.SIGKILL)
	p.wait(10 * time.Second)
	for e := range acked { // acknowledged before the kill, still buffered
		got = append(got, e)
	}
	c.Close()

	p = startBookieProc(t, dataDir, addr)
	rc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	rc.SetDeadline(time.Now().Add(60 * time.Second))
	w := bufio.NewWriter(rc)
	for _, e := range got {
		w.Write(wire.AppendFrame(nil, wire.Header{Op: wire.OpRead, ReqID: uint64(e)}, wire.LedgerEntry(ledger, e)))
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(rc)
	for range got {
		h, body, _, err := wire.ReadFrame(r, nil)
		if err != nil {
			t.Fatalf("reading back: %v", err)
		}
		st, payload, _ := wire.ParseStatus(body)
		if st != wire.StatusOK {
			t.Fatalf("acknowledged entry %d lost after SIGKILL: status %d", h.ReqID, st)
		}
		eh, err := entry.Verify(payload)
		if err != nil || eh.Entry != int64(h.ReqID) || string(entry.Payload(payload)) != fmt.Sprintf("entry-%d", h.ReqID) {
			t.Fatalf("entry %d read back wrong: %+v %v %q", h.ReqID, eh, err, entry.Payload(payload))
		}
	}
	t.Logf("%d acknowledged entries survived SIGKILL", len(got))
	p.signal(syscall.SIGTERM)
	if code := p.wait(15 * time.Second); code != 0 {
		t.Fatalf("bookie exit code %d after SIGTERM", code)
	}
}
