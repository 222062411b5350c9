package local

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/magnetar-io/magnetar/meta"
)

// On-disk format constants; see the package comment.
const (
	formatVersion = 1
	recordHeader  = 1 + 8*4
)

var (
	bucketNodes  = []byte("nodes")
	bucketFormat = []byte("format")
	keyVersion   = []byte("version")
)

// CorruptionError reports a record of the store's file that cannot be
// decoded. It is distinct from I/O errors and from bad client input.
type CorruptionError struct {
	File   string
	Key    string // the node path the record is stored under
	Reason string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("local: corrupt metadata record %q in %s: %s", e.Key, e.File, e.Reason)
}

func encodeRecord(n *node) []byte {
	b := make([]byte, recordHeader, recordHeader+len(n.value))
	b[0] = formatVersion
	binary.BigEndian.PutUint64(b[1:], uint64(n.version))
	binary.BigEndian.PutUint64(b[9:], uint64(n.ctime))
	binary.BigEndian.PutUint64(b[17:], uint64(n.mtime))
	binary.BigEndian.PutUint64(b[25:], uint64(n.seq))
	return append(b, n.value...)
}

// decodeRecord decodes a record. The value is copied out of b, which bbolt
// owns only for the transaction.
func decodeRecord(b []byte) (node, string) {
	if len(b) < recordHeader {
		return node{}, fmt.Sprintf("%d bytes, shorter than the %d-byte header", len(b), recordHeader)
	}
	if b[0] != formatVersion {
		return node{}, fmt.Sprintf("record format %d, want %d", b[0], formatVersion)
	}
	n := node{
		version: meta.Version(binary.BigEndian.Uint64(b[1:])),
		ctime:   int64(binary.BigEndian.Uint64(b[9:])),
		mtime:   int64(binary.BigEndian.Uint64(b[17:])),
		seq:     int64(binary.BigEndian.Uint64(b[25:])),
	}
	if n.version < 0 || n.seq < 0 {
		return node{}, fmt.Sprintf("negative version %d or counter %d", n.version, n.seq)
	}
	if len(b) > recordHeader {
		n.value = append([]byte(nil), b[recordHeader:]...)
	}
	return n, ""
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
