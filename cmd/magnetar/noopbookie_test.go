package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/bookie/storage"
)

// The durable no-op bookie's storage acknowledges an add only once the
// entry is in its file, refuses a bad checksum, tracks the LAC of what it
// acknowledged, refuses reads, and fails adds once its file cannot be
// written.
func TestNoopBookieStorage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "store")
	var synced int
	st, err := openNoopStore(ctx, slog.Default(), vfs.Default, path, 64<<10, func(n int) { synced += n })
	if err != nil {
		t.Fatal(err)
	}
	s := &noopBookieStorage{store: st, lacs: map[int64][2]int64{}}
	add := func(e []byte) error {
		ch := make(chan error, 1)
		s.AddEntry(e, false, func(err error) { ch <- err })
		select {
		case err := <-ch:
			return err
		case <-ctx.Done():
			t.Fatal("add not answered")
			return nil
		}
	}
	for i := range int64(3) {
		e := entry.Encode(nil, entry.Header{Ledger: 7, Entry: i, LAC: i - 1, Length: 100 * (i + 1)}, bytes.Repeat([]byte{byte('a' + i)}, 100))
		if err := add(e); err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
		data, err := os.ReadFile(path)
		if err != nil || !bytes.Contains(data, e) {
			t.Fatalf("entry %d acknowledged before it was in the file (%v)", i, err)
		}
	}
	if synced < 3*(entry.HeaderSize+100) {
		t.Errorf("onSync counted %d bytes for 3 entries of %d", synced, entry.HeaderSize+100)
	}
	if lac, last, err := s.LastAddConfirmed(7); lac != 1 || last != 2 || err != nil {
		t.Errorf("LastAddConfirmed: %d, %d, %v; want 1, 2", lac, last, err)
	}
	if _, _, err := s.LastAddConfirmed(8); !errors.Is(err, storage.ErrNoLedger) {
		t.Errorf("LastAddConfirmed of an unknown ledger: %v", err)
	}
	bad := entry.Encode(nil, entry.Header{Ledger: 7, Entry: 3, LAC: 2}, []byte("payload"))
	bad[len(bad)-1] ^= 1
	if err := add(bad); !errors.Is(err, storage.ErrChecksum) {
		t.Errorf("add with a bad checksum: %v, want storage.ErrChecksum", err)
	}
	if _, err := s.ReadEntry(7, 0); err == nil {
		t.Error("a read answered")
	}
	st.Close()

	st, err = openNoopStore(ctx, slog.New(slog.DiscardHandler), failingWritesFS{vfs.Default}, path, 64<<10, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s = &noopBookieStorage{store: st, lacs: map[int64][2]int64{}}
	if err := add(entry.Encode(nil, entry.Header{Ledger: 1, LAC: -1}, []byte("x"))); err == nil {
		t.Error("an add acknowledged by a store that cannot write")
	}
}
