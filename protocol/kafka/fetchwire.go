package kafka

import (
	"encoding/binary"
	"fmt"
	"net"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/ledger"
)

// Fetch responses are written with writev, not encoded whole: the
// response's fields go into one buffer and each partition's record
// batches are written from where they lie. A stored Kafka batch of
// borrowMin bytes or more is written from the entry as read (storage's
// read buffer or the cache's copy), after an 8-byte piece holding its
// base offset, since the stored batch's own first 8 bytes are the offset
// it was produced with; smaller batches, the base offsets and Pulsar
// entries converted to batches are appended to a pooled buffer of the
// partition (records.own). Before this, every byte served was copied
// twice in user space, into the partition's buffer and into the encoded
// response: a quarter of the broker's CPU on a consume from storage.
//
// The fields are encoded by appendFetchFrame for the shape this broker
// answers (v4–v12, no tagged fields set); anything else is flattened and
// encoded by kmsg. Tests check both give the same bytes.

// borrowMin is the batch size from which a batch is written from the
// entry instead of copied: below it, an iovec costs about what the copy
// does.
const borrowMin = 16 << 10

// records is one partition's record batches in a fetch response, in
// pieces. Entries it borrows are never written to by anyone (entries are
// immutable once read), so they stay valid until the response is written.
// The entries the fetch read are kept in read, served or not, and
// released (their read buffers recycled) with the record buffer once the
// response is written: the fetch holds them alone.
type records struct {
	own    []byte  // from the record buffer pool
	pieces []piece // in order
	size   int     // bytes in all pieces
	read   []ledger.Entry
}

// piece is b if set, else own[start:end].
type piece struct {
	b          []byte
	start, end int
}

// recordsMark is a point to return to (records.reset).
type recordsMark struct{ own, pieces, size, end int }

func (r *records) mark() recordsMark {
	m := recordsMark{own: len(r.own), pieces: len(r.pieces), size: r.size}
	if n := len(r.pieces); n > 0 {
		m.end = r.pieces[n-1].end
	}
	return m
}

// reset drops what was added since m (keeping the entries read).
func (r *records) reset(m recordsMark) {
	r.own, r.pieces, r.size = r.own[:m.own], r.pieces[:m.pieces], m.size
	if n := len(r.pieces); n > 0 && r.pieces[n-1].b == nil {
		r.pieces[n-1].end = m.end
	}
}

// clear empties r, keeping its buffers.
func (r *records) clear() {
	r.reset(recordsMark{})
}

// dropRead releases the entries read, which no piece may refer to any
// more (after clear).
func (r *records) dropRead() {
	releaseEntries(r.read)
	r.read = r.read[:0]
}

// releaseEntries releases entries a fetch read and holds alone.
func releaseEntries(es []ledger.Entry) {
	for i := range es {
		es[i].Release()
	}
}

// release returns r's own buffer to the pool and releases the entries
// read; r is empty afterwards.
func (r *records) release() {
	putRecordBuf(r.own)
	releaseEntries(r.read)
	*r = records{}
}

// reserve makes room for n more own bytes (without moving what pieces
// refer to: they hold offsets).
func (r *records) reserve(n int) {
	r.own = growRecordBuf(r.own, n)
}

// ownAdded records that own[from:] was just appended.
func (r *records) ownAdded(from int) {
	if from == len(r.own) {
		return
	}
	r.size += len(r.own) - from
	if n := len(r.pieces); n > 0 && r.pieces[n-1].b == nil && r.pieces[n-1].end == from {
		r.pieces[n-1].end = len(r.own)
		return
	}
	r.pieces = append(r.pieces, piece{start: from, end: len(r.own)})
}

// addBatch adds a stored record batch (at least its 61-byte header long)
// with its base offset set to base.
func (r *records) addBatch(batch []byte, base int64) {
	from := len(r.own)
	if len(batch) < borrowMin {
		r.own = append(r.own, batch...)
		binary.BigEndian.PutUint64(r.own[from:], uint64(base))
		r.ownAdded(from)
		return
	}
	r.own = binary.BigEndian.AppendUint64(r.own, uint64(base))
	r.ownAdded(from)
	r.pieces = append(r.pieces, piece{b: batch[8:]})
	r.size += len(batch) - 8
}

// bytes returns piece p's bytes.
func (r *records) bytes(p piece) []byte {
	if p.b != nil {
		return p.b
	}
	return r.own[p.start:p.end]
}

// appendTo appends r's batches to dst.
func (r *records) appendTo(dst []byte) []byte {
	for _, p := range r.pieces {
		dst = append(dst, r.bytes(p)...)
	}
	return dst
}

// plainFetch reports whether appendFetchFrame can encode fr: a version
// this broker serves and nothing set that it does not write (tagged
// fields, brokers).
func plainFetch(fr *kmsg.FetchResponse) bool {
	if fr.Version < 4 || fr.Version > 12 || fr.UnknownTags.Len() > 0 || len(fr.Brokers) > 0 {
		return false
	}
	for i := range fr.Topics {
		t := &fr.Topics[i]
		if t.UnknownTags.Len() > 0 {
			return false
		}
		for j := range t.Partitions {
			p := &t.Partitions[j]
			if p.UnknownTags.Len() > 0 ||
				p.DivergingEpoch.Epoch != -1 || p.DivergingEpoch.EndOffset != -1 || p.DivergingEpoch.UnknownTags.Len() > 0 ||
				p.CurrentLeader.LeaderID != -1 || p.CurrentLeader.LeaderEpoch != -1 || p.CurrentLeader.UnknownTags.Len() > 0 ||
				p.SnapshotID.EndOffset != -1 || p.SnapshotID.Epoch != -1 || p.SnapshotID.UnknownTags.Len() > 0 {
				return false
			}
			for k := range p.AbortedTransactions {
				if p.AbortedTransactions[k].UnknownTags.Len() > 0 {
					return false
				}
			}
		}
	}
	return true
}

// appendFetchFrame encodes the frame of fetch response fr (version set)
// to correlation: its size, the response header and fr's fields, into
// enc, and returns enc and the frame as buffers to write — enc's pieces
// with each partition's records between them. recs holds the records of
// fr's partitions in order (topic by topic); the partitions' own
// RecordBatches are ignored. fr must be plainFetch.
func appendFetchFrame(enc []byte, bufs net.Buffers, correlation int32, fr *kmsg.FetchResponse, recs []*records) ([]byte, net.Buffers) {
	flexible := fr.Version >= 12
	type insert struct {
		at int
		r  *records
	}
	var inserts []insert
	total := 0 // records bytes, outside enc
	enc = append(enc, 0, 0, 0, 0)
	enc = binary.BigEndian.AppendUint32(enc, uint32(correlation))
	if flexible {
		enc = append(enc, 0) // no header tags
	}
	enc = binary.BigEndian.AppendUint32(enc, uint32(fr.ThrottleMillis))
	if fr.Version >= 7 {
		enc = binary.BigEndian.AppendUint16(enc, uint16(fr.ErrorCode))
		enc = binary.BigEndian.AppendUint32(enc, uint32(fr.SessionID))
	}
	enc = appendLen(enc, len(fr.Topics), flexible)
	n := 0
	for i := range fr.Topics {
		t := &fr.Topics[i]
		if flexible {
			enc = binary.AppendUvarint(enc, uint64(len(t.Topic))+1)
		} else {
			enc = binary.BigEndian.AppendUint16(enc, uint16(len(t.Topic)))
		}
		enc = append(enc, t.Topic...)
		enc = appendLen(enc, len(t.Partitions), flexible)
		for j := range t.Partitions {
			p := &t.Partitions[j]
			r := recs[n]
			n++
			enc = binary.BigEndian.AppendUint32(enc, uint32(p.Partition))
			enc = binary.BigEndian.AppendUint16(enc, uint16(p.ErrorCode))
			enc = binary.BigEndian.AppendUint64(enc, uint64(p.HighWatermark))
			enc = binary.BigEndian.AppendUint64(enc, uint64(p.LastStableOffset))
			if fr.Version >= 5 {
				enc = binary.BigEndian.AppendUint64(enc, uint64(p.LogStartOffset))
			}
			switch {
			case p.AbortedTransactions == nil && flexible:
				enc = append(enc, 0)
			case p.AbortedTransactions == nil:
				enc = binary.BigEndian.AppendUint32(enc, 0xffffffff)
			default:
				enc = appendLen(enc, len(p.AbortedTransactions), flexible)
				for _, a := range p.AbortedTransactions {
					enc = binary.BigEndian.AppendUint64(enc, uint64(a.ProducerID))
					enc = binary.BigEndian.AppendUint64(enc, uint64(a.FirstOffset))
					if flexible {
						enc = append(enc, 0)
					}
				}
			}
			if fr.Version >= 11 {
				enc = binary.BigEndian.AppendUint32(enc, uint32(p.PreferredReadReplica))
			}
			// Never null: librdkafka refuses a null record set.
			enc = appendLen(enc, r.size, flexible)
			if r.size > 0 {
				inserts = append(inserts, insert{at: len(enc), r: r})
				total += r.size
			}
			if flexible {
				enc = append(enc, 0) // no partition tags
			}
		}
		if flexible {
			enc = append(enc, 0) // no topic tags
		}
	}
	if flexible {
		enc = append(enc, 0) // no response tags
	}
	binary.BigEndian.PutUint32(enc, uint32(len(enc)-4+total))
	from := 0
	for _, in := range inserts {
		bufs = append(bufs, enc[from:in.at])
		for _, p := range in.r.pieces {
			bufs = append(bufs, in.r.bytes(p))
		}
		from = in.at
	}
	return enc, append(bufs, enc[from:])
}

// appendLen appends an array or bytes length: an int32, or in flexible
// versions an unsigned varint of n+1.
func appendLen(dst []byte, n int, flexible bool) []byte {
	if flexible {
		return binary.AppendUvarint(dst, uint64(n)+1)
	}
	return binary.BigEndian.AppendUint32(dst, uint32(n))
}

// AppendFetchFrame is appendFetchFrame for a broker that holds its record
// batches itself: batches[i] are the pieces, in order, of the i-th
// partition of fr (topic by topic), written from where they lie. The
// benchmark's no-op broker (cmd/magnetar) serves fetches with it. fr must
// have a version from 4 to 12 and no tagged fields or brokers set.
func AppendFetchFrame(enc []byte, bufs net.Buffers, correlation int32, fr *kmsg.FetchResponse, batches [][][]byte) ([]byte, net.Buffers, error) {
	if !plainFetch(fr) {
		return enc, bufs, fmt.Errorf("fetch response version %d with tagged fields or brokers: not written by pieces", fr.Version)
	}
	n := 0
	for i := range fr.Topics {
		n += len(fr.Topics[i].Partitions)
	}
	if n != len(batches) {
		return enc, bufs, fmt.Errorf("batches for %d partitions, the response has %d", len(batches), n)
	}
	recs := make([]*records, n)
	for i, pieces := range batches {
		r := &records{pieces: make([]piece, len(pieces))}
		for j, b := range pieces {
			r.pieces[j] = piece{b: b}
			r.size += len(b)
		}
		recs[i] = r
	}
	enc, bufs = appendFetchFrame(enc, bufs, correlation, fr, recs)
	return enc, bufs, nil
}
