package storage

import (
	"errors"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/internal/fsutil"
)

// noSyncFS turns every Sync into a no-op (Options.NoSync): the same code
// paths run, only the fsyncs are skipped, for journal, entry logs and
// Pebble alike.
type noSyncFS struct{ vfs.FS }

func (fs noSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return noSyncFile{}.wrap(fs.FS.Create(name, c))
}

func (fs noSyncFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	return noSyncFile{}.wrap(fs.FS.Open(name, opts...))
}

func (fs noSyncFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return noSyncFile{}.wrap(fs.FS.OpenReadWrite(name, c, opts...))
}

func (fs noSyncFS) OpenDir(name string) (vfs.File, error) {
	return noSyncFile{}.wrap(fs.FS.OpenDir(name))
}

func (fs noSyncFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return noSyncFile{}.wrap(fs.FS.ReuseForWrite(oldname, newname, c))
}

func (fs noSyncFS) Unwrap() vfs.FS { return fs.FS }

type noSyncFile struct{ vfs.File }

func (noSyncFile) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

func (noSyncFile) Sync() error                { return nil }
func (noSyncFile) SyncData() error            { return nil }
func (noSyncFile) SyncTo(int64) (bool, error) { return true, nil }

// syncDir fsyncs a directory so that entries created or removed in it
// survive a power loss.
func syncDir(fs vfs.FS, dir string) error { return fsutil.SyncDir(fs, dir) }

// mkdirAllSynced creates dir and its missing parents and fsyncs every
// parent whose entries changed, up to the closest existing ancestor, so
// the new directories survive a power loss.
func mkdirAllSynced(fs vfs.FS, dir string) error {
	var parents []string
	for p := fs.PathDir(dir); ; p = fs.PathDir(p) {
		parents = append(parents, p)
		if fs.PathDir(p) == p {
			break
		}
		if _, err := fs.Stat(p); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if _, err := fs.Stat(dir); err == nil {
		return nil
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range parents {
		if err := syncDir(fs, p); err != nil {
			return err
		}
	}
	return nil
}
