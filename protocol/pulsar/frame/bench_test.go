package frame

import (
	"bytes"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/msgpb"
)

const benchPayload = 1024

// BenchmarkReadFrame reads SEND frames with a 1 KiB payload, as a broker
// reads a producer's connection, and checks each checksum.
func BenchmarkReadFrame(b *testing.B) {
	const frames = 256
	var stream []byte
	for i := range frames {
		stream = must(b)(AppendPayloadCommand(stream, sendCmd(1, uint64(i)), metadata(uint64(i)), make([]byte, benchPayload)))
	}
	src := bytes.NewReader(stream)
	r := NewReader(src, 0)
	b.SetBytes(int64(len(stream) / frames))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%frames == 0 {
			src.Reset(stream)
		}
		f, err := r.ReadFrame()
		if err != nil {
			if err == io.EOF {
				b.Fatal("stream ended early")
			}
			b.Fatal(err)
		}
		if !f.ChecksumOK() {
			b.Fatal("checksum")
		}
	}
}

// BenchmarkAppendMessage encodes MESSAGE frames around a stored 1 KiB
// message with broker entry metadata, into a reused buffer: the dispatch
// hot path.
func BenchmarkAppendMessage(b *testing.B) {
	stored := must(b)(AppendHeadersAndPayload(nil, metadata(1), make([]byte, benchPayload)))
	bem := must(b)(proto.Marshal(&msgpb.BrokerEntryMetadata{BrokerTimestamp: proto.Uint64(1700000000000), Index: proto.Uint64(1 << 20)}))
	cmd := messageCmd(1, 1234, 0)
	var dst []byte
	b.SetBytes(int64(len(stored)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		cmd.Message.MessageId.EntryId = proto.Uint64(uint64(i))
		var err error
		dst, err = AppendMessage(dst[:0], cmd, bem, stored)
		if err != nil {
			b.Fatal(err)
		}
	}
}
