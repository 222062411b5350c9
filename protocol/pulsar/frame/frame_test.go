package frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/msgpb"
	"github.com/magnetar-io/magnetar/protocol/pulsar/pulsarpb"
)

func typ(t pulsarpb.BaseCommand_Type) *pulsarpb.BaseCommand_Type { return &t }

func connectCmd() *pulsarpb.BaseCommand {
	return &pulsarpb.BaseCommand{
		Type: typ(pulsarpb.BaseCommand_CONNECT),
		Connect: &pulsarpb.CommandConnect{
			ClientVersion:   proto.String("Pulsar Go 0.x"),
			ProtocolVersion: proto.Int32(int32(pulsarpb.ProtocolVersion_v20)),
			AuthMethodName:  proto.String(""),
			FeatureFlags: &pulsarpb.FeatureFlags{
				SupportsAuthRefresh:         proto.Bool(true),
				SupportsBrokerEntryMetadata: proto.Bool(true),
			},
		},
	}
}

func pingCmd() *pulsarpb.BaseCommand {
	return &pulsarpb.BaseCommand{Type: typ(pulsarpb.BaseCommand_PING), Ping: &pulsarpb.CommandPing{}}
}

func sendCmd(producer, seq uint64) *pulsarpb.BaseCommand {
	return &pulsarpb.BaseCommand{
		Type: typ(pulsarpb.BaseCommand_SEND),
		Send: &pulsarpb.CommandSend{ProducerId: proto.Uint64(producer), SequenceId: proto.Uint64(seq)},
	}
}

func messageCmd(consumer, ledger, entry uint64) *pulsarpb.BaseCommand {
	return &pulsarpb.BaseCommand{
		Type: typ(pulsarpb.BaseCommand_MESSAGE),
		Message: &pulsarpb.CommandMessage{
			ConsumerId: proto.Uint64(consumer),
			MessageId:  &pulsarpb.MessageIdData{LedgerId: proto.Uint64(ledger), EntryId: proto.Uint64(entry)},
		},
	}
}

func metadata(seq uint64) *msgpb.MessageMetadata {
	return &msgpb.MessageMetadata{
		ProducerName: proto.String("standalone-0-1"),
		SequenceId:   proto.Uint64(seq),
		PublishTime:  proto.Uint64(1700000000000),
		Properties:   []*msgpb.KeyValue{{Key: proto.String("k"), Value: proto.String("v")}},
		PartitionKey: proto.String("key"),
	}
}

// must(t)(b, err) fails t on err and returns b.
func must(t testing.TB) func([]byte, error) []byte {
	return func(b []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

func readAll(t *testing.T, stream []byte) []*Frame {
	t.Helper()
	r := NewReader(bytes.NewReader(stream), 0)
	var frames []*Frame
	for {
		f, err := r.ReadFrame()
		if err == io.EOF {
			return frames
		}
		if err != nil {
			t.Fatalf("frame %d: %v", len(frames), err)
		}
		frames = append(frames, f)
	}
}

func TestSimpleCommandsRoundTrip(t *testing.T) {
	cmds := []*pulsarpb.BaseCommand{
		connectCmd(),
		pingCmd(),
		{Type: typ(pulsarpb.BaseCommand_PONG), Pong: &pulsarpb.CommandPong{}},
		{Type: typ(pulsarpb.BaseCommand_CONNECTED), Connected: &pulsarpb.CommandConnected{
			ServerVersion: proto.String("Magnetar"), ProtocolVersion: proto.Int32(20), MaxMessageSize: proto.Int32(DefaultMaxMessageSize),
		}},
		{Type: typ(pulsarpb.BaseCommand_SEND_RECEIPT), SendReceipt: &pulsarpb.CommandSendReceipt{
			ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(42),
			MessageId: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(7), EntryId: proto.Uint64(9)},
		}},
		{Type: typ(pulsarpb.BaseCommand_ERROR), Error: &pulsarpb.CommandError{
			RequestId: proto.Uint64(3), Error: pulsarpb.ServerError_TopicNotFound.Enum(), Message: proto.String("no such topic"),
		}},
		{Type: typ(pulsarpb.BaseCommand_NEW_TXN), NewTxn: &pulsarpb.CommandNewTxn{RequestId: proto.Uint64(5)}},
	}
	var stream []byte
	for _, c := range cmds {
		var err error
		stream, err = AppendCommand(stream, c)
		if err != nil {
			t.Fatalf("%v: %v", c.GetType(), err)
		}
	}
	frames := readAll(t, stream)
	if len(frames) != len(cmds) {
		t.Fatalf("read %d frames, want %d", len(frames), len(cmds))
	}
	for i, f := range frames {
		if !proto.Equal(f.Cmd, cmds[i]) {
			t.Errorf("frame %d: got %v, want %v", i, f.Cmd, cmds[i])
		}
		if f.HeadersAndPayload != nil || f.BrokerEntryMetadata != nil {
			t.Errorf("frame %d: simple command with message parts %q %q", i, f.BrokerEntryMetadata, f.HeadersAndPayload)
		}
		if !f.ChecksumOK() || f.HasChecksum() {
			t.Errorf("frame %d: ChecksumOK %v HasChecksum %v, want true, false", i, f.ChecksumOK(), f.HasChecksum())
		}
		if _, _, err := f.Metadata(); !errors.Is(err, ErrMalformed) {
			t.Errorf("frame %d: Metadata() error %v, want ErrMalformed", i, err)
		}
	}
}

func TestPayloadRoundTrip(t *testing.T) {
	for _, payload := range [][]byte{[]byte("hello, magnetar"), {}, bytes.Repeat([]byte{0xab}, 70000)} {
		md := metadata(11)
		stream := must(t)(AppendPayloadCommand(nil, sendCmd(1, 11), md, payload))
		frames := readAll(t, stream)
		if len(frames) != 1 {
			t.Fatalf("read %d frames", len(frames))
		}
		f := frames[0]
		if !proto.Equal(f.Cmd, sendCmd(1, 11)) {
			t.Errorf("command %v", f.Cmd)
		}
		if f.BrokerEntryMetadata != nil {
			t.Errorf("broker entry metadata %q in a SEND", f.BrokerEntryMetadata)
		}
		if !f.HasChecksum() || !f.ChecksumOK() {
			t.Errorf("HasChecksum %v ChecksumOK %v, want both true", f.HasChecksum(), f.ChecksumOK())
		}
		if crc, from, ok := f.Checksum(); !ok || crc != crc32.Checksum(f.HeadersAndPayload[from:], castagnoli) || from != 6 {
			t.Errorf("Checksum() = %08x, %d, %v: not the CRC-32C of what follows it", crc, from, ok)
		}
		gotMD, gotPayload, err := f.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(gotMD, md) || !bytes.Equal(gotPayload, payload) {
			t.Errorf("got %v %d bytes, want %v %d bytes", gotMD, len(gotPayload), md, len(payload))
		}
		// The stored block is exactly the frame's tail.
		if !bytes.HasSuffix(stream, f.HeadersAndPayload) || len(f.HeadersAndPayload) != len(stream)-4-4-proto.Size(f.Cmd) {
			t.Errorf("headers and payload are not the frame's tail")
		}
	}
}

func TestAppendMessageVerbatim(t *testing.T) {
	send := readAll(t, must(t)(AppendPayloadCommand(nil, sendCmd(1, 5), metadata(5), []byte("payload"))))[0]
	stored := send.HeadersAndPayload

	bem := &msgpb.BrokerEntryMetadata{BrokerTimestamp: proto.Uint64(1700000000123), Index: proto.Uint64(41)}
	bemBytes, err := proto.Marshal(bem)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		bem  []byte
	}{
		{"without broker entry metadata", nil},
		{"with broker entry metadata", bemBytes},
		{"with empty broker entry metadata", []byte{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst := []byte("prefix") // appended after existing content
			dst = must(t)(AppendMessage(dst, messageCmd(3, 7, 9), c.bem, stored))
			if string(dst[:6]) != "prefix" {
				t.Fatalf("existing content overwritten")
			}
			f := readAll(t, dst[6:])[0]
			if !proto.Equal(f.Cmd, messageCmd(3, 7, 9)) {
				t.Errorf("command %v", f.Cmd)
			}
			if (f.BrokerEntryMetadata == nil) != (c.bem == nil) || !bytes.Equal(f.BrokerEntryMetadata, c.bem) {
				t.Errorf("broker entry metadata %v, want %v", f.BrokerEntryMetadata, c.bem)
			}
			if c.bem != nil {
				var got msgpb.BrokerEntryMetadata
				if err := proto.Unmarshal(f.BrokerEntryMetadata, &got); err != nil {
					t.Fatal(err)
				}
				want := &msgpb.BrokerEntryMetadata{}
				if len(c.bem) > 0 {
					want = bem
				}
				if !proto.Equal(&got, want) {
					t.Errorf("broker entry metadata %v, want %v", &got, want)
				}
			}
			if !bytes.Equal(f.HeadersAndPayload, stored) || !f.ChecksumOK() {
				t.Errorf("headers and payload changed in dispatch")
			}
		})
	}
}

func TestChecksumMismatchIsNotAReadError(t *testing.T) {
	good := must(t)(AppendPayloadCommand(nil, sendCmd(1, 1), metadata(1), []byte("abcdef")))
	for _, where := range []string{"payload", "checksum", "metadata size"} {
		t.Run(where, func(t *testing.T) {
			bad := bytes.Clone(good)
			switch where {
			case "payload":
				bad[len(bad)-1] ^= 0x01
			case "checksum":
				cmdSize := int(binary.BigEndian.Uint32(bad[4:]))
				bad[8+cmdSize+2] ^= 0x80
			case "metadata size":
				// Corrupted so that the metadata no longer fits: still only a
				// checksum mismatch for the reader.
				cmdSize := int(binary.BigEndian.Uint32(bad[4:]))
				bad[8+cmdSize+6] = 0xff
			}
			// A good frame after the bad one is still read: the connection survives.
			stream := append(bad, must(t)(AppendCommand(nil, pingCmd()))...)
			frames := readAll(t, stream)
			if len(frames) != 2 {
				t.Fatalf("read %d frames, want 2", len(frames))
			}
			if !frames[0].HasChecksum() || frames[0].ChecksumOK() {
				t.Errorf("HasChecksum %v ChecksumOK %v, want true, false", frames[0].HasChecksum(), frames[0].ChecksumOK())
			}
			if frames[1].Cmd.GetType() != pulsarpb.BaseCommand_PING {
				t.Errorf("second frame %v", frames[1].Cmd.GetType())
			}
		})
	}
}

// A producer older than protocol v6 sends no magic and no checksum.
func TestPayloadWithoutChecksum(t *testing.T) {
	md := metadata(2)
	mdBytes, err := proto.Marshal(md)
	if err != nil {
		t.Fatal(err)
	}
	var hp []byte
	hp = binary.BigEndian.AppendUint32(hp, uint32(len(mdBytes)))
	hp = append(hp, mdBytes...)
	hp = append(hp, "old"...)
	stream := must(t)(AppendMessage(nil, sendCmd(1, 2), nil, hp))
	f := readAll(t, stream)[0]
	if f.HasChecksum() || !f.ChecksumOK() {
		t.Errorf("HasChecksum %v ChecksumOK %v, want false, true", f.HasChecksum(), f.ChecksumOK())
	}
	if _, _, ok := f.Checksum(); ok {
		t.Error("Checksum() of a message without one: ok")
	}
	gotMD, payload, err := f.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(gotMD, md) || string(payload) != "old" {
		t.Errorf("got %v %q", gotMD, payload)
	}
}

func TestFramesBelongToTheCaller(t *testing.T) {
	var stream []byte
	stream = must(t)(AppendPayloadCommand(stream, sendCmd(1, 1), metadata(1), []byte("first")))
	stream = must(t)(AppendPayloadCommand(stream, sendCmd(1, 2), metadata(2), []byte("second")))
	r := NewReader(bytes.NewReader(stream), 0)
	f1, err := r.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	keep := bytes.Clone(f1.HeadersAndPayload)
	if _, err := r.ReadFrame(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f1.HeadersAndPayload, keep) {
		t.Fatal("reading the next frame changed the previous frame's bytes")
	}
}

func TestFrameTooLarge(t *testing.T) {
	for _, max := range []int{0, 100} {
		limit := max
		if limit == 0 {
			limit = DefaultMaxFrameSize
		}
		hdr := binary.BigEndian.AppendUint32(nil, uint32(limit+1))
		hdr = append(hdr, make([]byte, 64)...)
		r := NewReader(bytes.NewReader(hdr), max)
		_, err := r.ReadFrame()
		if !errors.Is(err, ErrFrameTooLarge) || !strings.Contains(err.Error(), fmt.Sprint(limit+1)) {
			t.Errorf("max %d: error %v, want ErrFrameTooLarge with the size", max, err)
		}
		if _, err2 := r.ReadFrame(); !errors.Is(err2, ErrFrameTooLarge) {
			t.Errorf("max %d: error after a too large frame %v, want it again", max, err2)
		}
	}

	// A frame of exactly the maximum is accepted.
	f := must(t)(AppendPayloadCommand(nil, sendCmd(1, 1), metadata(1), make([]byte, 50)))
	total := int(binary.BigEndian.Uint32(f))
	if _, err := NewReader(bytes.NewReader(f), total).ReadFrame(); err != nil {
		t.Errorf("frame of exactly the maximum: %v", err)
	}
	if _, err := NewReader(bytes.NewReader(f), total-1).ReadFrame(); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("frame one byte over the maximum: %v", err)
	}
}

func TestTruncatedAtEveryByte(t *testing.T) {
	bem := []byte{0x08, 0x01, 0x10, 0x02}
	stored := readAll(t, must(t)(AppendPayloadCommand(nil, sendCmd(1, 1), metadata(1), []byte("xyz"))))[0].HeadersAndPayload
	frames := map[string][]byte{
		"ping":    must(t)(AppendCommand(nil, pingCmd())),
		"connect": must(t)(AppendCommand(nil, connectCmd())),
		"send":    must(t)(AppendPayloadCommand(nil, sendCmd(1, 1), metadata(1), []byte("xyz"))),
		"message": must(t)(AppendMessage(nil, messageCmd(1, 2, 3), bem, stored)),
	}
	for name, full := range frames {
		for n := 0; n < len(full); n++ {
			_, err := NewReader(bytes.NewReader(full[:n]), 0).ReadFrame()
			switch {
			case n == 0 && err != io.EOF:
				t.Errorf("%s cut at 0: %v, want io.EOF", name, err)
			case n > 0 && !errors.Is(err, io.ErrUnexpectedEOF):
				t.Errorf("%s cut at %d of %d: %v, want io.ErrUnexpectedEOF", name, n, len(full), err)
			}
		}
		if _, err := NewReader(bytes.NewReader(full), 0).ReadFrame(); err != nil {
			t.Errorf("%s whole: %v", name, err)
		}
	}
}

func TestMalformed(t *testing.T) {
	frame := func(cmd []byte, rest []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(4+len(cmd)+len(rest)))
		b = binary.BigEndian.AppendUint32(b, uint32(len(cmd)))
		b = append(b, cmd...)
		return append(b, rest...)
	}
	partial := func(m *pulsarpb.BaseCommand) []byte {
		b, err := proto.MarshalOptions{AllowPartial: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ping := partial(pingCmd())
	cases := []struct {
		name  string
		input []byte
	}{
		{"frame size 0", []byte{0, 0, 0, 0}},
		{"frame size 3", []byte{0, 0, 0, 3, 0, 0, 0}},
		{"command size over frame size", []byte{0, 0, 0, 6, 0, 0, 0, 3, 1, 2}},
		{"command size max uint32", []byte{0, 0, 0, 6, 0xff, 0xff, 0xff, 0xff, 1, 2}},
		{"empty command", frame(nil, nil)},
		{"garbage command", frame([]byte{0xff, 0xff, 0xff}, nil)},
		{"truncated varint", frame([]byte{0x08}, nil)},
		{"missing required field", frame(partial(&pulsarpb.BaseCommand{
			Type: typ(pulsarpb.BaseCommand_CONNECT), Connect: &pulsarpb.CommandConnect{},
		}), nil)},
		{"missing nested required field", frame(partial(&pulsarpb.BaseCommand{
			Type: typ(pulsarpb.BaseCommand_MESSAGE),
			Message: &pulsarpb.CommandMessage{
				ConsumerId: proto.Uint64(1), MessageId: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(1)},
			},
		}), nil)},
		{"type without its command", frame(partial(&pulsarpb.BaseCommand{Type: typ(pulsarpb.BaseCommand_SEND)}), nil)},
		{"type with another command", frame(partial(&pulsarpb.BaseCommand{
			Type: typ(pulsarpb.BaseCommand_PONG), Ping: &pulsarpb.CommandPing{},
		}), nil)},
		{"unknown type", frame([]byte{0x08, 99}, nil)},
		{"broker entry metadata size cut off", frame(ping, []byte{0x0e, 0x02, 0, 0})},
		{"broker entry metadata size too large", frame(ping, []byte{0x0e, 0x02, 0, 0, 0, 5, 1, 2, 3})},
	}
	for _, c := range cases {
		_, err := NewReader(bytes.NewReader(c.input), 0).ReadFrame()
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", c.name, err)
		}
	}
}

func TestParseHeadersAndPayloadErrors(t *testing.T) {
	good := readAll(t, must(t)(AppendPayloadCommand(nil, sendCmd(1, 1), metadata(1), []byte("p"))))[0].HeadersAndPayload
	tooBig := bytes.Clone(good)
	binary.BigEndian.PutUint32(tooBig[6:], uint32(len(good)))
	cases := map[string][]byte{
		"empty":                  {},
		"checksum cut off":       {0x0e, 0x01, 0, 0},
		"metadata size cut off":  {0x0e, 0x01, 0, 0, 0, 0, 0, 0},
		"metadata size too big":  tooBig,
		"garbage metadata":       {0, 0, 0, 2, 0xff, 0xff},
		"missing required field": {0, 0, 0, 0},
	}
	for name, b := range cases {
		if _, _, err := ParseHeadersAndPayload(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	md, payload, err := ParseHeadersAndPayload(good)
	if err != nil || md.GetSequenceId() != 1 || string(payload) != "p" {
		t.Errorf("good block: %v %q %v", md, payload, err)
	}
}

func TestAppendRejectsInvalidCommands(t *testing.T) {
	dst := []byte("keep")
	bad := []*pulsarpb.BaseCommand{
		nil,
		{},
		{Type: typ(pulsarpb.BaseCommand_SEND)},
		{Type: typ(pulsarpb.BaseCommand_SEND), Send: &pulsarpb.CommandSend{ProducerId: proto.Uint64(1)}},
	}
	for i, c := range bad {
		out, err := AppendCommand(dst, c)
		if err == nil || string(out) != "keep" {
			t.Errorf("command %d: %q, %v; want an error and dst unchanged", i, out, err)
		}
		out, err = AppendMessage(dst, c, nil, []byte("x"))
		if err == nil || string(out) != "keep" {
			t.Errorf("message %d: %q, %v; want an error and dst unchanged", i, out, err)
		}
	}
	out, err := AppendPayloadCommand(dst, sendCmd(1, 1), &msgpb.MessageMetadata{ProducerName: proto.String("p")}, nil)
	if err == nil || string(out) != "keep" {
		t.Errorf("metadata without required fields: %q, %v", out, err)
	}
	out, err = AppendPayloadCommand(dst, sendCmd(1, 1), nil, nil)
	if err == nil || string(out) != "keep" {
		t.Errorf("nil metadata: %q, %v", out, err)
	}
}

// crc32cBitwise is an independent, bit-at-a-time CRC-32C (reflected
// polynomial 0x82F63B78), to check the checksum without hash/crc32.
func crc32cBitwise(b []byte) uint32 {
	crc := ^uint32(0)
	for _, c := range b {
		crc ^= uint32(c)
		for range 8 {
			if crc&1 != 0 {
				crc = crc>>1 ^ 0x82f63b78
			} else {
				crc >>= 1
			}
		}
	}
	return ^crc
}

// The bytes of two small frames, worked out by hand from the layout (as
// pulsar-client-go's writeCommand and serializeMessage lay them out).
func TestKnownBytes(t *testing.T) {
	if got := crc32cBitwise([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("reference CRC-32C check value %#x, want 0xe3069283", got)
	}

	// PING: BaseCommand{type: PING(18), ping: {}}
	//   08 12       field 1 (type), varint 18
	//   92 01 00    field 18 (ping), length-delimited, 0 bytes
	wantPing := []byte{
		0, 0, 0, 9, // totalSize: 4 + 5
		0, 0, 0, 5, // commandSize
		0x08, 0x12, 0x92, 0x01, 0x00,
	}
	ping := must(t)(AppendCommand(nil, pingCmd()))
	if !bytes.Equal(ping, wantPing) {
		t.Errorf("PING\n got % x\nwant % x", ping, wantPing)
	}

	// SEND: BaseCommand{type: SEND(6), send: {producer_id: 1, sequence_id: 1}}
	//   08 06  32 04  08 01 10 01
	// MessageMetadata{producer_name: "p", sequence_id: 1, publish_time: 2}
	//   0a 01 70  10 01  18 02
	// payload "hi"
	checked := []byte{0, 0, 0, 7, 0x0a, 0x01, 0x70, 0x10, 0x01, 0x18, 0x02, 'h', 'i'}
	want := []byte{
		0, 0, 0, 31, // totalSize: 4 + 8 + 2 + 4 + 13
		0, 0, 0, 8, // commandSize
		0x08, 0x06, 0x32, 0x04, 0x08, 0x01, 0x10, 0x01,
		0x0e, 0x01, // magic
	}
	want = binary.BigEndian.AppendUint32(want, crc32cBitwise(checked))
	want = append(want, checked...)
	md := &msgpb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(2)}
	send := must(t)(AppendPayloadCommand(nil, sendCmd(1, 1), md, []byte("hi")))
	if !bytes.Equal(send, want) {
		t.Errorf("SEND\n got % x\nwant % x", send, want)
	}
	f := readAll(t, want)[0]
	if !f.ChecksumOK() {
		t.Errorf("hand-built SEND: checksum not OK")
	}
}

// Frames larger than the eager allocation grow as their bytes arrive.
func TestLargeFrameArrivingSlowly(t *testing.T) {
	payload := make([]byte, 3*eagerAlloc+12345)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	full := must(t)(AppendPayloadCommand(nil, sendCmd(1, 1), metadata(1), payload))
	f, err := NewReader(iotest.HalfReader(bytes.NewReader(full)), 0).ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	_, got, err := f.Metadata()
	if err != nil || !bytes.Equal(got, payload) || !f.ChecksumOK() {
		t.Fatalf("large payload: %v, equal %v, checksum %v", err, bytes.Equal(got, payload), f.ChecksumOK())
	}
	_, err = NewReader(bytes.NewReader(full[:len(full)-1]), 0).ReadFrame()
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("large frame cut short: %v", err)
	}
}

type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }

func TestReaderErrorsAreWrapped(t *testing.T) {
	boom := errors.New("connection reset")
	full := must(t)(AppendCommand(nil, connectCmd()))
	_, err := NewReader(io.MultiReader(bytes.NewReader(full[:6]), failingReader{boom}), 0).ReadFrame()
	if !errors.Is(err, boom) {
		t.Errorf("got %v, want it to wrap %v", err, boom)
	}
}

func TestErrorsSayWhere(t *testing.T) {
	ping := must(t)(AppendCommand(nil, pingCmd()))
	stream := append(bytes.Clone(ping), 0, 0, 0, 6, 0, 0, 0, 9, 8, 18)
	r := NewReader(bytes.NewReader(stream), 0)
	if _, err := r.ReadFrame(); err != nil {
		t.Fatal(err)
	}
	_, err := r.ReadFrame()
	want := fmt.Sprintf("stream offset %d", len(ping))
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want ErrMalformed mentioning %q", err, want)
	}
}

// SetRoom: the message buffer has the room in front of the headers and
// payload (small and large messages), unless broker entry metadata comes
// between; a frame cut short is still an error.
func TestReaderLeavesRoom(t *testing.T) {
	const room = 60
	big := make([]byte, 3*eagerAlloc+12345)
	for i := range big {
		big[i] = byte(i * 7)
	}
	for _, payload := range [][]byte{[]byte("small"), big} {
		full := must(t)(AppendPayloadCommand(nil, sendCmd(1, 1), metadata(1), payload))
		r := NewReader(iotest.HalfReader(bytes.NewReader(full)), 0)
		r.SetRoom(room)
		f, err := r.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		_, got, err := f.Metadata()
		if err != nil || !bytes.Equal(got, payload) || !f.ChecksumOK() {
			t.Fatalf("%d-byte payload read with room: %v, equal %v, checksum %v", len(payload), err, bytes.Equal(got, payload), f.ChecksumOK())
		}
		buf := f.WithRoom(room)
		if len(buf) != room+len(f.HeadersAndPayload) || &buf[room] != &f.HeadersAndPayload[0] {
			t.Fatalf("%d-byte payload: WithRoom gave %d bytes, not the headers and payload with %d in front", len(payload), len(buf), room)
		}
		if f.WithRoom(room-1) != nil {
			t.Fatal("WithRoom of less than the reader's room returned a buffer")
		}
		r = NewReader(bytes.NewReader(full[:len(full)-1]), 0)
		r.SetRoom(room)
		if _, err := r.ReadFrame(); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("%d-byte payload cut short, read with room: %v", len(payload), err)
		}
	}
	stored := readAll(t, must(t)(AppendPayloadCommand(nil, sendCmd(1, 5), metadata(5), []byte("payload"))))[0].HeadersAndPayload
	msg := must(t)(AppendMessage(nil, messageCmd(3, 7, 9), []byte{}, stored))
	r := NewReader(bytes.NewReader(msg), 0)
	r.SetRoom(room)
	f, err := r.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.HeadersAndPayload, stored) || f.WithRoom(room) != nil {
		t.Fatal("with broker entry metadata in front: WithRoom returned a buffer, or the message changed")
	}
}
