package frame

import (
	"bytes"
	"encoding/binary"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/msgpb"
	"github.com/magnetar-io/magnetar/protocol/pulsar/pulsarpb"
)

func TestDecodeSendAgreesWithProtobuf(t *testing.T) {
	var reused sendCommand
	full := &pulsarpb.CommandSend{ProducerId: proto.Uint64(7), SequenceId: proto.Uint64(1 << 40),
		NumMessages: proto.Int32(-3), TxnidLeastBits: proto.Uint64(0), TxnidMostBits: proto.Uint64(9),
		HighestSequenceId: proto.Uint64(1<<40 + 5), IsChunk: proto.Bool(false), Marker: proto.Bool(true)}
	withID := proto.Clone(full).(*pulsarpb.CommandSend)
	withID.MessageId = &pulsarpb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(2)}
	marshal := func(cmd *pulsarpb.BaseCommand) []byte {
		b, err := proto.MarshalOptions{AllowPartial: true}.Marshal(cmd)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	send := func(s *pulsarpb.CommandSend) []byte {
		return marshal(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND.Enum(), Send: s})
	}
	plain := send(full)
	// A field the fast path does not know, inside the SEND.
	sendBytes, err := proto.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	withUnknown := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 6)
	withUnknown = protowire.AppendTag(withUnknown, 6, protowire.BytesType)
	withUnknown = protowire.AppendBytes(withUnknown, protowire.AppendVarint(protowire.AppendTag(sendBytes, 99, protowire.VarintType), 1))

	for _, tc := range []struct {
		name string
		b    []byte
		fast bool // the fast path takes it
	}{
		{"every plain field", plain, true},
		{"required fields only", send(&pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(0)}), true},
		{"send before type", append(plain[2:len(plain):len(plain)], plain[:2]...), true},
		{"with message id", send(withID), false},
		{"sequence id missing", send(&pulsarpb.CommandSend{ProducerId: proto.Uint64(1)}), false},
		{"unknown field", withUnknown, false},
		{"a PING", marshal(pingCmd()), false},
		{"type twice", append(append([]byte(nil), plain...), plain[:2]...), false},
		{"truncated", plain[:len(plain)-1], false},
	} {
		// One sendCommand for every case, as a Reader reuses its own: a
		// field of an earlier SEND must not show in a later one.
		_, ok := decodeSend(tc.b, &reused)
		if ok != tc.fast {
			t.Errorf("%s: fast path %v, want %v", tc.name, ok, tc.fast)
		}
		got, gotErr := decodeCommand(tc.b, &reused)
		want, wantErr := decodeGeneric(tc.b)
		if (gotErr != nil) != (wantErr != nil) || gotErr == nil && !proto.Equal(got, want) {
			t.Errorf("%s: decoded %v (%v), protobuf %v (%v)", tc.name, got, gotErr, want, wantErr)
		}
	}
}

func TestAppendSendReceiptMatchesAppendCommand(t *testing.T) {
	for _, r := range []Receipt{
		{ProducerID: 1, SequenceID: 2, Ledger: 3, Entry: 4, Partition: -1},
		{ProducerID: 1 << 50, SequenceID: 1<<64 - 1, HighestSequenceID: 1<<64 - 1, HasHighest: true, Ledger: 1 << 33, Entry: 0, Partition: 0},
		{ProducerID: 0, SequenceID: 0, HasHighest: true, Ledger: 0, Entry: 1 << 20, Partition: 1 << 30},
	} {
		rc := &pulsarpb.CommandSendReceipt{ProducerId: proto.Uint64(r.ProducerID), SequenceId: proto.Uint64(r.SequenceID),
			MessageId: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(r.Ledger), EntryId: proto.Uint64(r.Entry)}}
		if r.HasHighest {
			rc.HighestSequenceId = proto.Uint64(r.HighestSequenceID)
		}
		if r.Partition >= 0 {
			rc.MessageId.Partition = proto.Int32(r.Partition)
		}
		want, err := AppendCommand([]byte("prefix"), &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: rc})
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendSendReceipt([]byte("prefix"), r); !bytes.Equal(got, want) {
			t.Errorf("receipt %+v:\n got %x\nwant %x", r, got, want)
		}
	}
}

// headersAndPayload stores md (encoded with AllowPartial, so required
// fields may be missing) the way a SEND carries it.
func headersAndPayload(t testing.TB, md []byte, checksum bool) []byte {
	var b []byte
	if checksum {
		b = append(b, 0x0e, 0x01, 0, 0, 0, 0)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(md)))
	b = append(b, md...)
	return append(b, "payload"...)
}

func TestMessagesInBatchAgreesWithParse(t *testing.T) {
	enc := func(md *msgpb.MessageMetadata) []byte {
		b, err := proto.MarshalOptions{AllowPartial: true}.Marshal(md)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	base := metadata(5)
	batched := proto.Clone(base).(*msgpb.MessageMetadata)
	batched.NumMessagesInBatch = proto.Int32(40)
	withProps := proto.Clone(batched).(*msgpb.MessageMetadata)
	withProps.Properties = []*msgpb.KeyValue{{Key: proto.String("k"), Value: proto.String("v")}}
	badProps := proto.Clone(batched).(*msgpb.MessageMetadata)
	badProps.Properties = []*msgpb.KeyValue{{Key: proto.String("k")}} // value is required
	noProducer := proto.Clone(batched).(*msgpb.MessageMetadata)
	noProducer.ProducerName = nil
	twice := append(enc(batched), protowire.AppendVarint(protowire.AppendTag(nil, 11, protowire.VarintType), 7)...)
	wrongType := append(enc(base), protowire.AppendBytes(protowire.AppendTag(nil, 11, protowire.BytesType), []byte{1})...)
	badPacked := append(enc(base), protowire.AppendBytes(protowire.AppendTag(nil, 31, protowire.BytesType), []byte{0x80})...)

	for _, tc := range []struct {
		name string
		md   []byte
	}{
		{"not batched", enc(base)},
		{"batched", enc(batched)},
		{"with properties", enc(withProps)},
		{"property without value", enc(badProps)},
		{"no producer name", enc(noProducer)},
		{"count twice: the last wins", twice},
		{"count with the wrong wire type", wrongType},
		{"bad packed indexes", badPacked},
		{"cut in a field", enc(batched)[:5]},
	} {
		for _, checksum := range []bool{true, false} {
			b := headersAndPayload(t, tc.md, checksum)
			n, set, err := MessagesInBatch(b)
			md, _, wantErr := ParseHeadersAndPayload(b)
			if (err != nil) != (wantErr != nil) {
				t.Errorf("%s: error %v, parse's %v", tc.name, err, wantErr)
				continue
			}
			if err == nil && (n != md.GetNumMessagesInBatch() || set != (md.NumMessagesInBatch != nil)) {
				t.Errorf("%s: %d (set %v), parse has %d (set %v)", tc.name, n, set, md.GetNumMessagesInBatch(), md.NumMessagesInBatch != nil)
			}
		}
	}
	for _, b := range [][]byte{{0x0e, 0x01, 0}, {0, 0}, {0, 0, 0, 9, 1}} {
		if _, _, err := MessagesInBatch(b); err == nil {
			t.Errorf("MessagesInBatch(%x) accepted a broken block", b)
		}
	}
}

// FuzzFastPaths checks that the fast paths agree with generic protobuf
// on any bytes: a SEND the fast decoder takes decodes equal generically,
// and MessagesInBatch answers what the full parse answers.
func FuzzFastPaths(f *testing.F) {
	send, err := proto.Marshal(sendCmd(3, 4))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(send)
	md, err := proto.Marshal(metadata(9))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(headersAndPayload(f, md, true))
	f.Add(headersAndPayload(f, md, false))
	f.Fuzz(func(t *testing.T, b []byte) {
		var c sendCommand
		if cmd, ok := decodeSend(b, &c); ok {
			want, err := decodeGeneric(b)
			if err != nil || !proto.Equal(cmd, want) {
				t.Fatalf("fast SEND %v, protobuf %v (%v)", cmd, want, err)
			}
		}
		n, set, err := MessagesInBatch(b)
		md, _, wantErr := ParseHeadersAndPayload(b)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("MessagesInBatch error %v, parse's %v", err, wantErr)
		}
		if err == nil && (n != md.GetNumMessagesInBatch() || set != (md.NumMessagesInBatch != nil)) {
			t.Fatalf("MessagesInBatch %d (set %v), parse %d (set %v)", n, set, md.GetNumMessagesInBatch(), md.NumMessagesInBatch != nil)
		}
	})
}
