package bookie

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/bookie/wire"
)

// memStorage is a minimal in-memory Storage for the server's unit tests;
// the real storage is tested in bookie/storage and end to end elsewhere.
type memStorage struct {
	mu      sync.Mutex
	entries map[[2]int64][]byte
	lac     map[int64]int64
	fenced  map[int64]bool
	waiters []chan struct{}
	hold    chan struct{} // if set, adds complete only when it is closed
}

func newMemStorage() *memStorage {
	return &memStorage{entries: map[[2]int64][]byte{}, lac: map[int64]int64{}, fenced: map[int64]bool{}}
}

var errNotHere = errors.New("mem: no such entry")

func (m *memStorage) AddEntry(e []byte, recovery bool, done func(error)) {
	h, err := entry.Verify(e) // as Storage must
	if err != nil {
		done(err)
		return
	}
	m.mu.Lock()
	if m.fenced[h.Ledger] && !recovery {
		m.mu.Unlock()
		done(wire.ErrFenced)
		return
	}
	m.entries[[2]int64{h.Ledger, h.Entry}] = e
	if lac, ok := m.lac[h.Ledger]; !ok || h.LAC > lac {
		m.lac[h.Ledger] = h.LAC
	}
	ws := m.waiters
	m.waiters = nil
	hold := m.hold
	m.mu.Unlock()
	for _, w := range ws {
		close(w)
	}
	if hold != nil {
		go func() { <-hold; done(nil) }()
		return
	}
	done(nil)
}

func (m *memStorage) ReadEntry(ledger, id int64) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[[2]int64{ledger, id}]
	if !ok {
		return nil, fmt.Errorf("%w: %d/%d", wire.ErrNoEntry, ledger, id)
	}
	return append([]byte(nil), e...), nil
}

func (m *memStorage) LastAddConfirmed(ledger int64) (int64, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	lac, ok := m.lac[ledger]
	if !ok {
		return 0, 0, wire.ErrNoLedger
	}
	return lac, lac + 1, nil
}

func (m *memStorage) WaitLAC(ctx context.Context, ledger, after int64) (int64, error) {
	for {
		m.mu.Lock()
		lac, ok := m.lac[ledger]
		if ok && lac > after {
			m.mu.Unlock()
			return lac, nil
		}
		w := make(chan struct{})
		m.waiters = append(m.waiters, w)
		m.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

func (m *memStorage) Fence(ledger int64, done func(int64, int64, error)) {
	m.mu.Lock()
	m.fenced[ledger] = true
	lac := m.lac[ledger]
	m.mu.Unlock()
	done(lac, lac+1, nil)
}

func (m *memStorage) Delete(ledger int64, done func(error)) { done(nil) }

// startServer serves st on a loopback port and returns a connected client.
func startServer(t *testing.T, st Storage) (*Server, net.Conn) {
	t.Helper()
	srv, err := NewServer(ServerConfig{Storage: st, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return srv, c
}

type response struct {
	h       wire.Header
	status  wire.Status
	payload []byte
}

func readResponse(t *testing.T, r *bufio.Reader) response {
	t.Helper()
	h, body, _, err := wire.ReadFrame(r, nil)
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	st, payload, err := wire.ParseStatus(body)
	if err != nil {
		t.Fatal(err)
	}
	return response{h, st, payload}
}

func TestPipelinedRequests(t *testing.T) {
	_, c := startServer(t, newMemStorage())
	r := bufio.NewReader(c)
	// 100 adds in one write, then reads of them, without waiting.
	var req []byte
	for i := range 100 {
		e := entry.Encode(nil, entry.Header{Ledger: 1, Entry: int64(i), LAC: int64(i) - 1}, []byte(fmt.Sprint("payload-", i)))
		req = wire.AppendFrame(req, wire.Header{Op: wire.OpAdd, ReqID: uint64(i)}, e)
	}
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for range 100 {
		resp := readResponse(t, r)
		if resp.status != wire.StatusOK || resp.h.Op != wire.OpAdd {
			t.Fatalf("add %d: %+v", resp.h.ReqID, resp)
		}
		vs, _ := wire.ParseInt64s(resp.payload, 2)
		if vs[0] != 1 || uint64(vs[1]) != resp.h.ReqID {
			t.Fatalf("add response %v for request %d", vs, resp.h.ReqID)
		}
		seen[resp.h.ReqID] = true
	}
	if len(seen) != 100 {
		t.Fatalf("%d distinct responses", len(seen))
	}
	req = req[:0]
	for i := range 100 {
		req = wire.AppendFrame(req, wire.Header{Op: wire.OpRead, ReqID: uint64(1000 + i)}, wire.LedgerEntry(1, int64(i)))
	}
	c.Write(req)
	for range 100 {
		resp := readResponse(t, r)
		h, err := entry.Verify(resp.payload)
		if resp.status != wire.StatusOK || err != nil || uint64(h.Entry)+1000 != resp.h.ReqID {
			t.Fatalf("read %d: status %d, %+v, %v", resp.h.ReqID, resp.status, h, err)
		}
	}
}

func TestRequestErrors(t *testing.T) {
	st := newMemStorage()
	_, c := startServer(t, st)
	r := bufio.NewReader(c)
	good := entry.Encode(nil, entry.Header{Ledger: 2, Entry: 0, LAC: -1}, []byte("x"))
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)-1] ^= 1
	cases := []struct {
		name  string
		h     wire.Header
		body  []byte
		want  wire.Status
		after func()
	}{
		{"bad checksum", wire.Header{Op: wire.OpAdd, ReqID: 1}, corrupt, wire.StatusChecksum, nil},
		{"short entry", wire.Header{Op: wire.OpAdd, ReqID: 2}, []byte("short"), wire.StatusMalformed, nil},
		{"missing entry", wire.Header{Op: wire.OpRead, ReqID: 3}, wire.LedgerEntry(2, 0), wire.StatusNoEntry, nil},
		{"malformed read", wire.Header{Op: wire.OpRead, ReqID: 4}, []byte{1, 2}, wire.StatusMalformed, nil},
		{"unknown op", wire.Header{Op: 77, ReqID: 5}, nil, wire.StatusUnknownOp, nil},
		{"fence", wire.Header{Op: wire.OpReadLAC, Flags: wire.FlagFence, ReqID: 6}, wire.Ledger(2), wire.StatusOK, nil},
		{"add after fence", wire.Header{Op: wire.OpAdd, ReqID: 7}, good, wire.StatusFenced, nil},
		{"recovery add after fence", wire.Header{Op: wire.OpAdd, Flags: wire.FlagRecovery, ReqID: 8}, good, wire.StatusOK, nil},
		{"wait lac times out", wire.Header{Op: wire.OpWaitLAC, ReqID: 9}, wire.WaitLAC(2, 5, 10), wire.StatusTimeout, nil},
	}
	for _, tc := range cases {
		c.Write(wire.AppendFrame(nil, tc.h, tc.body))
		resp := readResponse(t, r)
		if resp.status != tc.want || resp.h.ReqID != tc.h.ReqID {
			t.Errorf("%s: status %d for request %d, want %d", tc.name, resp.status, resp.h.ReqID, tc.want)
		}
	}
}

func TestWaitLACWokenByAdd(t *testing.T) {
	_, c := startServer(t, newMemStorage())
	r := bufio.NewReader(c)
	c.Write(wire.AppendFrame(nil, wire.Header{Op: wire.OpWaitLAC, ReqID: 1}, wire.WaitLAC(3, 0, 30000)))
	e := entry.Encode(nil, entry.Header{Ledger: 3, Entry: 2, LAC: 1}, nil)
	c.Write(wire.AppendFrame(nil, wire.Header{Op: wire.OpAdd, ReqID: 2}, e))
	got := map[uint64]response{}
	for range 2 {
		resp := readResponse(t, r)
		got[resp.h.ReqID] = resp
	}
	if vs, err := wire.ParseInt64s(got[1].payload, 1); got[1].status != wire.StatusOK || err != nil || vs[0] != 1 {
		t.Fatalf("wait-lac answer: %+v", got[1])
	}
}

func TestBadFrameClosesOnlyThatConnection(t *testing.T) {
	srv, c := startServer(t, newMemStorage())
	_ = srv
	bad := binary.BigEndian.AppendUint32(nil, wire.MaxFrameSize+1)
	c.Write(bad)
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after an oversized frame: %v, want EOF", err)
	}
}

// A client that sends requests but never reads answers must not stall the
// storage's callbacks: the server stops reading from it instead.
func TestSlowClientDoesNotBlockStorage(t *testing.T) {
	st := newMemStorage()
	srv, err := NewServer(ServerConfig{Storage: st, Logger: slog.New(slog.DiscardHandler), MaxPending: 4})
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe() // unbuffered: the server's writes block until read
	defer a.Close()
	srv.mu.Lock()
	c := srv.newConn(b)
	srv.conns[c] = struct{}{}
	srv.inflight.Add(1)
	srv.mu.Unlock()
	go c.serve()
	sent := make(chan int, 100)
	go func() {
		for i := range 100 {
			e := entry.Encode(nil, entry.Header{Ledger: 4, Entry: int64(i), LAC: -1}, nil)
			if _, err := a.Write(wire.AppendFrame(nil, wire.Header{Op: wire.OpAdd, ReqID: uint64(i)}, e)); err != nil {
				return
			}
			sent <- i
		}
	}()
	// The server takes a few requests and then stops reading; the storage
	// completed every add it was given without blocking.
	deadline := time.After(10 * time.Second)
	for n := 0; n < 5; n++ {
		select {
		case <-sent:
		case <-deadline:
			t.Fatal("server read fewer requests than expected")
		}
	}
	st.mu.Lock()
	stored := len(st.entries)
	st.mu.Unlock()
	if stored < 4 {
		t.Fatalf("storage holds %d entries", stored)
	}
	select {
	case i := <-sent:
		// Pipe writes complete only when the server reads; a sixth request
		// read would mean more than MaxPending+1 are outstanding.
		if i > 5 {
			t.Fatalf("server kept reading (request %d) with answers unread", i)
		}
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a.Close()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with a stuck client: %v", err)
	}
}

func TestReadRange(t *testing.T) {
	_, c := startServer(t, newMemStorage())
	r := bufio.NewReader(c)
	var req []byte
	for i := range 10 {
		e := entry.Encode(nil, entry.Header{Ledger: 5, Entry: int64(i), LAC: int64(i) - 1}, make([]byte, 100))
		req = wire.AppendFrame(req, wire.Header{Op: wire.OpAdd, ReqID: uint64(i)}, e)
	}
	c.Write(req)
	for range 10 {
		readResponse(t, r)
	}
	cases := []struct {
		first, last int64
		maxBytes    uint32
		want        int
		status      wire.Status
	}{
		{0, 9, 1 << 20, 10, wire.StatusOK},
		{3, 5, 1 << 20, 3, wire.StatusOK},
		{8, 20, 1 << 20, 2, wire.StatusOK}, // stops at the first missing entry
		{0, 9, 300, 2, wire.StatusOK},      // two 140-byte entries fit in 300
		{0, 9, 1, 1, wire.StatusOK},        // always at least one
		{10, 12, 1 << 20, 0, wire.StatusNoEntry},
		{5, 4, 1 << 20, 0, wire.StatusMalformed},
	}
	for i, tc := range cases {
		c.Write(wire.AppendFrame(nil, wire.Header{Op: wire.OpReadRange, ReqID: uint64(100 + i)}, wire.ReadRange(5, tc.first, tc.last, tc.maxBytes)))
		resp := readResponse(t, r)
		if resp.status != tc.status {
			t.Errorf("range %d-%d/%d: status %d, want %d", tc.first, tc.last, tc.maxBytes, resp.status, tc.status)
			continue
		}
		if tc.status != wire.StatusOK {
			continue
		}
		entries, err := wire.ParseEntries(resp.payload)
		if err != nil || len(entries) != tc.want {
			t.Errorf("range %d-%d/%d: %d entries (%v), want %d", tc.first, tc.last, tc.maxBytes, len(entries), err, tc.want)
			continue
		}
		for j, e := range entries {
			if h, err := entry.Verify(e); err != nil || h.Entry != tc.first+int64(j) {
				t.Errorf("range %d-%d: entry %d is %+v %v", tc.first, tc.last, j, h, err)
			}
		}
	}
}

// A ReadRange payload sent as parts is byte for byte wire.AppendEntries's.
func TestEntriesPayload(t *testing.T) {
	for _, entries := range [][][]byte{nil, {{}}, {[]byte("a"), bytes.Repeat([]byte("b"), 20000), []byte("cd")}} {
		got := bytes.Join(entriesPayload(entries), nil)
		if want := wire.AppendEntries(nil, entries); !bytes.Equal(got, want) {
			t.Fatalf("entries %d: parts join to %x, want %x", len(entries), got, want)
		}
	}
}
