package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	var stream []byte
	stream = AppendFrame(stream, Header{Op: OpRead, Flags: FlagFence, ReqID: 7}, LedgerEntry(3, 4))
	stream = AppendFrame(stream, Header{Op: OpWaitLAC, ReqID: 1 << 60}, WaitLAC(5, -1, 1000))
	stream = AppendFrame(stream, Header{Op: OpReadLAC, ReqID: 9}, StatusBody(StatusOK), Int64s(10, 12))
	r := bytes.NewReader(stream)
	var buf []byte

	h, body, buf, err := ReadFrame(r, buf)
	if err != nil || h != (Header{Op: OpRead, Flags: FlagFence, ReqID: 7}) {
		t.Fatalf("frame 1: %+v %v", h, err)
	}
	if vs, err := ParseInt64s(body, 2); err != nil || vs[0] != 3 || vs[1] != 4 {
		t.Fatalf("read body: %v %v", vs, err)
	}
	h, body, buf, err = ReadFrame(r, buf)
	if err != nil || h.ReqID != 1<<60 {
		t.Fatalf("frame 2: %+v %v", h, err)
	}
	if l, a, ms, err := ParseWaitLAC(body); err != nil || l != 5 || a != -1 || ms != 1000 {
		t.Fatalf("wait-lac body: %d %d %d %v", l, a, ms, err)
	}
	_, body, _, err = ReadFrame(r, buf)
	st, rest, perr := ParseStatus(body)
	if err != nil || perr != nil || st != StatusOK {
		t.Fatalf("frame 3: %v %v %v", err, perr, st)
	}
	if vs, err := ParseInt64s(rest, 2); err != nil || vs[0] != 10 || vs[1] != 12 {
		t.Fatalf("lac body: %v %v", vs, err)
	}
	if _, _, _, err := ReadFrame(r, buf); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
}

func TestBadFrames(t *testing.T) {
	good := AppendFrame(nil, Header{Op: OpDelete, ReqID: 1}, Ledger(1))
	oversized := binary.BigEndian.AppendUint32(nil, MaxFrameSize+1)
	undersized := binary.BigEndian.AppendUint32(nil, HeaderSize-1)
	badVersion := bytes.Clone(good)
	badVersion[4] = 9
	for name, b := range map[string][]byte{
		"oversized":   oversized,
		"undersized":  undersized,
		"bad version": badVersion,
		"cut short":   good[:len(good)-1],
	} {
		if _, _, _, err := ReadFrame(bytes.NewReader(b), nil); !errors.Is(err, ErrFrame) {
			t.Errorf("%s: %v, want ErrFrame", name, err)
		}
	}
}

func TestStatusErrors(t *testing.T) {
	for s := StatusNoLedger; s <= StatusInternal; s++ {
		err := s.Err()
		if err == nil || StatusOf(err) != s {
			t.Errorf("status %d: err %v maps back to %d", s, err, StatusOf(err))
		}
	}
	if StatusOK.Err() != nil || StatusOf(nil) != StatusOK {
		t.Error("StatusOK is not nil")
	}
	if StatusOf(io.ErrUnexpectedEOF) != StatusInternal {
		t.Error("an unknown error is not StatusInternal")
	}
	if !errors.Is(Status(999).Err(), ErrInternal) {
		t.Error("an unknown status is not ErrInternal")
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(AppendFrame(nil, Header{Op: OpAdd, ReqID: 1}, []byte("x")))
	f.Add([]byte{0, 0, 0, 1, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, body, _, err := ReadFrame(bytes.NewReader(b), nil)
		if err == nil && !bytes.HasPrefix(b, AppendFrame(nil, h, body)) {
			t.Fatalf("frame does not re-encode to its bytes")
		}
		// Split after 2 bytes of any body over 16 bytes: the same frame.
		sh, head, tail, _, serr := ReadFrameSplit(bytes.NewReader(b), nil, HeaderSize+16, 2, func(n int) []byte { return make([]byte, n) })
		if (serr == nil) != (err == nil) || err == nil && (sh != h || !bytes.Equal(append(head[:len(head):len(head)], tail...), body)) {
			t.Fatalf("split read: %+v %q+%q, %v; whole read: %+v %q, %v", sh, head, tail, serr, h, body, err)
		}
	})
}

func TestEntriesRoundTrip(t *testing.T) {
	in := [][]byte{[]byte("a"), {}, []byte("ccc")}
	out, err := ParseEntries(AppendEntries(nil, in))
	if err != nil || len(out) != 3 || string(out[0]) != "a" || len(out[1]) != 0 || string(out[2]) != "ccc" {
		t.Fatalf("ParseEntries = %q, %v", out, err)
	}
	for _, bad := range [][]byte{nil, {0, 0, 0, 9}, {0, 0, 0, 1, 0, 0, 0, 5, 1}, append(AppendEntries(nil, in), 0)} {
		if _, err := ParseEntries(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseEntries(%v) = %v, want ErrMalformed", bad, err)
		}
	}
	l, f, last, mb, err := ParseReadRange(ReadRange(1, 2, 3, 4))
	if err != nil || l != 1 || f != 2 || last != 3 || mb != 4 {
		t.Fatalf("ParseReadRange = %d %d %d %d %v", l, f, last, mb, err)
	}
}

// A frame over the small size has its body after lead bytes read into a
// buffer of its own from alloc; smaller frames, and frames whose body is
// no longer than lead, come whole in head. Bad and cut frames fail as with
// ReadFrame.
func TestReadFrameSplit(t *testing.T) {
	const small, lead = 64, 2
	big := bytes.Repeat([]byte("0123456789"), 20)
	var stream []byte
	stream = AppendFrame(stream, Header{Op: OpRead, ReqID: 1}, StatusBody(StatusOK), big)
	stream = AppendFrame(stream, Header{Op: OpReadLAC, ReqID: 2}, StatusBody(StatusOK), Int64s(1, 2))
	r := bytes.NewReader(stream)
	var allocs []int
	alloc := func(n int) []byte { allocs = append(allocs, n); return make([]byte, n, n+7) }

	h, head, tail, buf, err := ReadFrameSplit(r, nil, small, lead, alloc)
	if err != nil || h.ReqID != 1 || !bytes.Equal(head, StatusBody(StatusOK)) || !bytes.Equal(tail, big) {
		t.Fatalf("large frame: %+v head %q tail %d bytes, %v", h, head, len(tail), err)
	}
	if len(allocs) != 1 || allocs[0] != len(big) || cap(tail) != len(big)+7 {
		t.Fatalf("large frame: allocs %v, tail capacity %d: want the tail in alloc's buffer", allocs, cap(tail))
	}
	if len(buf) > HeaderSize+lead {
		t.Errorf("large frame: %d bytes read into buf, want the head only", len(buf))
	}
	h, head, tail, _, err = ReadFrameSplit(r, buf, small, lead, alloc)
	if err != nil || h.ReqID != 2 || tail != nil || len(allocs) != 1 {
		t.Fatalf("small frame: %+v tail %v allocs %v, %v", h, tail, allocs, err)
	}
	if st, rest, err := ParseStatus(head); err != nil || st != StatusOK || !bytes.Equal(rest, Int64s(1, 2)) {
		t.Fatalf("small frame body: %v %x %v", st, rest, err)
	}
	if _, _, _, _, err := ReadFrameSplit(r, buf, small, lead, alloc); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}

	whole := AppendFrame(nil, Header{Op: OpRead, ReqID: 3}, StatusBody(StatusOK), big)
	bad := bytes.Clone(whole)
	bad[4] = 9
	for name, b := range map[string][]byte{"cut in the tail": whole[:len(whole)-1], "cut in the head": whole[:4+HeaderSize+1], "bad version": bad} {
		if _, _, _, _, err := ReadFrameSplit(bytes.NewReader(b), nil, small, lead, alloc); !errors.Is(err, ErrFrame) {
			t.Errorf("%s: %v, want ErrFrame", name, err)
		}
	}
}
