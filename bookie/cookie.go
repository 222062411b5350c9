package bookie

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/meta"
)

// A cookie ties a bookie's identity to its disks. It is written once, when
// a bookie first starts, into each of its directories and into the
// metadata store. A bookie whose directories lost their cookie (a wiped or
// replaced disk) while the metadata store still has one must not rejoin
// under its old identity: clients would read from it entries it no longer
// has. Format (JSON, in <dir>/COOKIE and at /bookies/cookies/<id>):
//
//	{"format":1,"bookieId":"host:3181","instanceId":"<32 hex>","dataDir":"...","journalDir":"..."}
type cookie struct {
	Format     int    `json:"format"`
	BookieID   string `json:"bookieId"`
	InstanceID string `json:"instanceId"`
	DataDir    string `json:"dataDir"`
	JournalDir string `json:"journalDir"`
}

const (
	cookieFormat = 1
	cookieFile   = "COOKIE"
	cookiesRoot  = "/bookies/cookies"
)

// ErrCookie reports a bookie whose identity does not match its disks.
var ErrCookie = errors.New("bookie: cookie mismatch")

// checkCookie verifies, or on first start writes, the cookies of dirs.
func checkCookie(ctx context.Context, fs vfs.FS, store meta.Store, want cookie, dirs []string) error {
	metaPath := meta.Join(cookiesRoot, want.BookieID)
	stored, _, err := store.Get(ctx, metaPath)
	var inMeta *cookie
	switch {
	case err == nil:
		var c cookie
		if err := json.Unmarshal(stored, &c); err != nil {
			return fmt.Errorf("%w: cookie at %s in the metadata store is not valid JSON: %v", ErrCookie, metaPath, err)
		}
		inMeta = &c
	case !errors.Is(err, meta.ErrNotFound):
		return fmt.Errorf("bookie: reading cookie %s: %w", metaPath, err)
	}

	var local []*cookie
	for _, dir := range dirs {
		c, err := readCookie(fs, dir)
		if err != nil {
			return err
		}
		local = append(local, c)
	}

	missing := 0
	for i, c := range local {
		switch {
		case c == nil:
			missing++
		case inMeta == nil:
			return fmt.Errorf("%w: %s has the cookie of bookie %s (instance %s), but the metadata store has none at %s: "+
				"this disk belongs to another cluster or the metadata was reset", ErrCookie, dirs[i], c.BookieID, c.InstanceID, metaPath)
		case c.InstanceID != inMeta.InstanceID || c.BookieID != inMeta.BookieID:
			return fmt.Errorf("%w: %s holds bookie %s instance %s, the metadata store says bookie %s is instance %s",
				ErrCookie, dirs[i], c.BookieID, c.InstanceID, inMeta.BookieID, inMeta.InstanceID)
		}
	}
	if inMeta != nil && missing > 0 {
		return fmt.Errorf("%w: bookie %s is registered (cookie at %s, instance %s) but %d of its directories %v have no cookie: "+
			"a disk was wiped or replaced and the entries it held are gone. Re-replicate its ledgers, delete %s, and start it again to join as a new bookie",
			ErrCookie, want.BookieID, metaPath, inMeta.InstanceID, missing, dirs, metaPath)
	}
	if inMeta != nil {
		return nil // every directory matches
	}

	// First start: the metadata store first, so that a crash in between
	// leaves a state the next start reports instead of silently accepting.
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return err
	}
	want.Format, want.InstanceID = cookieFormat, hex.EncodeToString(id[:])
	b, _ := json.Marshal(want)
	if err := meta.EnsurePath(ctx, store, cookiesRoot); err != nil {
		return err
	}
	if _, err := store.Create(ctx, metaPath, b, 0); err != nil {
		return fmt.Errorf("bookie: registering cookie %s: %w", metaPath, err)
	}
	for _, dir := range dirs {
		if err := writeCookie(fs, dir, b); err != nil {
			return err
		}
	}
	return nil
}

func readCookie(fs vfs.FS, dir string) (*cookie, error) {
	name := fs.PathJoin(dir, cookieFile)
	f, err := fs.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bookie: opening %s: %w", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("bookie: reading %s: %w", name, err)
	}
	var c cookie
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%w: %s is not a valid cookie: %v", ErrCookie, name, err)
	}
	return &c, nil
}

// writeCookie writes the cookie durably: a temporary file, synced, renamed
// into place, and the directory synced.
func writeCookie(fs vfs.FS, dir string, b []byte) error {
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bookie: creating %s: %w", dir, err)
	}
	tmp, name := fs.PathJoin(dir, cookieFile+".tmp"), fs.PathJoin(dir, cookieFile)
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("bookie: writing %s: %w", tmp, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("bookie: writing %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("bookie: syncing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := fs.Rename(tmp, name); err != nil {
		return fmt.Errorf("bookie: renaming %s: %w", tmp, err)
	}
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
