package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/protocol/kafka"
)

// noopKafka is the least a Kafka broker that acknowledges after fsync can
// do for producers: one broker, topics in memory, and each Produce
// request's record batches written to a noopStore, its response sent once
// a group commit has made them durable. `perf all` runs the Kafka produce
// and publish loads against it: what franz-go, one write of each byte
// and fdatasync take on this machine, before any broker work (Magnetar
// writes each byte twice, journal and entry log, and indexes and caches
// it). It serves ApiVersions, Metadata, CreateTopics, ListOffsets,
// InitProducerId, Produce and Fetch; any other request closes the
// connection with a log line. Every response but a fetch's goes through
// the store, so that a connection's responses keep their requests' order;
// a fetch waits until the connection has none waiting there.
//
// A fetch is the least a broker can do for a consumer. Of each
// partition's produce requests, one in noopSampleEvery bytes has its
// first record batch copied into the partition's samples (noopSamples,
// noopFetchRing bytes at most, the oldest replaced), and a consumer
// reading from offset o gets samples in turn, each written from memory
// after an 8-byte base offset (o, o+n, ...; the batch's CRC does not
// cover it), up to the partition's end, the last one cut to the records
// left. No read, copy or check: what the consume load gets from it is
// what franz-go and sending the bytes allow on this machine. The samples
// are batches as the load produced them (a single 1 MB batch sent again
// and again, from the CPU's cache and filling each fetch, read at
// 1,600–2,150 MB/s here).
type noopKafka struct {
	*noopListener
	store    *noopStore
	topicsMu sync.Mutex               // guards topics, samples and nextID
	topics   map[string][]int64       // topic → each partition's next offset
	samples  map[string][]noopSamples // topic → each partition's batches for fetches
	nextID   int64                    // producer ids handed out
}

// noopSamples are a partition's sampled record batches, for fetches.
type noopSamples struct {
	batches []noopBatch
	bytes   int // in batches
	since   int // bytes produced since the last sample
	next    int // the sample replaced next, once bytes is noopFetchRing
}

// noopBatch is a record batch and its record count.
type noopBatch struct {
	b []byte
	n int64
}

// add samples the first batch of records, a partition's produce, if
// noopSampleEvery bytes came before it since the last sample. A produce
// without records, or whose first batch does not decode or claims none,
// is not sampled. The produce taken is the one after the mark, not the
// one crossing it: a large produce crosses it more often than a small
// one, so the crossing one is a size-biased pick (its batches were half
// as large again as the produce's on average, 892 against 603 KB), and
// fetches of them were faster than of what the load produced.
func (s *noopSamples) add(records []byte) {
	due := len(s.batches) == 0 || s.since >= noopSampleEvery
	s.since += len(records)
	if len(records) == 0 || !due {
		return
	}
	first, n, err := firstBatch(records)
	if err != nil || n <= 0 {
		return
	}
	b := noopBatch{b: bytes.Clone(first), n: n}
	s.since = 0
	if s.bytes < noopFetchRing {
		s.batches = append(s.batches, b)
		s.bytes += len(b.b)
		return
	}
	s.bytes += len(b.b) - len(s.batches[s.next].b)
	s.batches[s.next] = b
	s.next = (s.next + 1) % len(s.batches)
}

const (
	// noopSampleEvery is how many bytes produced to a partition one
	// sample stands for: copying one batch in it costs the produce little.
	noopSampleEvery = 8 << 20
	// noopFetchRing bounds a partition's samples: more than the CPU's
	// caches, so that fetches send from memory as a broker's reads do.
	noopFetchRing = 16 << 20
)

// noopFetchMaxWait bounds how long a fetch with nothing to send waits.
const noopFetchMaxWait = 500 * time.Millisecond

// noopKafkaAPIs are the versions served, as Magnetar serves them (at most
// what kmsg knows).
var noopKafkaAPIs = map[int16][2]int16{
	0:  {0, 12}, // Produce
	1:  {4, 12}, // Fetch
	2:  {0, 11}, // ListOffsets
	3:  {0, 13}, // Metadata
	18: {0, 4},  // ApiVersions
	19: {0, 7},  // CreateTopics
	22: {0, 5},  // InitProducerId
}

// noopKafkaMaxRequest bounds a request's size.
const noopKafkaMaxRequest = 100 << 20

// startNoopKafka listens on a free loopback port and serves until Close;
// store is not closed by Close.
func startNoopKafka(log *slog.Logger, store *noopStore) (*noopKafka, error) {
	s := &noopKafka{store: store, topics: map[string][]int64{}, samples: map[string][]noopSamples{}}
	l, err := listenNoop("no-op Kafka broker", log, s.serve)
	if err != nil {
		return nil, err
	}
	s.noopListener = l
	return s, nil
}

// serve reads one connection's requests and queues their responses (a
// fetch's it writes itself: fetch).
func (s *noopKafka) serve(nc net.Conn) error {
	c := &noopConn{c: nc}
	br := bufio.NewReaderSize(nc, 64<<10)
	var size [4]byte
	for {
		if _, err := io.ReadFull(br, size[:]); err != nil {
			return err
		}
		n := int32(binary.BigEndian.Uint32(size[:]))
		if n < 8 || n > noopKafkaMaxRequest {
			return fmt.Errorf("request size %d outside [8, %d]", n, noopKafkaMaxRequest)
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return err
		}
		resp, data, err := s.handle(c, b)
		if err != nil {
			return err
		}
		if resp == nil && data == nil {
			continue // answered (a fetch)
		}
		if err := s.store.add(c, data, resp); err != nil {
			return err
		}
	}
}

// handle decodes one request (header and body) and returns its response,
// framed (nil for a Produce with acks 0), and the bytes to store; a fetch
// it answers on c itself, returning neither.
func (s *noopKafka) handle(c *noopConn, b []byte) (resp, data []byte, err error) {
	key := int16(binary.BigEndian.Uint16(b))
	version := int16(binary.BigEndian.Uint16(b[2:]))
	corr := binary.BigEndian.Uint32(b[4:])
	req := kmsg.RequestForKey(key)
	vs, ok := noopKafkaAPIs[key]
	if key == 18 && version > vs[1] {
		// A later ApiVersions than served: UNSUPPORTED_VERSION in a v0
		// response, with the versions, so the client retries.
		r := kmsg.NewPtrApiVersionsResponse()
		r.ErrorCode = 35
		r.ApiKeys = noopKafkaVersions()
		return frameKafkaResponse(corr, r), nil, nil
	}
	if req == nil || !ok || version < vs[0] || version > min(vs[1], req.MaxVersion()) {
		return nil, nil, fmt.Errorf("the no-op Kafka broker of perf all does not serve API key %d version %d", key, version)
	}
	req.SetVersion(version)
	_, body, err := kafka.SplitClientID(b[8:])
	if err != nil {
		return nil, nil, err
	}
	if req.IsFlexible() {
		if body, err = kafka.SkipTags(body); err != nil {
			return nil, nil, err
		}
	}
	if err := req.ReadFrom(body); err != nil {
		return nil, nil, fmt.Errorf("API key %d version %d: %w", key, version, err)
	}
	r := req.ResponseKind()
	r.SetVersion(version)
	switch q := req.(type) {
	case *kmsg.ApiVersionsRequest:
		r.(*kmsg.ApiVersionsResponse).ApiKeys = noopKafkaVersions()
	case *kmsg.MetadataRequest:
		s.metadata(q, r.(*kmsg.MetadataResponse))
	case *kmsg.CreateTopicsRequest:
		p := r.(*kmsg.CreateTopicsResponse)
		s.topicsMu.Lock()
		for _, t := range q.Topics {
			rt := kmsg.NewCreateTopicsResponseTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = t.Topic, max(t.NumPartitions, 1), 1
			if _, ok := s.topics[t.Topic]; ok {
				rt.ErrorCode = 36 // TOPIC_ALREADY_EXISTS
			} else {
				s.topics[t.Topic] = make([]int64, rt.NumPartitions)
				s.samples[t.Topic] = make([]noopSamples, rt.NumPartitions)
			}
			p.Topics = append(p.Topics, rt)
		}
		s.topicsMu.Unlock()
	case *kmsg.ListOffsetsRequest:
		p := r.(*kmsg.ListOffsetsResponse)
		s.topicsMu.Lock()
		for _, t := range q.Topics {
			rt := kmsg.NewListOffsetsResponseTopic()
			rt.Topic = t.Topic
			for _, part := range t.Partitions {
				rp := kmsg.NewListOffsetsResponseTopicPartition()
				rp.Partition = part.Partition
				offsets := s.topics[t.Topic]
				switch {
				case int(part.Partition) >= len(offsets) || part.Partition < 0:
					rp.ErrorCode = 3 // UNKNOWN_TOPIC_OR_PARTITION
				case part.Timestamp == -2: // earliest
					rp.Offset = 0
				default: // latest (and any time: the no-op keeps none)
					rp.Offset = offsets[part.Partition]
				}
				rp.OldStyleOffsets = []int64{rp.Offset}
				rt.Partitions = append(rt.Partitions, rp)
			}
			p.Topics = append(p.Topics, rt)
		}
		s.topicsMu.Unlock()
	case *kmsg.InitProducerIDRequest:
		p := r.(*kmsg.InitProducerIDResponse)
		s.topicsMu.Lock()
		s.nextID++
		p.ProducerID, p.ProducerEpoch = s.nextID, 0
		s.topicsMu.Unlock()
	case *kmsg.FetchRequest:
		return nil, nil, s.fetch(c, corr, q, r.(*kmsg.FetchResponse))
	case *kmsg.ProduceRequest:
		p := r.(*kmsg.ProduceResponse)
		if data, err = s.produce(q, p); err != nil {
			return nil, nil, err
		}
		if q.Acks == 0 {
			return nil, data, nil
		}
	}
	return frameKafkaResponse(corr, r), data, nil
}

// noopKafkaVersions lists the versions served.
func noopKafkaVersions() []kmsg.ApiVersionsResponseApiKey {
	var keys []kmsg.ApiVersionsResponseApiKey
	for k, v := range noopKafkaAPIs {
		keys = append(keys, kmsg.ApiVersionsResponseApiKey{ApiKey: k, MinVersion: v[0], MaxVersion: min(v[1], kmsg.RequestForKey(k).MaxVersion())})
	}
	return keys
}

// metadata answers with this one broker leading every partition of the
// topics asked for (all, for a nil list); unknown topics are unknown.
func (s *noopKafka) metadata(q *kmsg.MetadataRequest, p *kmsg.MetadataResponse) {
	host, port, _ := net.SplitHostPort(s.Addr())
	portN, _ := strconv.Atoi(port)
	p.Brokers = []kmsg.MetadataResponseBroker{{NodeID: 0, Host: host, Port: int32(portN)}}
	p.ControllerID = 0
	s.topicsMu.Lock()
	defer s.topicsMu.Unlock()
	var names []string
	if q.Topics == nil {
		for t := range s.topics {
			names = append(names, t)
		}
	}
	for _, t := range q.Topics {
		if t.Topic != nil {
			names = append(names, *t.Topic)
		}
	}
	for _, name := range names {
		rt := kmsg.NewMetadataResponseTopic()
		rt.Topic = kmsg.StringPtr(name)
		offsets, ok := s.topics[name]
		if !ok {
			rt.ErrorCode = 3 // UNKNOWN_TOPIC_OR_PARTITION
		}
		for i := range offsets {
			rp := kmsg.NewMetadataResponseTopicPartition()
			rp.Partition, rp.Leader, rp.Replicas, rp.ISR = int32(i), 0, []int32{0}, []int32{0}
			rt.Partitions = append(rt.Partitions, rp)
		}
		p.Topics = append(p.Topics, rt)
	}
}

// produce assigns offsets to the request's record batches and returns
// their bytes, to be stored.
func (s *noopKafka) produce(q *kmsg.ProduceRequest, p *kmsg.ProduceResponse) ([]byte, error) {
	var data []byte
	s.topicsMu.Lock()
	defer s.topicsMu.Unlock()
	for _, t := range q.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		offsets := s.topics[t.Topic]
		for _, part := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition = part.Partition
			if int(part.Partition) >= len(offsets) || part.Partition < 0 {
				rp.ErrorCode = 3 // UNKNOWN_TOPIC_OR_PARTITION
				rt.Partitions = append(rt.Partitions, rp)
				continue
			}
			n, err := countRecords(part.Records)
			if err != nil {
				return nil, fmt.Errorf("produce to %s/%d: %w", t.Topic, part.Partition, err)
			}
			s.samples[t.Topic][part.Partition].add(part.Records)
			rp.BaseOffset = offsets[part.Partition]
			rp.LogAppendTime = -1
			offsets[part.Partition] += n
			data = append(data, part.Records...)
			rt.Partitions = append(rt.Partitions, rp)
		}
		p.Topics = append(p.Topics, rt)
	}
	return data, nil
}

// fetch answers q on c (see noopKafka) once c has no response waiting in
// the store.
func (s *noopKafka) fetch(c *noopConn, corr uint32, q *kmsg.FetchRequest, p *kmsg.FetchResponse) error {
	maxBytes := int(q.MaxBytes)
	if maxBytes <= 0 {
		maxBytes = noopKafkaMaxRequest
	}
	var batches [][][]byte
	total := 0
	for {
		p.Topics, batches, total = p.Topics[:0], batches[:0], 0
		s.topicsMu.Lock()
		for _, t := range q.Topics {
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic = t.Topic
			offsets, samples := s.topics[t.Topic], s.samples[t.Topic]
			for _, part := range t.Partitions {
				rp := kmsg.NewFetchResponseTopicPartition()
				rp.Partition = part.Partition
				var pieces [][]byte
				switch {
				case int(part.Partition) >= len(offsets) || part.Partition < 0:
					rp.ErrorCode = 3 // UNKNOWN_TOPIC_OR_PARTITION
				case part.FetchOffset < 0 || part.FetchOffset > offsets[part.Partition]:
					rp.ErrorCode = 1 // OFFSET_OUT_OF_RANGE
				default:
					end := offsets[part.Partition]
					rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = end, end, 0
					budget := min(int(part.PartitionMaxBytes), maxBytes-total)
					var size int
					pieces, size = samples[part.Partition].fetch(part.FetchOffset, end, budget, total == 0)
					total += size
				}
				rt.Partitions = append(rt.Partitions, rp)
				batches = append(batches, pieces)
			}
			p.Topics = append(p.Topics, rt)
		}
		s.topicsMu.Unlock()
		if total > 0 || int(q.MinBytes) <= 0 {
			break
		}
		wait := min(time.Duration(q.MaxWaitMillis)*time.Millisecond, noopFetchMaxWait)
		if wait <= 0 {
			break
		}
		time.Sleep(wait) // nothing is produced while consumers read here
		q.MaxWaitMillis = 0
	}
	_, bufs, err := kafka.AppendFetchFrame(nil, nil, int32(corr), p, batches)
	if err != nil {
		return err
	}
	// The responses before this one, in the store, go first.
	if err := s.store.awaitReplies(c); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err = bufs.WriteTo(c.c)
	return err
}

// fetch returns the pieces of the batches for offsets from up to end,
// within budget bytes (with first, at least one batch), and their size:
// each batch an 8-byte base offset, then a sample after its own, samples
// in turn from one picked by from. The last is cut to the records left.
func (s *noopSamples) fetch(from, end int64, budget int, first bool) ([][]byte, int) {
	if len(s.batches) == 0 {
		return nil, 0
	}
	var pieces [][]byte
	size := 0
	for off, i := from, int(from%int64(len(s.batches))); off < end; i = (i + 1) % len(s.batches) {
		b, n := s.batches[i].b, s.batches[i].n
		if end-off < n {
			if b, n = cutBatch(b, end-off); b == nil {
				break // not decodable: the records left are not sent
			}
		}
		if len(b) > budget-size && (size > 0 || !first) {
			break
		}
		pieces = append(pieces, binary.BigEndian.AppendUint64(nil, uint64(off)), b[8:])
		size += len(b)
		off += n
	}
	return pieces, size
}

// cutBatch returns a batch of the first n records of batch (n less than
// its count); nil if batch cannot be decoded or holds fewer.
func cutBatch(batch []byte, n int64) ([]byte, int64) {
	h, recs, err := broker.ReadRecords(batch, noopKafkaMaxRequest)
	if err != nil || int64(len(recs)) < n {
		return nil, 0
	}
	return broker.AppendRecordBatch(nil, h, recs[:n]), n
}

// countRecords counts the records of a partition's record batches (v2):
// each batch's last offset delta plus one.
func countRecords(b []byte) (int64, error) {
	var n int64
	for len(b) > 0 {
		batch, count, err := firstBatch(b)
		if err != nil {
			return 0, err
		}
		n += count
		b = b[len(batch):]
	}
	return n, nil
}

// firstBatch returns the record batch (v2) b starts with and its record
// count (its last offset delta plus one).
func firstBatch(b []byte) ([]byte, int64, error) {
	if len(b) < 61 || b[16] != 2 {
		return nil, 0, errors.New("not a record batch of magic 2")
	}
	size := 12 + int64(int32(binary.BigEndian.Uint32(b[8:])))
	if size < 61 || size > int64(len(b)) {
		return nil, 0, fmt.Errorf("record batch of %d bytes in %d", size, len(b))
	}
	return b[:size], int64(int32(binary.BigEndian.Uint32(b[23:]))) + 1, nil
}

// frameKafkaResponse returns r framed: size, correlation id, the header's
// tags when flexible (never for ApiVersions), the body.
func frameKafkaResponse(corr uint32, r kmsg.Response) []byte {
	out := make([]byte, 8, 64)
	binary.BigEndian.PutUint32(out[4:], corr)
	if r.IsFlexible() && r.Key() != 18 {
		out = append(out, 0)
	}
	out = r.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out
}
