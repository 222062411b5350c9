package fsutil

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func writeBig(t *testing.T, path string, size int) {
	t.Helper()
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDeleteGradually(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "big")
	writeBig(t, path, 1<<20)
	g := Gradual{Step: 64 << 10, Pause: time.Millisecond}
	stopped, err := g.DeleteGradually(vfs.Default, path, nil)
	if stopped || err != nil {
		t.Fatalf("DeleteGradually: stopped %v, err %v", stopped, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("file still there: %v", err)
	}

	// Stopped: the file is left, cut by one step.
	writeBig(t, path, 1<<20)
	stop := make(chan struct{})
	close(stop)
	stopped, err = g.DeleteGradually(vfs.Default, path, stop)
	if !stopped || err != nil {
		t.Fatalf("DeleteGradually with stop: stopped %v, err %v", stopped, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != 1<<20-64<<10 {
		t.Fatalf("after a stop: %v, size %d, want %d", err, fi.Size(), 1<<20-64<<10)
	}

	// A file system without Truncate removes at once; a missing file is an
	// error the caller sees.
	mem := vfs.NewMem()
	f, _ := mem.Create("x", vfs.WriteCategoryUnspecified)
	f.Write(make([]byte, 1<<20))
	f.Close()
	if stopped, err := g.DeleteGradually(mem, "x", stop); stopped || err != nil {
		t.Fatalf("in memory: stopped %v, err %v", stopped, err)
	}
	if _, err := mem.Stat("x"); err == nil {
		t.Fatal("in-memory file still there")
	}
	if _, err := g.DeleteGradually(vfs.Default, filepath.Join(dir, "missing"), nil); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v, want not-exist", err)
	}
}

// AlignedBuffer: buffers start at a multiple of align and are whole
// blocks, whatever size is asked.
func TestAlignedBuffer(t *testing.T) {
	for _, align := range []int{512, 4096} {
		for _, n := range []int{1, align - 1, align, align + 1, 1 << 20} {
			b := AlignedBuffer(n, align)
			addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
			if len(b) < n || len(b)%align != 0 || cap(b) != len(b) || addr%uintptr(align) != 0 {
				t.Errorf("AlignedBuffer(%d, %d): len %d cap %d at %#x", n, align, len(b), cap(b), addr)
			}
		}
	}
}
