package broker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

const kafkaTestTime = int64(1_764_450_000_000)

// kafkaTestRecords covers null, empty, binary and UTF-8 keys, null, empty
// and duplicate headers, a tombstone and (if big) a 1 MiB value. Offset
// deltas are indexes; timestamps go back and forth from the first.
func kafkaTestRecords(big bool) []Record {
	recs := []Record{
		{Key: nil, Value: []byte("v0")},
		{Key: []byte{}, Value: []byte{}, Headers: []RecordHeader{{Key: "h", Value: nil}, {Key: "h", Value: []byte("dup")}}},
		{Key: []byte{0xff, 0x00, 0xfe}, Value: nil},
		{Key: []byte("ключ"), Value: []byte("значение"),
			Headers: []RecordHeader{{Key: "", Value: []byte{}}, {Key: "bin", Value: []byte{0xff, 0xfe}}}},
	}
	if big {
		v := make([]byte, 1<<20)
		for i := range v {
			v[i] = byte(i/13 + i>>10)
		}
		recs = append(recs, Record{Key: []byte("big"), Value: v})
	}
	for i := range recs {
		recs[i].OffsetDelta = int32(i)
		recs[i].TimestampDelta = int64(i%3) * 10
	}
	return recs
}

// kmsgBatch encodes a record batch with kmsg (an encoder independent of
// ours): producer 7 epoch 1, the records compressed with codec.
func kmsgBatch(t testing.TB, codec KafkaCodec, attrs int16, recs []Record) []byte {
	t.Helper()
	var raw []byte
	maxDelta := int64(0)
	for _, r := range recs {
		kr := kmsg.Record{TimestampDelta64: r.TimestampDelta, OffsetDelta: r.OffsetDelta, Key: r.Key, Value: r.Value}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kmsg.Header{Key: h.Key, Value: h.Value})
		}
		kr.Length = int32(len(kr.AppendTo(nil)) - 1) // Length 0 takes one byte
		raw = kr.AppendTo(raw)
		maxDelta = max(maxDelta, r.TimestampDelta)
	}
	comp, err := AppendCompressKafka(nil, codec, raw)
	if err != nil {
		t.Fatal(err)
	}
	rb := kmsg.RecordBatch{PartitionLeaderEpoch: 3, Magic: 2, Attributes: attrs | int16(codec),
		LastOffsetDelta: int32(len(recs) - 1), FirstTimestamp: kafkaTestTime, MaxTimestamp: kafkaTestTime + maxDelta,
		ProducerID: 7, ProducerEpoch: 1, NumRecords: int32(len(recs)), Records: comp}
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// kmsgRead decodes an uncompressed batch with kmsg, checking its length
// and CRC: an independent check of what we encode.
func kmsgRead(t testing.TB, batch []byte) (kmsg.RecordBatch, []Record) {
	t.Helper()
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(batch); err != nil {
		t.Fatalf("kmsg: %v", err)
	}
	if int(rb.Length) != len(batch)-12 || rb.Magic != 2 {
		t.Fatalf("batch length %d of %d bytes, magic %d", rb.Length, len(batch), rb.Magic)
	}
	if c := crc32.Checksum(batch[21:], crc32.MakeTable(crc32.Castagnoli)); uint32(rb.CRC) != c {
		t.Fatalf("crc %#x, computed %#x", uint32(rb.CRC), c)
	}
	if rb.Attributes&7 != 0 {
		t.Fatalf("compressed: attributes %#x", rb.Attributes)
	}
	var recs []Record
	data := rb.Records
	for range rb.NumRecords {
		l, n := binary.Varint(data)
		if n <= 0 || int(l)+n > len(data) {
			t.Fatalf("record length %d", l)
		}
		var kr kmsg.Record
		if err := kr.ReadFrom(data[:n+int(l)]); err != nil {
			t.Fatal(err)
		}
		data = data[n+int(l):]
		r := Record{Attributes: kr.Attributes, TimestampDelta: kr.TimestampDelta64, OffsetDelta: kr.OffsetDelta,
			Key: kr.Key, Value: kr.Value}
		for _, h := range kr.Headers {
			r.Headers = append(r.Headers, RecordHeader{Key: h.Key, Value: h.Value})
		}
		recs = append(recs, r)
	}
	if len(data) != 0 {
		t.Fatalf("%d bytes after the records", len(data))
	}
	return rb, recs
}

// sameRecords reports the first difference between two record lists,
// telling null from empty.
func sameRecords(got, want []Record) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d records, want %d", len(got), len(want))
	}
	eqb := func(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }
	for i := range got {
		g, w := got[i], want[i]
		if g.TimestampDelta != w.TimestampDelta || g.OffsetDelta != w.OffsetDelta || !eqb(g.Key, w.Key) ||
			!eqb(g.Value, w.Value) || len(g.Headers) != len(w.Headers) {
			return fmt.Errorf("record %d: got key %q ts %d od %d value(%d) %d headers, want key %q ts %d od %d value(%d) %d headers",
				i, g.Key, g.TimestampDelta, g.OffsetDelta, len(g.Value), len(g.Headers),
				w.Key, w.TimestampDelta, w.OffsetDelta, len(w.Value), len(w.Headers))
		}
		for j := range g.Headers {
			if g.Headers[j].Key != w.Headers[j].Key || !eqb(g.Headers[j].Value, w.Headers[j].Value) {
				return fmt.Errorf("record %d header %d: %q=%q, want %q=%q", i, j,
					g.Headers[j].Key, g.Headers[j].Value, w.Headers[j].Key, w.Headers[j].Value)
			}
		}
	}
	return nil
}

// recrc fixes the CRC of a batch after a test edits it.
func recrc(b []byte) []byte {
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return b
}

func TestReadRecordsBatch(t *testing.T) {
	want := kafkaTestRecords(true)
	for _, c := range kafkaCodecs {
		t.Run(c.String(), func(t *testing.T) {
			batch := kmsgBatch(t, c, 0, want)
			h, got, err := ReadRecords(batch, 2<<20)
			if err != nil {
				t.Fatal(err)
			}
			wantH := RecordBatch{BatchLength: int32(len(batch) - 12), PartitionLeaderEpoch: 3, Magic: 2,
				CRC: binary.BigEndian.Uint32(batch[17:]), Attributes: int16(c), LastOffsetDelta: int32(len(want) - 1),
				FirstTimestamp: kafkaTestTime, MaxTimestamp: kafkaTestTime + 20, ProducerID: 7, ProducerEpoch: 1,
				NumRecords: int32(len(want))}
			if h != wantH {
				t.Fatalf("header\n%+v, want\n%+v", h, wantH)
			}
			if h.Compression() != c || h.Transactional() || h.Control() || h.LogAppendTime() {
				t.Fatalf("attribute helpers of %#x", h.Attributes)
			}
			if err := sameRecords(got, want); err != nil {
				t.Fatal(err)
			}
			if _, _, err := ReadRecords(batch, 1<<20); c != KafkaNone && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("limit: err %v, want ErrTooLarge", err)
			}
			key, err := FirstRecordKey(batch, 2<<20)
			if err != nil || key != nil {
				t.Fatalf("first key %q, %v; want null", key, err)
			}
		})
	}
	h := RecordBatch{Attributes: attrTransactional | attrControl | attrLogAppendTime | int16(KafkaZstd)}
	if !h.Transactional() || !h.Control() || !h.LogAppendTime() || h.Compression() != KafkaZstd {
		t.Fatal("attribute helpers")
	}
}

func TestFirstRecordKeyBatch(t *testing.T) {
	recs := kafkaTestRecords(false)[3:]
	recs[0].OffsetDelta = 0
	key, err := FirstRecordKey(kmsgBatch(t, KafkaLZ4, 0, recs), 1<<20)
	if err != nil || string(key) != "ключ" {
		t.Fatalf("first key %q, %v", key, err)
	}
}

func TestSplitRecordBatches(t *testing.T) {
	b1 := kmsgBatch(t, KafkaNone, 0, kafkaTestRecords(false))
	b2 := kmsgBatch(t, KafkaGzip, attrTransactional, kafkaTestRecords(false)[:1])
	in := append(append([]byte(nil), b1...), b2...)
	got, err := SplitRecordBatches(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !bytes.Equal(got[0].Bytes, b1) || !bytes.Equal(got[1].Bytes, b2) {
		t.Fatalf("split into %d batches", len(got))
	}
	if &got[1].Bytes[0] != &in[len(b1)] {
		t.Fatal("Bytes does not alias the input")
	}
	if got[0].Header.NumRecords != 4 || got[1].Header.NumRecords != 1 || !got[1].Header.Transactional() ||
		got[1].Header.Compression() != KafkaGzip || got[0].Header.ProducerID != 7 {
		t.Fatalf("headers %+v, %+v", got[0].Header, got[1].Header)
	}

	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), b1...)) }
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrCorruptBatch},
		{"bad crc", edit(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), ErrCorruptBatch},
		{"crc itself", edit(func(b []byte) []byte { b[17] ^= 0x80; return b }), ErrCorruptBatch},
		{"batchLength past the end", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[8:], uint32(len(b))); return b }), ErrCorruptBatch},
		{"batchLength short", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[8:], 48); return b }), ErrCorruptBatch},
		{"trailing bytes", append(append([]byte(nil), b1...), 0, 0, 0), ErrCorruptBatch},
		{"no records", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[57:], 0); return recrc(b) }), ErrCorruptBatch},
		{"lastOffsetDelta", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[23:], 2); return recrc(b) }), ErrCorruptBatch},
		{"magic 1", edit(func(b []byte) []byte { b[16] = 1; return b }), ErrUnsupportedBatch},
		{"magic 3", edit(func(b []byte) []byte { b[16] = 3; return b }), ErrUnsupportedBatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := SplitRecordBatches(tc.in); !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
	for n := range len(in) {
		if n == len(b1) {
			continue
		}
		if _, err := SplitRecordBatches(in[:n]); err == nil {
			t.Fatalf("truncated to %d of %d bytes: no error", n, len(in))
		}
	}
	if RecordsMagic(b1) != 2 || RecordsMagic(b1[:16]) != -1 {
		t.Fatal("RecordsMagic")
	}
}

// ReadRecords checks records, not just the header: every truncation or
// inconsistent length inside the records must be caught.
func TestReadRecordsCorruptBatch(t *testing.T) {
	for _, c := range kafkaCodecs {
		batch := kmsgBatch(t, c, 0, kafkaTestRecords(false))
		for n := range len(batch) {
			if _, _, err := ReadRecords(batch[:n], 1<<20); err == nil {
				t.Fatalf("%v: truncated to %d of %d bytes: no error", c, n, len(batch))
			}
		}
		// Corrupt each byte of the records section, fixing the CRC: what
		// still decodes must not panic; a count off by one must not pass.
		for i := batchHeaderLen; i < len(batch); i++ {
			b := append([]byte(nil), batch...)
			b[i] ^= 0x55
			_, _, _ = ReadRecords(recrc(b), 1<<20)
		}
		for _, d := range []int32{-1, 1} {
			b := append([]byte(nil), batch...)
			binary.BigEndian.PutUint32(b[57:], uint32(4+d))
			if _, _, err := ReadRecords(recrc(b), 1<<20); !errors.Is(err, ErrCorruptBatch) {
				t.Fatalf("%v: count %d: err %v", c, 4+d, err)
			}
		}
	}
}

func TestAppendRecordBatchKmsg(t *testing.T) {
	want := kafkaTestRecords(true)
	h := RecordBatch{BaseOffset: 42, PartitionLeaderEpoch: -1, Attributes: attrTransactional | int16(KafkaGzip),
		FirstTimestamp: kafkaTestTime, MaxTimestamp: kafkaTestTime + 20, ProducerID: 9, ProducerEpoch: 2, BaseSequence: 5}
	batch := AppendRecordBatch([]byte("prefix"), h, want)[len("prefix"):]
	rb, got := kmsgRead(t, batch)
	if err := sameRecords(got, want); err != nil {
		t.Fatal(err)
	}
	wantRB := kmsg.RecordBatch{FirstOffset: 42, Length: int32(len(batch) - 12), PartitionLeaderEpoch: -1, Magic: 2,
		CRC: rb.CRC, Attributes: attrTransactional, LastOffsetDelta: 4, FirstTimestamp: kafkaTestTime,
		MaxTimestamp: kafkaTestTime + 20, ProducerID: 9, ProducerEpoch: 2, FirstSequence: 5, NumRecords: 5, Records: rb.Records}
	if !reflect.DeepEqual(rb, wantRB) {
		t.Fatalf("header\n%+v, want\n%+v", rb, wantRB)
	}
}

func TestAppendWithBaseOffsetBatch(t *testing.T) {
	batch := kmsgBatch(t, KafkaSnappy, 0, kafkaTestRecords(false))
	orig := append([]byte(nil), batch...)
	out := AppendWithBaseOffset([]byte("xy"), batch, 1<<40+3)
	if !bytes.Equal(batch, orig) {
		t.Fatal("input modified")
	}
	if string(out[:2]) != "xy" || !bytes.Equal(out[2+8:], batch[8:]) {
		t.Fatal("bytes other than baseOffset changed")
	}
	got, err := SplitRecordBatches(out[2:])
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Header.BaseOffset != 1<<40+3 {
		t.Fatalf("base offset %d", got[0].Header.BaseOffset)
	}
}

// legacyMessage encodes one magic 0 or 1 message with kmsg, its CRC and
// size filled in.
func legacyMessage(magic int8, codec KafkaCodec, ts int64, key, value []byte) []byte {
	var b []byte
	if magic == 0 {
		b = (&kmsg.MessageV0{Magic: 0, Attributes: int8(codec), Key: key, Value: value}).AppendTo(nil)
	} else {
		b = (&kmsg.MessageV1{Magic: 1, Attributes: int8(codec), Timestamp: ts, Key: key, Value: value}).AppendTo(nil)
	}
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[12:], crc32.ChecksumIEEE(b[16:]))
	return b
}

func TestMessageSetToBatch(t *testing.T) {
	const now = kafkaTestTime + 1000
	type m struct {
		key, value []byte
		ts         int64
	}
	msgs := []m{{nil, []byte("a"), kafkaTestTime + 5}, {[]byte("k"), nil, kafkaTestTime}, {[]byte{}, []byte{}, kafkaTestTime + 9}}
	set := func(magic int8) []byte {
		var b []byte
		for _, x := range msgs {
			b = append(b, legacyMessage(magic, KafkaNone, x.ts, x.key, x.value)...)
		}
		return b
	}
	wrap := func(magic int8, c KafkaCodec, inner []byte) []byte {
		comp, err := AppendCompressKafka(nil, c, inner)
		if err != nil {
			t.Fatal(err)
		}
		return legacyMessage(magic, c, kafkaTestTime+100, nil, comp)
	}
	for _, tc := range []struct {
		name  string
		magic int8
		in    []byte
	}{
		{"v0", 0, set(0)},
		{"v1", 1, set(1)},
		{"v0 gzip", 0, wrap(0, KafkaGzip, set(0))},
		{"v1 gzip", 1, wrap(1, KafkaGzip, set(1))},
		{"v1 snappy xerial", 1, func() []byte {
			return legacyMessage(1, KafkaSnappy, 0, nil, xerial(set(1), 40))
		}()},
		{"v1 lz4", 1, wrap(1, KafkaLZ4, set(1))},
		{"v1 zstd, then plain", 1, append(wrap(1, KafkaZstd, set(1)[:len(legacyMessage(1, 0, msgs[0].ts, msgs[0].key, msgs[0].value))]),
			set(1)[len(legacyMessage(1, 0, msgs[0].ts, msgs[0].key, msgs[0].value)):]...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			batch, n, err := MessageSetToBatch(tc.in, now)
			if err != nil {
				t.Fatal(err)
			}
			if n != int32(len(msgs)) {
				t.Fatalf("%d records", n)
			}
			rb, got := kmsgRead(t, batch)
			var want []Record
			first := msgs[0].ts
			if tc.magic == 0 {
				first = now
			}
			for i, x := range msgs {
				ts := now
				if tc.magic == 1 {
					ts = x.ts
				}
				want = append(want, Record{OffsetDelta: int32(i), TimestampDelta: ts - first, Key: x.key, Value: x.value})
			}
			if err := sameRecords(got, want); err != nil {
				t.Fatal(err)
			}
			maxTs := now
			if tc.magic == 1 {
				maxTs = kafkaTestTime + 9
			}
			if rb.FirstOffset != 0 || rb.ProducerID != -1 || rb.ProducerEpoch != -1 || rb.FirstSequence != -1 ||
				rb.Attributes != 0 || rb.FirstTimestamp != first || rb.MaxTimestamp != maxTs || rb.LastOffsetDelta != 2 {
				t.Fatalf("header %+v", rb)
			}
			if _, err := SplitRecordBatches(batch); err != nil {
				t.Fatal(err)
			}
			boundary := map[int]bool{}
			for off := 0; off < len(tc.in); off += 12 + int(binary.BigEndian.Uint32(tc.in[off+8:])) {
				boundary[off] = off > 0
			}
			for i := range len(tc.in) {
				if boundary[i] {
					continue // a shorter, valid set
				}
				if _, _, err := MessageSetToBatch(tc.in[:i], now); err == nil {
					t.Fatalf("truncated to %d bytes: no error", i)
				}
			}
		})
	}

	bad := set(1)
	bad[len(bad)-1] ^= 1
	if _, _, err := MessageSetToBatch(bad, now); !errors.Is(err, ErrCorruptBatch) {
		t.Fatalf("bad crc: err %v", err)
	}
	m2 := legacyMessage(1, KafkaNone, 0, nil, []byte("x"))
	m2[16] = 2
	binary.BigEndian.PutUint32(m2[12:], crc32.ChecksumIEEE(m2[16:]))
	if _, _, err := MessageSetToBatch(m2, now); !errors.Is(err, ErrUnsupportedBatch) {
		t.Fatalf("magic 2: err %v", err)
	}
	nested := wrap(1, KafkaGzip, wrap(1, KafkaGzip, set(1)))
	if _, _, err := MessageSetToBatch(nested, now); !errors.Is(err, ErrUnsupportedBatch) {
		t.Fatalf("nested: err %v", err)
	}
	if _, _, err := MessageSetToBatch(legacyMessage(1, KafkaGzip, 0, nil, []byte("not gzip")), now); !errors.Is(err, ErrCorruptBatch) {
		t.Fatalf("bad gzip: err %v", err)
	}
}

func FuzzSplitRecordBatches(f *testing.F) {
	f.Add(kmsgBatch(f, KafkaNone, 0, kafkaTestRecords(false)))
	f.Add(kmsgBatch(f, KafkaZstd, 0, kafkaTestRecords(false)[:2]))
	f.Add(append(kmsgBatch(f, KafkaGzip, 0, kafkaTestRecords(false)), kmsgBatch(f, KafkaNone, 0, kafkaTestRecords(false)[:1])...))
	f.Add(legacyMessage(1, KafkaNone, 5, []byte("k"), []byte("v")))
	f.Fuzz(func(t *testing.T, in []byte) {
		batches, err := SplitRecordBatches(in)
		if err != nil {
			if !errors.Is(err, ErrCorruptBatch) && !errors.Is(err, ErrUnsupportedBatch) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		total := 0
		for _, b := range batches {
			total += len(b.Bytes)
			// What passes the split must decode or fail cleanly.
			if _, recs, err := ReadRecords(b.Bytes, 1<<20); err == nil && len(recs) != int(b.Header.NumRecords) {
				t.Fatalf("%d records, header says %d", len(recs), b.Header.NumRecords)
			}
		}
		if total != len(in) {
			t.Fatalf("batches cover %d of %d bytes", total, len(in))
		}
		_, _, _ = MessageSetToBatch(in, 1)
		if len(in) >= batchHeaderLen {
			b := append([]byte(nil), in...)
			binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
			if _, recs, err := ReadRecords(recrc(b), 1<<20); err == nil && len(recs) != int(binary.BigEndian.Uint32(b[57:])) {
				t.Fatalf("%d records, header says otherwise", len(recs))
			}
		}
	})
}
