package frame

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/msgpb"
)

// FuzzReadFrame checks that ReadFrame never panics, and that every frame it
// accepts re-encodes (AppendCommand, AppendMessage) into a frame that reads
// back equal.
func FuzzReadFrame(f *testing.F) {
	stored, err := AppendHeadersAndPayload(nil, metadata(1), []byte("fuzz payload"))
	if err != nil {
		f.Fatal(err)
	}
	bem, err := proto.Marshal(&msgpb.BrokerEntryMetadata{BrokerTimestamp: proto.Uint64(1), Index: proto.Uint64(2)})
	if err != nil {
		f.Fatal(err)
	}
	seed := func(b []byte, err error) []byte {
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	connect := seed(AppendCommand(nil, connectCmd()))
	send := seed(AppendPayloadCommand(nil, sendCmd(1, 1), metadata(1), []byte("hello")))
	message := seed(AppendMessage(nil, messageCmd(1, 2, 3), bem, stored))
	ping := seed(AppendCommand(nil, pingCmd()))

	f.Add(connect)
	f.Add(send)
	f.Add(message)
	f.Add(ping)
	f.Add(append(append(bytes.Clone(connect), send...), ping...))
	f.Add(seed(AppendMessage(nil, sendCmd(1, 2), nil, stored[6:]))) // no checksum
	corrupt := bytes.Clone(send)
	corrupt[len(corrupt)-1] ^= 0xff
	f.Add(corrupt)                                    // checksum mismatch
	f.Add(message[:len(message)-3])                   // truncated
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}) // too large
	f.Add([]byte{0, 0, 0, 6, 0, 0, 0, 9, 8, 18})      // command size over frame size
	f.Add([]byte{0, 0, 0, 6, 0, 0, 0, 2, 8, 99})      // unknown type
	f.Add([]byte{0, 0, 0, 10, 0, 0, 0, 2, 8, 18, 0x0e, 0x02, 0, 9})

	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data), 1<<16)
		for {
			fr, err := r.ReadFrame()
			if err != nil {
				if err != io.EOF && !errors.Is(err, io.ErrUnexpectedEOF) &&
					!errors.Is(err, ErrMalformed) && !errors.Is(err, ErrFrameTooLarge) {
					t.Fatalf("unexpected error class: %v", err)
				}
				return
			}
			checkFrame(t, fr)
		}
	})
}

func checkFrame(t *testing.T, fr *Frame) {
	// These must not panic, whatever the frame holds.
	ok := fr.ChecksumOK()
	fr.HasChecksum()
	md, payload, mdErr := fr.Metadata()

	var enc []byte
	var err error
	if fr.BrokerEntryMetadata == nil && fr.HeadersAndPayload == nil {
		enc, err = AppendCommand(nil, fr.Cmd)
	} else {
		enc, err = AppendMessage(nil, fr.Cmd, fr.BrokerEntryMetadata, fr.HeadersAndPayload)
	}
	if err != nil {
		t.Fatalf("accepted frame does not re-encode: %v\n%v", err, fr.Cmd)
	}
	back := readOne(t, enc)
	if !proto.Equal(back.Cmd, fr.Cmd) {
		t.Fatalf("command changed in a round trip:\n%v\n%v", fr.Cmd, back.Cmd)
	}
	if (back.BrokerEntryMetadata == nil) != (fr.BrokerEntryMetadata == nil) ||
		!bytes.Equal(back.BrokerEntryMetadata, fr.BrokerEntryMetadata) {
		t.Fatalf("broker entry metadata changed: %q -> %q", fr.BrokerEntryMetadata, back.BrokerEntryMetadata)
	}
	if !bytes.Equal(back.HeadersAndPayload, fr.HeadersAndPayload) || back.ChecksumOK() != ok {
		t.Fatalf("headers and payload changed: %q -> %q", fr.HeadersAndPayload, back.HeadersAndPayload)
	}

	// A message whose metadata parses re-encodes with a checksum that holds.
	if mdErr == nil {
		enc, err := AppendPayloadCommand(nil, fr.Cmd, md, payload)
		if err != nil {
			t.Fatalf("parsed metadata does not re-encode: %v", err)
		}
		back := readOne(t, enc)
		md2, payload2, err := back.Metadata()
		if err != nil || !back.HasChecksum() || !back.ChecksumOK() ||
			!proto.Equal(md2, md) || !bytes.Equal(payload2, payload) {
			t.Fatalf("payload round trip: %v checksum %v %v", err, back.HasChecksum(), back.ChecksumOK())
		}
	}
}

func readOne(t *testing.T, b []byte) *Frame {
	t.Helper()
	r := NewReader(bytes.NewReader(b), len(b))
	fr, err := r.ReadFrame()
	if err != nil {
		t.Fatalf("re-encoded frame does not read back: %v\n% x", err, b)
	}
	if _, err := r.ReadFrame(); err != io.EOF {
		t.Fatalf("re-encoded frame followed by %v", err)
	}
	return fr
}
