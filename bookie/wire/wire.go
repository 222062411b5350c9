// Package wire is the bookie protocol: framed, binary, pipelined requests
// over TCP. A client may have many requests in flight on one connection;
// the bookie answers each with the request's id, in any order.
//
// # Frame (both directions)
//
//	+----------+------------+-------+----------+----------------+------+
//	| size u32 | version u8 | op u8 | flags u16| request id u64 | body |
//	+----------+------------+-------+----------+----------------+------+
//
// Big-endian. size counts every byte after itself and is at most
// MaxFrameSize; version is 1. A response carries the op and request id of
// its request and a body that starts with a status u16.
//
// # Bodies
//
//	op          request body                           response body after status (when StatusOK)
//	Add      1  entry (bookie/entry format)             ledger u64 | entry u64
//	Read     2  ledger u64 | entry u64                  entry
//	ReadLAC  3  ledger u64                              lac i64 | last entry i64
//	WaitLAC  4  ledger u64 | after i64 | timeout ms u32 lac i64
//	Delete   5  ledger u64                              (nothing)
//	ReadRange 6 ledger u64 | first u64 | last u64 |     count u32 | (length u32 | entry) × count
//	            max bytes u32
//
// Flags: FlagRecovery on Add writes to a fenced ledger (only recovery may);
// FlagFence on Read and ReadLAC fences the ledger first, so the old writer's
// adds fail from then on. ReadRange returns consecutive entries from first,
// stopping after last, at the first entry the bookie lacks, or before the
// response would pass max bytes (it always holds at least one entry);
// StatusNoEntry if it has not even the first. WaitLAC answers when the bookie's LAC for the
// ledger passes `after`, or with StatusTimeout when the timeout ends.
//
// These constants are a wire format: change them only with a new version.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/magnetar-io/magnetar/bookie/entry"
)

// Version is the protocol version in every frame.
const Version = 1

// HeaderSize is the frame header after the size field.
const HeaderSize = 1 + 1 + 2 + 8

// MaxFrameSize bounds size: the largest entry plus headers.
const MaxFrameSize = entry.MaxSize + HeaderSize + 64

// Op is a request type.
type Op uint8

const (
	OpAdd       Op = 1
	OpRead      Op = 2
	OpReadLAC   Op = 3
	OpWaitLAC   Op = 4
	OpDelete    Op = 5
	OpReadRange Op = 6
)

func (o Op) String() string {
	switch o {
	case OpAdd:
		return "add"
	case OpRead:
		return "read"
	case OpReadLAC:
		return "read-lac"
	case OpWaitLAC:
		return "wait-lac"
	case OpDelete:
		return "delete"
	case OpReadRange:
		return "read-range"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Request flags.
const (
	FlagRecovery uint16 = 1 << 0
	FlagFence    uint16 = 1 << 1
)

// Status is the outcome of a request.
type Status uint16

const (
	StatusOK           Status = 0
	StatusNoLedger     Status = 1  // the bookie has nothing of the ledger
	StatusNoEntry      Status = 2  // the ledger exists but not the entry
	StatusFenced       Status = 3  // the ledger is fenced: adds refused
	StatusChecksum     Status = 4  // the entry's checksum does not match
	StatusMalformed    Status = 5  // the request body cannot be decoded
	StatusTimeout      Status = 6  // WaitLAC: no newer LAC before the timeout
	StatusReadOnly     Status = 7  // the bookie refuses writes (disk failure, full disk)
	StatusUnknownOp    Status = 8  // the bookie does not know the op
	StatusShuttingDown Status = 9  // the bookie is stopping
	StatusInternal     Status = 10 // anything else; the bookie logged it
)

// Errors for statuses, so that clients can use errors.Is.
var (
	ErrNoLedger     = errors.New("bookie: no such ledger")
	ErrNoEntry      = errors.New("bookie: no such entry")
	ErrFenced       = errors.New("bookie: ledger fenced")
	ErrChecksum     = errors.New("bookie: entry checksum mismatch")
	ErrMalformed    = errors.New("bookie: malformed request")
	ErrTimeout      = errors.New("bookie: wait timed out")
	ErrReadOnly     = errors.New("bookie: read-only")
	ErrUnknownOp    = errors.New("bookie: unknown operation")
	ErrShuttingDown = errors.New("bookie: shutting down")
	ErrInternal     = errors.New("bookie: internal error")
)

var statusErrors = map[Status]error{
	StatusNoLedger: ErrNoLedger, StatusNoEntry: ErrNoEntry, StatusFenced: ErrFenced,
	StatusChecksum: ErrChecksum, StatusMalformed: ErrMalformed, StatusTimeout: ErrTimeout,
	StatusReadOnly: ErrReadOnly, StatusUnknownOp: ErrUnknownOp, StatusShuttingDown: ErrShuttingDown,
	StatusInternal: ErrInternal,
}

// Err returns the error for a status, nil for StatusOK.
func (s Status) Err() error {
	if s == StatusOK {
		return nil
	}
	if err, ok := statusErrors[s]; ok {
		return err
	}
	return fmt.Errorf("%w: status %d", ErrInternal, uint16(s))
}

// StatusOf maps an error to the status that reports it (errors.Is against
// the sentinels above), StatusInternal when none matches.
func StatusOf(err error) Status {
	if err == nil {
		return StatusOK
	}
	for s, e := range statusErrors {
		if errors.Is(err, e) {
			return s
		}
	}
	return StatusInternal
}

// ErrFrame reports a frame that cannot be read: the connection must close.
var ErrFrame = errors.New("bookie wire: bad frame")

// Header is a decoded frame header.
type Header struct {
	Op    Op
	Flags uint16
	ReqID uint64
}

// AppendFrame appends a frame with header h and the body parts to dst.
func AppendFrame(dst []byte, h Header, body ...[]byte) []byte {
	n := 0
	for _, b := range body {
		n += len(b)
	}
	dst = AppendFrameHead(dst, h, n)
	for _, b := range body {
		dst = append(dst, b...)
	}
	return dst
}

// AppendFrameHead appends the size and header of a frame whose body, of
// bodyLen bytes, the caller writes after it.
func AppendFrameHead(dst []byte, h Header, bodyLen int) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(HeaderSize+bodyLen))
	dst = append(dst, Version, byte(h.Op))
	dst = binary.BigEndian.AppendUint16(dst, h.Flags)
	return binary.BigEndian.AppendUint64(dst, h.ReqID)
}

// ReadFrame reads one frame from r into buf (grown as needed) and returns
// the header and body (a sub-slice of the returned buffer). Any error
// other than io.EOF at a frame boundary means the stream is unusable.
func ReadFrame(r io.Reader, buf []byte) (Header, []byte, []byte, error) {
	h, head, _, buf, err := ReadFrameSplit(r, buf, MaxFrameSize, 0, nil)
	return h, head, buf, err
}

// ReadFrameSplit reads one frame as ReadFrame does, except that the body
// of a frame larger than small bytes comes in two parts: its first lead
// bytes in head (a sub-slice of the returned buffer) and the rest in tail,
// a buffer from alloc that holds it alone, from its first byte (a read
// entry, for instance, after a response's status). For other frames tail
// is nil and head is the whole body.
func ReadFrameSplit(r io.Reader, buf []byte, small, lead int, alloc func(n int) []byte) (h Header, head, tail, _ []byte, err error) {
	var sz [4]byte
	if _, err := io.ReadFull(r, sz[:]); err != nil {
		return Header{}, nil, nil, buf, err
	}
	size := int(binary.BigEndian.Uint32(sz[:]))
	if size < HeaderSize || size > MaxFrameSize {
		return Header{}, nil, nil, buf, fmt.Errorf("%w: size %d outside [%d, %d]", ErrFrame, size, HeaderSize, MaxFrameSize)
	}
	first := size
	if size > small && size-HeaderSize > lead {
		first = HeaderSize + lead
	}
	if cap(buf) < first {
		buf = make([]byte, first)
	}
	buf = buf[:first]
	cut := func(err error) error {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("%w: %d-byte frame cut short: %w", ErrFrame, size, err)
	}
	if _, err := io.ReadFull(r, buf); err != nil {
		return Header{}, nil, nil, buf, cut(err)
	}
	if buf[0] != Version {
		return Header{}, nil, nil, buf, fmt.Errorf("%w: version %d, want %d", ErrFrame, buf[0], Version)
	}
	h = Header{Op: Op(buf[1]), Flags: binary.BigEndian.Uint16(buf[2:]), ReqID: binary.BigEndian.Uint64(buf[4:])}
	if first < size {
		tail = alloc(size - first)
		if _, err := io.ReadFull(r, tail); err != nil {
			return Header{}, nil, nil, buf, cut(err)
		}
	}
	return h, buf[HeaderSize:], tail, buf, nil
}

// Request and response body helpers. Decoders return ErrMalformed on bad
// lengths.

// Ledger is a request body holding a ledger id (ReadLAC, Delete).
func Ledger(ledger int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(ledger)) }

// LedgerEntry is a request body for Read, or the response body of Add.
func LedgerEntry(ledger, entryID int64) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(ledger))
	return binary.BigEndian.AppendUint64(b, uint64(entryID))
}

// WaitLAC is a WaitLAC request body.
func WaitLAC(ledger, after int64, timeoutMillis uint32) []byte {
	b := LedgerEntry(ledger, after)
	return binary.BigEndian.AppendUint32(b, timeoutMillis)
}

// Int64s is a body of big-endian int64s (ReadLAC and WaitLAC responses).
func Int64s(vs ...int64) []byte {
	b := make([]byte, 0, 8*len(vs))
	for _, v := range vs {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	return b
}

// ParseInt64s decodes exactly n int64s from b.
func ParseInt64s(b []byte, n int) ([]int64, error) {
	if len(b) != 8*n {
		return nil, fmt.Errorf("%w: %d bytes, want %d", ErrMalformed, len(b), 8*n)
	}
	vs := make([]int64, n)
	for i := range vs {
		vs[i] = int64(binary.BigEndian.Uint64(b[8*i:]))
	}
	return vs, nil
}

// ParseWaitLAC decodes a WaitLAC request body.
func ParseWaitLAC(b []byte) (ledger, after int64, timeoutMillis uint32, err error) {
	if len(b) != 20 {
		return 0, 0, 0, fmt.Errorf("%w: wait-lac body of %d bytes, want 20", ErrMalformed, len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), int64(binary.BigEndian.Uint64(b[8:])), binary.BigEndian.Uint32(b[16:]), nil
}

// Status body: the status of a response, then its payload.

// StatusBody prefixes payload with status s.
func StatusBody(s Status) []byte { return binary.BigEndian.AppendUint16(nil, uint16(s)) }

// ParseStatus splits a response body into its status and payload.
func ParseStatus(b []byte) (Status, []byte, error) {
	if len(b) < 2 {
		return 0, nil, fmt.Errorf("%w: response body of %d bytes", ErrMalformed, len(b))
	}
	return Status(binary.BigEndian.Uint16(b)), b[2:], nil
}

// ReadRange is a ReadRange request body.
func ReadRange(ledger, first, last int64, maxBytes uint32) []byte {
	b := LedgerEntry(ledger, first)
	b = binary.BigEndian.AppendUint64(b, uint64(last))
	return binary.BigEndian.AppendUint32(b, maxBytes)
}

// ParseReadRange decodes a ReadRange request body.
func ParseReadRange(b []byte) (ledger, first, last int64, maxBytes uint32, err error) {
	if len(b) != 28 {
		return 0, 0, 0, 0, fmt.Errorf("%w: read-range body of %d bytes, want 28", ErrMalformed, len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), int64(binary.BigEndian.Uint64(b[8:])),
		int64(binary.BigEndian.Uint64(b[16:])), binary.BigEndian.Uint32(b[24:]), nil
}

// AppendEntries appends a ReadRange response payload (after the status).
func AppendEntries(dst []byte, entries [][]byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(entries)))
	for _, e := range entries {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(e)))
		dst = append(dst, e...)
	}
	return dst
}

// ParseEntries splits a ReadRange response payload into entries
// (sub-slices of b).
func ParseEntries(b []byte) ([][]byte, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: entries payload of %d bytes", ErrMalformed, len(b))
	}
	n := binary.BigEndian.Uint32(b)
	b = b[4:]
	if uint64(n)*4 > uint64(len(b)) {
		return nil, fmt.Errorf("%w: %d entries in %d bytes", ErrMalformed, n, len(b))
	}
	entries := make([][]byte, 0, n)
	for range n {
		if len(b) < 4 {
			return nil, fmt.Errorf("%w: entries payload cut short", ErrMalformed)
		}
		l := binary.BigEndian.Uint32(b)
		if uint64(l) > uint64(len(b)-4) {
			return nil, fmt.Errorf("%w: entry of %d bytes in %d", ErrMalformed, l, len(b)-4)
		}
		entries = append(entries, b[4:4+l])
		b = b[4+l:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the entries", ErrMalformed, len(b))
	}
	return entries, nil
}
