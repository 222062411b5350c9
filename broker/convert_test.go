package broker

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/msgpb"
)

const convertPublishTime = kafkaTestTime + 500

// pulsarTestMsg is one message of a test entry, as a Pulsar producer sets it.
type pulsarTestMsg struct {
	key       *string
	b64       bool
	nullKey   bool
	value     []byte
	null      bool
	props     []*msgpb.KeyValue
	eventTime uint64
}

func kv(k, v string) *msgpb.KeyValue {
	return &msgpb.KeyValue{Key: proto.String(k), Value: proto.String(v)}
}

// pulsarTestEntry builds an entry the way pulsar-client-go does: a batch
// ([size][SingleMessageMetadata][payload]... compressed as a whole) or, if
// !batched, msgs[0] alone with its fields in the MessageMetadata.
func pulsarTestEntry(t testing.TB, c msgpb.CompressionType, batched, checksum bool, msgs []pulsarTestMsg) []byte {
	t.Helper()
	md := &msgpb.MessageMetadata{ProducerName: proto.String("go"), SequenceId: proto.Uint64(7),
		PublishTime: proto.Uint64(uint64(convertPublishTime))}
	var body []byte
	if batched {
		md.NumMessagesInBatch = proto.Int32(int32(len(msgs)))
		for i, m := range msgs {
			smd := &msgpb.SingleMessageMetadata{Properties: m.props, PartitionKey: m.key,
				PayloadSize: proto.Int32(int32(len(m.value))), SequenceId: proto.Uint64(uint64(7 + i))}
			if m.b64 {
				smd.PartitionKeyB64Encoded = proto.Bool(true)
			}
			if m.nullKey {
				smd.NullPartitionKey = proto.Bool(true)
			}
			if m.null {
				smd.NullValue = proto.Bool(true)
			}
			if m.eventTime > 0 {
				smd.EventTime = proto.Uint64(m.eventTime)
			}
			sb, err := proto.Marshal(smd)
			if err != nil {
				t.Fatal(err)
			}
			body = binary.BigEndian.AppendUint32(body, uint32(len(sb)))
			body = append(append(body, sb...), m.value...)
		}
	} else {
		m := msgs[0]
		md.PartitionKey, md.Properties, body = m.key, m.props, m.value
		if m.b64 {
			md.PartitionKeyB64Encoded = proto.Bool(true)
		}
		if m.nullKey {
			md.NullPartitionKey = proto.Bool(true)
		}
		if m.null {
			md.NullValue = proto.Bool(true)
		}
		if m.eventTime > 0 {
			md.EventTime = proto.Uint64(m.eventTime)
		}
	}
	if c != msgpb.CompressionType_NONE {
		md.Compression = c.Enum()
		md.UncompressedSize = proto.Uint32(uint32(len(body)))
		var err error
		if body, err = CompressPulsar(c, body); err != nil {
			t.Fatal(err)
		}
	}
	mb, err := proto.Marshal(md)
	if err != nil {
		t.Fatal(err)
	}
	rest := binary.BigEndian.AppendUint32(nil, uint32(len(mb)))
	rest = append(append(rest, mb...), body...)
	if !checksum {
		return rest
	}
	out := binary.BigEndian.AppendUint16(nil, checksumMagic)
	out = binary.BigEndian.AppendUint32(out, crc32.Checksum(rest, castagnoli))
	return append(out, rest...)
}

// pulsarTestMessages covers every key form, null and empty values,
// properties, event time set or not, and a 1 MiB value. Its Kafka form is
// pulsarTestRecords.
func pulsarTestMessages() []pulsarTestMsg {
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	return []pulsarTestMsg{
		{value: []byte("no key"), eventTime: uint64(kafkaTestTime)},
		{key: proto.String(""), value: []byte{}, props: []*msgpb.KeyValue{kv("a", "1"), kv("a", ""), kv("b", "2")}},
		{key: proto.String(base64.StdEncoding.EncodeToString([]byte{0, 0xff})), b64: true, null: true, eventTime: uint64(kafkaTestTime - 7)},
		{key: proto.String("ignored"), nullKey: true, value: []byte("x")},
		{key: proto.String("ключ"), value: big, eventTime: uint64(kafkaTestTime + 1)},
	}
}

// pulsarTestRecords is the Kafka form of pulsarTestMessages, timestamps
// relative to kafkaTestTime.
func pulsarTestRecords() []Record {
	ms := pulsarTestMessages()
	return []Record{
		{OffsetDelta: 0, TimestampDelta: 0, Value: []byte("no key")},
		{OffsetDelta: 1, TimestampDelta: 500, Key: []byte{}, Value: []byte{},
			Headers: []RecordHeader{{"a", []byte("1")}, {"a", []byte{}}, {"b", []byte("2")}}},
		{OffsetDelta: 2, TimestampDelta: -7, Key: []byte{0, 0xff}},
		{OffsetDelta: 3, TimestampDelta: 500, Value: []byte("x")},
		{OffsetDelta: 4, TimestampDelta: 1, Key: []byte("ключ"), Value: ms[4].value},
	}
}

func TestPulsarToKafkaConvert(t *testing.T) {
	want := pulsarTestRecords()
	for _, c := range pulsarCodecs {
		t.Run(c.String(), func(t *testing.T) {
			e := pulsarTestEntry(t, c, true, true, pulsarTestMessages())
			out, n, err := AppendPulsarAsKafka([]byte("pre"), e, 100, 1, 2<<20)
			if err != nil {
				t.Fatal(err)
			}
			if n != 5 || string(out[:3]) != "pre" {
				t.Fatalf("%d records", n)
			}
			rb, got := kmsgRead(t, out[3:])
			if err := sameRecords(got, want); err != nil {
				t.Fatal(err)
			}
			if rb.FirstOffset != 100 || rb.ProducerID != -1 || rb.ProducerEpoch != -1 || rb.FirstSequence != -1 ||
				rb.Attributes != 0 || rb.FirstTimestamp != kafkaTestTime || rb.MaxTimestamp != convertPublishTime ||
				rb.LastOffsetDelta != 4 || rb.NumRecords != 5 {
				t.Fatalf("header %+v", rb)
			}
			if _, _, err := AppendPulsarAsKafka(nil, e, 0, 1, 1<<20); !errors.Is(err, ErrTooLarge) {
				t.Fatalf("limit: err %v, want ErrTooLarge", err)
			}

			// Each message alone, not batched.
			for i, m := range pulsarTestMessages() {
				e := pulsarTestEntry(t, c, false, i%2 == 0, []pulsarTestMsg{m})
				out, n, err := AppendPulsarAsKafka(nil, e, 5, 1, 2<<20)
				if err != nil || n != 1 {
					t.Fatalf("message %d: %d records, %v", i, n, err)
				}
				rb, got := kmsgRead(t, out)
				w := want[i]
				w.OffsetDelta, w.TimestampDelta = 0, 0
				if err := sameRecords(got, []Record{w}); err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
				if ts := kafkaTestTime + want[i].TimestampDelta; rb.FirstTimestamp != ts || rb.MaxTimestamp != ts || rb.FirstOffset != 5 {
					t.Fatalf("message %d: header %+v", i, rb)
				}
			}
		})
	}
}

// readPulsarBatch parses a converted entry independently of the code under
// test: the metadata and each message's metadata and payload.
func readPulsarBatch(t testing.TB, e []byte) (*msgpb.MessageMetadata, []*msgpb.SingleMessageMetadata, [][]byte) {
	t.Helper()
	if binary.BigEndian.Uint16(e) != checksumMagic || binary.BigEndian.Uint32(e[2:]) != crc32.Checksum(e[6:], castagnoli) {
		t.Fatal("bad checksum")
	}
	md, payload, err := ParseEntry(e)
	if err != nil {
		t.Fatal(err)
	}
	var smds []*msgpb.SingleMessageMetadata
	var values [][]byte
	for len(payload) > 0 {
		n := binary.BigEndian.Uint32(payload)
		smd := new(msgpb.SingleMessageMetadata)
		if err := proto.Unmarshal(payload[4:4+n], smd); err != nil {
			t.Fatal(err)
		}
		payload = payload[4+n:]
		smds = append(smds, smd)
		values = append(values, payload[:smd.GetPayloadSize()])
		payload = payload[smd.GetPayloadSize():]
	}
	return md, smds, values
}

func TestKafkaToPulsarConvert(t *testing.T) {
	recs := kafkaTestRecords(true)
	for _, c := range kafkaCodecs {
		for _, logAppend := range []bool{false, true} {
			attrs := int16(0)
			if logAppend {
				attrs = attrLogAppendTime
			}
			t.Run(c.String(), func(t *testing.T) {
				e, err := KafkaToPulsar(kmsgBatch(t, c, attrs, recs), convertPublishTime, 2<<20)
				if err != nil {
					t.Fatal(err)
				}
				md, smds, values := readPulsarBatch(t, e)
				wantMD := &msgpb.MessageMetadata{ProducerName: proto.String("kafka"), SequenceId: proto.Uint64(0),
					PublishTime: proto.Uint64(uint64(convertPublishTime)), NumMessagesInBatch: proto.Int32(5),
					Compression: msgpb.CompressionType_NONE.Enum()}
				if !proto.Equal(md, wantMD) {
					t.Fatalf("metadata %v, want %v", md, wantMD)
				}
				ts := func(i int) *uint64 {
					if logAppend {
						return proto.Uint64(uint64(kafkaTestTime + 20))
					}
					return proto.Uint64(uint64(kafkaTestTime + recs[i].TimestampDelta))
				}
				want := []*msgpb.SingleMessageMetadata{
					{PayloadSize: proto.Int32(2), EventTime: ts(0), SequenceId: proto.Uint64(0)},
					{PartitionKey: proto.String(""), PayloadSize: proto.Int32(0), EventTime: ts(1), SequenceId: proto.Uint64(1),
						Properties: []*msgpb.KeyValue{kv("h", ""), kv("h", "dup")}},
					{PartitionKey: proto.String("/wD+"), PartitionKeyB64Encoded: proto.Bool(true), PayloadSize: proto.Int32(0),
						NullValue: proto.Bool(true), EventTime: ts(2), SequenceId: proto.Uint64(2)},
					{PartitionKey: proto.String("ключ"), PayloadSize: proto.Int32(16), EventTime: ts(3), SequenceId: proto.Uint64(3),
						Properties: []*msgpb.KeyValue{kv("", ""), kv("bin", "\xff\xfe")}},
					{PartitionKey: proto.String("big"), PayloadSize: proto.Int32(1 << 20), EventTime: ts(4), SequenceId: proto.Uint64(4)},
				}
				if len(smds) != len(want) {
					t.Fatalf("%d messages", len(smds))
				}
				for i := range want {
					if !proto.Equal(smds[i], want[i]) {
						t.Fatalf("message %d: %v, want %v", i, smds[i], want[i])
					}
					if !bytes.Equal(values[i], recs[i].Value) {
						t.Fatalf("message %d: payload differs", i)
					}
				}
			})
		}
	}
}

// Kafka -> Pulsar -> Kafka keeps the records; Pulsar -> Kafka -> Pulsar ->
// Kafka gives the same Kafka batch.
func TestKafkaPulsarRoundTrip(t *testing.T) {
	for _, c := range kafkaCodecs {
		for _, attrs := range []int16{0, attrLogAppendTime} {
			recs := kafkaTestRecords(true)
			e, err := KafkaToPulsar(kmsgBatch(t, c, attrs, recs), convertPublishTime, 2<<20)
			if err != nil {
				t.Fatal(err)
			}
			out, n, err := AppendPulsarAsKafka(nil, e, 0, 0, 2<<20)
			if err != nil || n != int32(len(recs)) {
				t.Fatalf("%v: %d records, %v", c, n, err)
			}
			rb, got := kmsgRead(t, out)
			for i := range recs {
				for j := range recs[i].Headers {
					if recs[i].Headers[j].Value == nil {
						recs[i].Headers[j].Value = []byte{} // null header values come back empty
					}
				}
				if attrs != 0 {
					recs[i].TimestampDelta = 0
				}
			}
			if err := sameRecords(got, recs); err != nil {
				t.Fatalf("%v attrs %#x: %v", c, attrs, err)
			}
			if rb.FirstTimestamp != kafkaTestTime+int64(attrs/attrLogAppendTime)*20 {
				t.Fatalf("%v: first timestamp %d", c, rb.FirstTimestamp)
			}
		}
	}
	for _, c := range pulsarCodecs {
		k1, _, err := AppendPulsarAsKafka(nil, pulsarTestEntry(t, c, true, false, pulsarTestMessages()), 9, 0, 2<<20)
		if err != nil {
			t.Fatal(err)
		}
		e, err := KafkaToPulsar(k1, convertPublishTime, 2<<20)
		if err != nil {
			t.Fatal(err)
		}
		k2, _, err := AppendPulsarAsKafka(nil, e, 9, 0, 2<<20)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(k1, k2) {
			t.Fatalf("%v: Pulsar -> Kafka -> Pulsar -> Kafka differs", c)
		}
	}
}

func TestConvertErrors(t *testing.T) {
	recs := kafkaTestRecords(false)
	control := kmsgBatch(t, KafkaNone, attrControl|attrTransactional, recs)
	if _, err := KafkaToPulsar(control, 1, 1<<20); !errors.Is(err, ErrUnsupportedBatch) {
		t.Errorf("control batch: err %v", err)
	}
	codec6 := kmsgBatch(t, KafkaNone, 0, recs)
	codec6[22] |= 6
	if _, err := KafkaToPulsar(recrc(codec6), 1, 1<<20); !errors.Is(err, ErrUnsupportedBatch) || !errors.Is(err, ErrUnknownCodec) {
		t.Errorf("codec 6: err %v", err)
	}
	empty := kmsgBatch(t, KafkaNone, 0, nil)
	if _, err := KafkaToPulsar(empty, 1, 1<<20); !errors.Is(err, ErrCorruptBatch) {
		t.Errorf("no records: err %v", err)
	}
	bad := kmsgBatch(t, KafkaNone, 0, recs)
	bad[len(bad)-1] ^= 1
	if _, err := KafkaToPulsar(bad, 1, 1<<20); !errors.Is(err, ErrCorruptBatch) {
		t.Errorf("bad crc: err %v", err)
	}
	for _, c := range kafkaCodecs {
		b := kmsgBatch(t, c, 0, recs)
		for n := range len(b) {
			if _, err := KafkaToPulsar(b[:n], 1, 1<<20); !errors.Is(err, ErrCorruptBatch) {
				t.Fatalf("%v truncated to %d: err %v", c, n, err)
			}
		}
	}

	msgs := pulsarTestMessages()[:4]
	e := pulsarTestEntry(t, msgpb.CompressionType_NONE, true, true, msgs)
	e[len(e)-1] ^= 1
	if _, _, err := AppendPulsarAsKafka(nil, e, 0, 1, 1<<20); !errors.Is(err, ErrBadEntry) {
		t.Errorf("bad checksum: err %v", err)
	}
	for _, c := range pulsarCodecs {
		for _, sum := range []bool{false, true} {
			e := pulsarTestEntry(t, c, true, sum, msgs)
			for n := range len(e) {
				if _, _, err := AppendPulsarAsKafka(nil, e[:n], 0, 1, 1<<20); !errors.Is(err, ErrBadEntry) {
					t.Fatalf("%v truncated to %d of %d: err %v", c, n, len(e), err)
				}
			}
		}
	}
	unsupported := func(name string, f func(md *msgpb.MessageMetadata)) {
		md := &msgpb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(1)}
		f(md)
		mb, _ := proto.Marshal(md)
		e := append(binary.BigEndian.AppendUint32(nil, uint32(len(mb))), mb...)
		if _, _, err := AppendPulsarAsKafka(nil, append(e, "x"...), 0, 1, 1<<20); !errors.Is(err, ErrUnsupportedBatch) {
			t.Errorf("%s: err %v", name, err)
		}
	}
	unsupported("encrypted", func(md *msgpb.MessageMetadata) {
		md.EncryptionKeys = []*msgpb.EncryptionKeys{{Key: proto.String("k"), Value: []byte("v")}}
	})
	unsupported("chunked", func(md *msgpb.MessageMetadata) { md.NumChunksFromMsg = proto.Int32(3) })
	unsupported("marker", func(md *msgpb.MessageMetadata) { md.MarkerType = proto.Int32(1) })
	unsupported("codec 9", func(md *msgpb.MessageMetadata) { md.Compression = msgpb.CompressionType(9).Enum() })

	badKey := pulsarTestEntry(t, msgpb.CompressionType_NONE, true, false,
		[]pulsarTestMsg{{key: proto.String("not base64!"), b64: true}})
	if _, _, err := AppendPulsarAsKafka(nil, badKey, 0, 1, 1<<20); !errors.Is(err, ErrBadEntry) {
		t.Errorf("bad base64 key: err %v", err)
	}
}

func FuzzKafkaToPulsar(f *testing.F) {
	for _, c := range kafkaCodecs {
		f.Add(kmsgBatch(f, c, 0, kafkaTestRecords(false)))
	}
	f.Add(kmsgBatch(f, KafkaNone, attrLogAppendTime, kafkaTestRecords(false)[:1]))
	f.Fuzz(func(t *testing.T, in []byte) {
		checkKafkaToPulsar(t, in)
		// Most mutations fail the CRC; fixing it (and batchLength) lets the
		// fuzzer reach the records.
		if len(in) >= batchHeaderLen {
			b := append([]byte(nil), in...)
			binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
			checkKafkaToPulsar(t, recrc(b))
		}
	})
}

func checkKafkaToPulsar(t *testing.T, in []byte) {
	{
		e, err := KafkaToPulsar(in, 1, 1<<20)
		if err != nil {
			if !errors.Is(err, ErrCorruptBatch) && !errors.Is(err, ErrUnsupportedBatch) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		h, recs, err := ReadRecords(in, 1<<20)
		if err != nil {
			t.Fatalf("converted, but ReadRecords: %v", err)
		}
		out, n, err := AppendPulsarAsKafka(nil, e, 0, 1, 2<<20)
		if err != nil || n != h.NumRecords {
			t.Fatalf("back to Kafka: %d records of %d, %v", n, h.NumRecords, err)
		}
		_, got, err := ReadRecords(out, 2<<20)
		if err != nil {
			t.Fatal(err)
		}
		for i := range recs {
			if !bytes.Equal(got[i].Key, recs[i].Key) || (got[i].Key == nil) != (recs[i].Key == nil) ||
				!bytes.Equal(got[i].Value, recs[i].Value) || (got[i].Value == nil) != (recs[i].Value == nil) ||
				len(got[i].Headers) != len(recs[i].Headers) {
				t.Fatalf("record %d differs", i)
			}
			if ts := recordTime(&h, &recs[i]); ts > 0 && ts != kafkaTime(out, got[i]) {
				t.Fatalf("record %d: timestamp %d, want %d", i, kafkaTime(out, got[i]), ts)
			}
		}
	}
}

func kafkaTime(batch []byte, r Record) int64 {
	h := decodeHeader(batch)
	return recordTime(&h, &r)
}

func FuzzAppendPulsarAsKafka(f *testing.F) {
	msgs := pulsarTestMessages()[:4]
	for _, c := range pulsarCodecs {
		f.Add(pulsarTestEntry(f, c, true, false, msgs))
		f.Add(pulsarTestEntry(f, c, false, true, msgs[1:2]))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		k1, n, err := AppendPulsarAsKafka(nil, in, 3, 1, 1<<20)
		if err != nil {
			if !errors.Is(err, ErrBadEntry) && !errors.Is(err, ErrUnsupportedBatch) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		bs, err := SplitRecordBatches(k1)
		if err != nil || len(bs) != 1 || bs[0].Header.NumRecords != n || bs[0].Header.BaseOffset != 3 {
			t.Fatalf("output does not split: %v", err)
		}
		e, err := KafkaToPulsar(k1, 1, 2<<20)
		if err != nil {
			t.Fatal(err)
		}
		k2, _, err := AppendPulsarAsKafka(nil, e, 3, 1, 2<<20)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(k1, k2) {
			t.Fatal("Pulsar -> Kafka -> Pulsar -> Kafka differs")
		}
	})
}
