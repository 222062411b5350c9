package frame

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/protocol/pulsar/pulsarpb"
)

const (
	// readBufferSize is the Reader's buffer; larger reads bypass it.
	readBufferSize = 16 << 10
	// eagerAlloc is the largest message part allocated before its bytes
	// arrive. Beyond it the buffer grows as data comes in, so a peer cannot
	// make the reader hold memory it has not sent.
	eagerAlloc = 1 << 20
	// maxReusedCommand is the largest command read into the Reader's reused
	// buffer; rare larger ones (big schemas) get a buffer of their own, so
	// one does not pin its size for the life of the connection.
	maxReusedCommand = 64 << 10
)

// Reader reads frames from a byte stream. It is not safe for concurrent use.
//
// Every error is final: the stream is no longer at a frame boundary, and the
// Reader returns the same error from then on. The caller closes the
// connection.
type Reader struct {
	br       *bufio.Reader
	maxFrame int
	err      error
	off      int64 // stream offset of the next frame
	hdr      [2 * sizeLen]byte
	cmdBuf   []byte      // reused for the bytes of commands up to maxReusedCommand
	send     sendCommand // reused for plain SEND commands
	room     int         // free bytes in front of each message buffer (SetRoom)
}

// NewReader returns a Reader of r that refuses frames whose totalSize exceeds
// maxFrameSize (DefaultMaxFrameSize when maxFrameSize <= 0). A broker with
// max message size M reads with M + FramePadding. The Reader buffers r,
// unless r is already a *bufio.Reader of at least 16 KiB, which it then uses.
func NewReader(r io.Reader, maxFrameSize int) *Reader {
	if maxFrameSize <= 0 {
		maxFrameSize = DefaultMaxFrameSize
	}
	return &Reader{br: bufio.NewReaderSize(r, readBufferSize), maxFrame: maxFrameSize}
}

// SetRoom makes the Reader leave n free bytes in front of the buffer of
// what follows each command, for the caller to write headers of its own
// there instead of copying the message (Frame.WithRoom).
func (r *Reader) SetRoom(n int) { r.room = max(n, 0) }

// ReadFrame reads the next frame. It returns io.EOF when the stream ends at a
// frame boundary, io.ErrUnexpectedEOF (wrapped) when it ends inside a frame,
// ErrFrameTooLarge or ErrMalformed (wrapped) for a bad frame, or the wrapped
// error of the underlying reader. A checksum mismatch is not an error (see
// Frame.ChecksumOK).
//
// Errors of the ErrMalformed and ErrFrameTooLarge classes say at which
// stream offset the bad frame starts.
//
// The returned Frame belongs to the caller, except the command of a plain
// SEND: the Reader decodes it into memory of its own (a BaseCommand is
// some 600 bytes, and one came with every message), valid until the next
// ReadFrame. Besides the Frame and other decoded commands, a frame costs
// one allocation: the buffer that holds what follows the command, which
// BrokerEntryMetadata and HeadersAndPayload share. (A command over 64 KiB,
// such as a large schema, also gets its own buffer.)
func (r *Reader) ReadFrame() (*Frame, error) {
	if r.err != nil {
		return nil, r.err
	}
	f, n, err := r.readFrame()
	if err != nil {
		if errors.Is(err, ErrMalformed) || errors.Is(err, ErrFrameTooLarge) {
			err = fmt.Errorf("%w (frame at stream offset %d)", err, r.off)
		}
		r.err = err
		return nil, err
	}
	r.off += n
	return f, nil
}

func (r *Reader) readFrame() (*Frame, int64, error) {
	if _, err := io.ReadFull(r.br, r.hdr[:sizeLen]); err != nil {
		if err == io.EOF {
			return nil, 0, io.EOF
		}
		return nil, 0, fmt.Errorf("frame: reading frame size: %w", err)
	}
	total := binary.BigEndian.Uint32(r.hdr[:])
	if uint64(total) > uint64(r.maxFrame) {
		return nil, 0, fmt.Errorf("%w: frame size %d exceeds the maximum %d", ErrFrameTooLarge, total, r.maxFrame)
	}
	if total < sizeLen {
		return nil, 0, fmt.Errorf("%w: frame size %d leaves no room for the command size", ErrMalformed, total)
	}
	if err := r.readFull(r.hdr[sizeLen:]); err != nil {
		return nil, 0, fmt.Errorf("frame: reading command size: %w", err)
	}
	cmdSize := binary.BigEndian.Uint32(r.hdr[sizeLen:])
	if cmdSize > total-sizeLen {
		return nil, 0, fmt.Errorf("%w: command size %d exceeds frame size %d - 4", ErrMalformed, cmdSize, total)
	}

	var cmdBytes []byte
	var err error
	if cmdSize <= maxReusedCommand {
		if cap(r.cmdBuf) < int(cmdSize) {
			r.cmdBuf = make([]byte, max(cmdSize, 512))
		}
		cmdBytes = r.cmdBuf[:cmdSize]
		err = r.readFull(cmdBytes)
	} else {
		cmdBytes, err = r.readMessage(int(cmdSize), 0)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("frame: reading %d-byte command: %w", cmdSize, err)
	}
	cmd, err := decodeCommand(cmdBytes, &r.send)
	if err != nil {
		return nil, 0, err
	}
	f := &Frame{Cmd: cmd}
	frameLen := int64(sizeLen) + int64(total)

	rest := int(total - sizeLen - cmdSize)
	if rest == 0 {
		return f, frameLen, nil
	}
	framed, err := r.readMessage(rest, r.room)
	if err != nil {
		return nil, 0, fmt.Errorf("frame: reading %d bytes after the %v command: %w", rest, cmd.GetType(), err)
	}
	b := framed[r.room:]
	if len(b) >= magicLen && binary.BigEndian.Uint16(b) == MagicBrokerEntryMetadata {
		if len(b) < magicLen+sizeLen {
			return nil, 0, fmt.Errorf("%w: broker entry metadata size cut off (%d bytes after the command)", ErrMalformed, len(b))
		}
		n := binary.BigEndian.Uint32(b[magicLen:])
		b = b[magicLen+sizeLen:]
		if uint64(n) > uint64(len(b)) {
			return nil, 0, fmt.Errorf("%w: broker entry metadata size %d exceeds the %d bytes that follow it", ErrMalformed, n, len(b))
		}
		f.BrokerEntryMetadata = b[:n:n]
		b = b[n:]
	}
	if len(b) > 0 {
		f.HeadersAndPayload = b
		if len(framed)-len(b) == r.room {
			f.framed = framed
		}
	}
	return f, frameLen, nil
}

// decodeCommand decodes and checks a command: a plain SEND on the fast
// path (fast.go) into send, anything else generically.
func decodeCommand(b []byte, send *sendCommand) (*pulsarpb.BaseCommand, error) {
	if cmd, ok := decodeSend(b, send); ok {
		return cmd, nil
	}
	return decodeGeneric(b)
}

// decodeGeneric decodes and checks a command with generic protobuf.
func decodeGeneric(b []byte) (*pulsarpb.BaseCommand, error) {
	cmd := new(pulsarpb.BaseCommand)
	if err := proto.Unmarshal(b, cmd); err != nil {
		return nil, fmt.Errorf("%w: command (%d bytes): %v", ErrMalformed, len(b), err)
	}
	if err := checkCommand(cmd); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return cmd, nil
}

// readMessage reads the n bytes that follow the command into a new buffer,
// after room free bytes: the buffer is room+n bytes long.
func (r *Reader) readMessage(n, room int) ([]byte, error) {
	if n <= eagerAlloc {
		b := make([]byte, room+n)
		return b, r.readFull(b[room:])
	}
	b := make([]byte, room, room+eagerAlloc)
	for len(b) < room+n {
		if len(b) == cap(b) {
			nb := make([]byte, len(b), min(2*cap(b), room+n))
			copy(nb, b)
			b = nb
		}
		m, err := r.br.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err != nil && len(b) < room+n {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return b, nil
}

// readFull reads len(p) bytes inside a frame, where the end of the stream is
// io.ErrUnexpectedEOF.
func (r *Reader) readFull(p []byte) error {
	_, err := io.ReadFull(r.br, p)
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
