package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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
	st, err := openNoopStore(ctx, slog.Default(), vfs.Default, path, 64<<10, func(n int) { synced += n }, "")
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

	st, err = openNoopStore(ctx, slog.New(slog.DiscardHandler), failingWritesFS{vfs.Default}, path, 64<<10, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s = &noopBookieStorage{store: st, lacs: map[int64][2]int64{}}
	if err := add(entry.Encode(nil, entry.Header{Ledger: 1, LAC: -1}, []byte("x"))); err == nil {
		t.Error("an add acknowledged by a store that cannot write")
	}
}

// With an entry log, the durable no-op store writes every byte it made
// durable a second time, in order, to a growing file beside it, removed
// at Close with the store's; an entry log that cannot be written fails
// the store, with a log line, so later messages are refused.
func TestNoopStoreEntryLog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	path, logPath := filepath.Join(dir, "store"), filepath.Join(dir, "entrylog")
	st, err := openNoopStore(ctx, slog.Default(), vfs.Default, path, 64<<10, nil, logPath)
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for i := range 200 {
		data := bytes.Repeat([]byte{byte(i)}, 1000+i)
		want = append(want, data...)
		done := make(chan error, 1)
		if err := st.addFunc(data, func(err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
	}
	for {
		got, err := os.ReadFile(logPath)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(got, want) {
			break
		}
		if len(got) >= len(want) || ctx.Err() != nil {
			t.Fatalf("entry log of %d bytes, not the %d bytes added, in order", len(got), len(want))
		}
		time.Sleep(10 * time.Millisecond)
	}
	st.Close()
	for _, p := range []string{path, logPath} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Close: %v, want it removed", p, err)
		}
	}

	logged := &syncBuffer{}
	st, err = openNoopStore(ctx, slog.New(slog.NewTextHandler(logged, nil)), failingCreateFS{vfs.Default, logPath}, path, 64<<10, nil, logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for {
		done := make(chan error, 1)
		err := st.addFunc([]byte("x"), func(err error) { done <- err })
		if err == nil {
			err = <-done
		}
		if err != nil {
			if !strings.Contains(err.Error(), "entry log") {
				t.Errorf("refused with %v, want the entry log's failure", err)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatal("a store whose entry log cannot be written still takes messages")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if l := logged.String(); !strings.Contains(l, "the store failed") {
		t.Errorf("no log line for the failure: %q", l)
	}
}

// failingCreateFS creates the file at path with writes that fail.
type failingCreateFS struct {
	vfs.FS
	path string
}

func (fs failingCreateFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil || name != fs.path {
		return f, err
	}
	return failingWriteFile{f}, nil
}

type failingWriteFile struct{ vfs.File }

func (failingWriteFile) Write([]byte) (int, error) { return 0, errors.New("injected write failure") }
