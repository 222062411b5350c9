package pulsar

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/msgpb"
	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/protocol/pulsar/frame"
	pb "github.com/magnetar-io/magnetar/protocol/pulsar/pulsarpb"
)

// maxProtocolVersion is the newest protocol version the broker speaks;
// CONNECTED answers min(client's, this).
const maxProtocolVersion = int32(pb.ProtocolVersion_v21)

// requestTimeout bounds the slow commands (topic loads, subscriptions).
const requestTimeout = 30 * time.Second

// maxQueued is how many bytes may wait for the writer before the
// connection is considered stuck and closed (consumers are bounded by
// their permits, so only a client that stops reading gets here).
const maxQueued = 256 << 20

type conn struct {
	srv *Server
	nc  net.Conn
	log *slog.Logger

	ctx    context.Context // ends when the connection closes
	cancel context.CancelFunc

	// out is what waits to be written; the writer swaps it for spare.
	outMu    sync.Mutex
	out      []byte
	spare    []byte
	outReady chan struct{}
	outErr   error
	writing  bool // the writer holds a buffer it has not finished writing

	// frameRead is when the frame being handled was read (the reader's
	// own: handleSend times a publish from it).
	frameRead time.Time

	mu              sync.Mutex
	connected       bool
	version         int32
	entryMetadata   bool // the client takes broker entry metadata
	producers       map[uint64]*producer
	consumers       map[uint64]*consumer
	lastRead        time.Time
	closeOnce       sync.Once
	pendingRequests sync.WaitGroup
}

type producer struct {
	id     uint64
	p      *broker.Producer // nil while being created
	ready  chan struct{}
	closed bool
}

type consumer struct {
	id    uint64
	c     *broker.Consumer // nil while being created
	conn  *conn
	ready chan struct{}
	part  int32

	// The client drops ACTIVE_CONSUMER_CHANGE for a consumer it has not
	// seen SUCCESS for: the broker's notice is held until then.
	mu            sync.Mutex
	subscribed    bool
	pendingActive *bool
}

func newConn(s *Server, nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	return &conn{srv: s, nc: nc, ctx: ctx, cancel: cancel,
		log:       s.log.With("remote", nc.RemoteAddr().String()),
		outReady:  make(chan struct{}, 1),
		producers: map[uint64]*producer{}, consumers: map[uint64]*consumer{}}
}

func (c *conn) close() {
	c.closeOnce.Do(func() {
		c.cancel()
		c.nc.Close()
	})
}

// serve runs the connection until it ends, then detaches its producers
// and consumers.
func (c *conn) serve() {
	defer c.cleanup()
	go c.writeLoop()
	go c.keepAlive()
	r := frame.NewReader(bufio.NewReaderSize(c.nc, 64<<10), c.srv.cfg.MaxMessageSize+frame.FramePadding)
	r.SetRoom(ledger.AppendRoom) // a SEND's message is stored in place (handleSend)
	for {
		f, err := r.ReadFrame()
		if err != nil {
			var opErr *net.OpError
			switch {
			case c.ctx.Err() != nil, errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
			case errors.As(err, &opErr), errors.Is(err, io.ErrUnexpectedEOF):
				// The socket failed (reset by the client, a timeout) or
				// the client closed it mid-frame: not the protocol.
				c.log.Warn("pulsar: closing connection: read failed", "err", err)
			default:
				c.log.Warn("pulsar: closing connection: bad frame", "err", err)
			}
			return
		}
		c.frameRead = time.Now()
		c.mu.Lock()
		c.lastRead = c.frameRead
		c.mu.Unlock()
		if err := c.handle(f); err != nil {
			c.log.Warn("pulsar: closing connection", "err", err)
			return
		}
	}
}

func (c *conn) cleanup() {
	c.close()
	c.mu.Lock()
	producers := c.producers
	consumers := c.consumers
	c.producers, c.consumers = map[uint64]*producer{}, map[uint64]*consumer{}
	c.mu.Unlock()
	for _, p := range producers {
		if p.p != nil {
			p.p.Close()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, cs := range consumers {
		if cs.c != nil {
			if err := cs.c.Close(ctx); err != nil {
				c.log.Warn("pulsar: closing consumer", "err", err)
			}
		}
	}
}

// keepAlive pings the client when idle and closes the connection when it
// has been silent for two intervals — a connected client only once it was
// pinged and did not answer (a late tick must not skip the ping).
func (c *conn) keepAlive() {
	iv := c.srv.cfg.KeepAliveInterval
	t := time.NewTicker(iv)
	defer t.Stop()
	var pinged time.Time // last PING sent
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		last := c.lastRead
		connected := c.connected
		c.mu.Unlock()
		idle := time.Since(last)
		unanswered := pinged.After(last)
		if idle > 2*iv && (!connected || unanswered && time.Since(pinged) >= iv) {
			c.log.Warn("pulsar: closing connection: no traffic from the client", "silent-for", idle.Round(time.Second))
			c.close()
			return
		}
		if connected && idle >= iv && !unanswered {
			c.send(&pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
			pinged = time.Now()
		}
	}
}

// drain waits until nothing is queued for writing (or ctx ends, or the
// connection fails).
func (c *conn) drain(ctx context.Context) {
	for {
		c.outMu.Lock()
		empty := len(c.out) == 0 && !c.writing
		failed := c.outErr != nil
		c.outMu.Unlock()
		if empty || failed || c.ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Millisecond):
		}
	}
}

// writeLoop writes what is queued until the connection closes.
func (c *conn) writeLoop() {
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.outReady:
		}
		c.outMu.Lock()
		if len(c.out) == 0 {
			c.outMu.Unlock()
			continue
		}
		// Invariant: out and spare never share an array, so what is
		// queued while buf is written cannot touch buf.
		buf := c.out
		c.out = c.spare[:0]
		c.writing = true
		c.outMu.Unlock()
		if _, err := c.nc.Write(buf); err != nil {
			c.outMu.Lock()
			c.outErr = err
			c.outMu.Unlock()
			c.close()
			return
		}
		c.outMu.Lock()
		c.writing = false
		if cap(buf) <= 4<<20 {
			c.spare = buf[:0]
		} else {
			c.spare = nil
		}
		c.outMu.Unlock()
	}
}

// queue appends frames with enc (under the output lock) and wakes the
// writer.
func (c *conn) queue(enc func(dst []byte) ([]byte, error)) {
	c.outMu.Lock()
	if c.outErr != nil {
		c.outMu.Unlock()
		return
	}
	out, err := enc(c.out)
	if err != nil {
		c.outMu.Unlock()
		c.log.Error("pulsar: encoding a command", "err", err)
		return
	}
	c.out = out
	stuck := len(c.out) > maxQueued
	c.outMu.Unlock()
	if stuck {
		c.log.Warn("pulsar: closing connection: the client does not read", "queued-bytes", len(out))
		c.close()
		return
	}
	select {
	case c.outReady <- struct{}{}:
	default:
	}
}

func (c *conn) send(cmd *pb.BaseCommand) {
	c.queue(func(dst []byte) ([]byte, error) { return frame.AppendCommand(dst, cmd) })
}

func (c *conn) handle(f *frame.Frame) error {
	cmd := f.Cmd
	c.mu.Lock()
	connected := c.connected
	c.mu.Unlock()
	if !connected && cmd.GetType() != pb.BaseCommand_CONNECT {
		return fmt.Errorf("%v before CONNECT", cmd.GetType())
	}
	switch cmd.GetType() {
	case pb.BaseCommand_CONNECT:
		return c.handleConnect(cmd.Connect)
	case pb.BaseCommand_PING:
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}})
	case pb.BaseCommand_PONG:
	case pb.BaseCommand_SEND:
		c.handleSend(f)
	case pb.BaseCommand_FLOW:
		if cs := c.consumer(cmd.Flow.GetConsumerId()); cs != nil {
			cs.c.Flow(cmd.Flow.GetMessagePermits())
		}
	case pb.BaseCommand_ACK:
		c.handleAck(cmd.Ack)
	case pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES:
		c.handleRedeliver(cmd.RedeliverUnacknowledgedMessages)
	case pb.BaseCommand_PARTITIONED_METADATA:
		c.async(func() { c.handlePartitionedMetadata(cmd.PartitionMetadata) })
	case pb.BaseCommand_LOOKUP:
		c.async(func() { c.handleLookup(cmd.LookupTopic) })
	case pb.BaseCommand_PRODUCER:
		c.handleProducer(cmd.Producer)
	case pb.BaseCommand_CLOSE_PRODUCER:
		c.handleCloseProducer(cmd.CloseProducer)
	case pb.BaseCommand_SUBSCRIBE:
		c.handleSubscribe(cmd.Subscribe)
	case pb.BaseCommand_CLOSE_CONSUMER:
		c.handleCloseConsumer(cmd.CloseConsumer)
	case pb.BaseCommand_UNSUBSCRIBE:
		c.handleUnsubscribe(cmd.Unsubscribe)
	case pb.BaseCommand_SEEK:
		c.handleSeek(cmd.Seek)
	case pb.BaseCommand_GET_LAST_MESSAGE_ID:
		c.async(func() { c.handleGetLastMessageID(cmd.GetLastMessageId) })
	case pb.BaseCommand_GET_TOPICS_OF_NAMESPACE:
		c.async(func() { c.handleTopicsOfNamespace(cmd.GetTopicsOfNamespace) })
	case pb.BaseCommand_GET_SCHEMA:
		c.async(func() { c.handleGetSchema(cmd.GetSchema) })
	case pb.BaseCommand_GET_OR_CREATE_SCHEMA:
		c.async(func() { c.handleGetOrCreateSchema(cmd.GetOrCreateSchema) })
	default:
		c.unsupported(cmd)
	}
	return nil
}

// async runs a slow command on its own goroutine.
func (c *conn) async(f func()) { go f() }

// unsupported answers a command the broker does not implement with an
// ERROR naming it (when the command has a request id to answer).
func (c *conn) unsupported(cmd *pb.BaseCommand) {
	c.log.Info("pulsar: command not supported", "command", cmd.GetType().String())
	id, ok := frame.RequestID(cmd)
	if !ok {
		return
	}
	c.sendError(id, pb.ServerError_NotAllowedError, fmt.Sprintf("command %s is not supported by this broker", cmd.GetType()))
}

func (c *conn) sendError(requestID uint64, code pb.ServerError, msg string) {
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{
		RequestId: proto.Uint64(requestID), Error: code.Enum(), Message: proto.String(msg)}})
}

func (c *conn) sendSuccess(requestID uint64) {
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: proto.Uint64(requestID)}})
}

// errorCode maps broker errors to the protocol's.
func errorCode(err error) pb.ServerError {
	switch {
	case errors.Is(err, broker.ErrTopicNotFound):
		return pb.ServerError_TopicNotFound
	case errors.Is(err, broker.ErrInvalidTopicName):
		return pb.ServerError_InvalidTopicName
	case errors.Is(err, broker.ErrProducerBusy):
		return pb.ServerError_ProducerBusy
	case errors.Is(err, broker.ErrConsumerBusy), errors.Is(err, broker.ErrSubscriptionBusy), errors.Is(err, broker.ErrSubscriptionType):
		return pb.ServerError_ConsumerBusy
	case errors.Is(err, broker.ErrSubscriptionNotFound):
		return pb.ServerError_SubscriptionNotFound
	case errors.Is(err, broker.ErrIncompatibleSchema), errors.Is(err, broker.ErrInvalidSchema):
		return pb.ServerError_IncompatibleSchema
	case errors.Is(err, broker.ErrSchemaNotFound):
		return pb.ServerError_TopicNotFound
	case errors.Is(err, broker.ErrTopicTerminated):
		return pb.ServerError_TopicTerminatedError
	case errors.Is(err, broker.ErrInvalidRequest):
		return pb.ServerError_NotAllowedError
	case errors.Is(err, broker.ErrProducerBlockedQuotaExceeded):
		return pb.ServerError_ProducerBlockedQuotaExceededError
	case errors.Is(err, broker.ErrProducerBlockedQuotaException):
		return pb.ServerError_ProducerBlockedQuotaExceededException
	case errors.Is(err, broker.ErrTopicClosed), errors.Is(err, broker.ErrBrokerClosed),
		errors.Is(err, broker.ErrNotOwner), errors.Is(err, broker.ErrBundleUnloading),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, broker.ErrDuplicateUnknown):
		return pb.ServerError_ServiceNotReady
	}
	return pb.ServerError_PersistenceError
}

func (c *conn) handleConnect(m *pb.CommandConnect) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.connected {
		return errors.New("second CONNECT")
	}
	c.connected = true
	c.version = min(m.GetProtocolVersion(), maxProtocolVersion)
	c.entryMetadata = m.GetFeatureFlags().GetSupportsBrokerEntryMetadata()
	c.log = c.log.With("client", m.GetClientVersion())
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_CONNECTED.Enum(), Connected: &pb.CommandConnected{
		ServerVersion:   proto.String(c.srv.cfg.ServerVersion),
		ProtocolVersion: proto.Int32(c.version),
		MaxMessageSize:  proto.Int32(int32(c.srv.cfg.MaxMessageSize)),
		FeatureFlags:    &pb.FeatureFlags{SupportsBrokerEntryMetadata: proto.Bool(true)},
	}})
	return nil
}

func (c *conn) topicName(s string) (broker.TopicName, error) {
	return broker.ParseTopicName(s)
}

func (c *conn) handlePartitionedMetadata(m *pb.CommandPartitionedTopicMetadata) {
	reply := func(n int, err error) {
		r := &pb.CommandPartitionedTopicMetadataResponse{RequestId: proto.Uint64(m.GetRequestId())}
		if err != nil {
			r.Response = pb.CommandPartitionedTopicMetadataResponse_Failed.Enum()
			r.Error = errorCode(err).Enum()
			r.Message = proto.String(err.Error())
		} else {
			r.Response = pb.CommandPartitionedTopicMetadataResponse_Success.Enum()
			r.Partitions = proto.Uint32(uint32(n))
		}
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA_RESPONSE.Enum(), PartitionMetadataResponse: r})
	}
	t, err := c.topicName(m.GetTopic())
	if err != nil {
		reply(0, err)
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
	defer cancel()
	reply(c.srv.cfg.Broker.Partitions(ctx, t))
}

func (c *conn) handleLookup(m *pb.CommandLookupTopic) {
	r := &pb.CommandLookupTopicResponse{RequestId: proto.Uint64(m.GetRequestId())}
	t, err := c.topicName(m.GetTopic())
	var l broker.Lookup
	if err == nil {
		ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
		l, err = c.srv.cfg.Broker.LookupTopic(ctx, t, m.GetAuthoritative())
		cancel()
	}
	switch {
	case err != nil:
		r.Response = pb.CommandLookupTopicResponse_Failed.Enum()
		r.Error = errorCode(err).Enum()
		r.Message = proto.String(err.Error())
	case l.Self:
		r.Response = pb.CommandLookupTopicResponse_Connect.Enum()
		r.BrokerServiceUrl = proto.String(c.srv.cfg.AdvertisedURL)
		r.Authoritative = proto.Bool(true)
	default:
		// The owner, or the broker chosen to own it: the client asks it
		// again, with authority, and it takes the topic if it must.
		r.Response = pb.CommandLookupTopicResponse_Redirect.Enum()
		r.BrokerServiceUrl = proto.String(l.Owner.PulsarURL)
		r.Authoritative = proto.Bool(true)
	}
	r.ProxyThroughServiceUrl = proto.Bool(false)
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: r})
}

func (c *conn) handleTopicsOfNamespace(m *pb.CommandGetTopicsOfNamespace) {
	ns := m.GetNamespace()
	tenant, name, ok := cutNamespace(ns)
	if !ok {
		c.sendError(m.GetRequestId(), pb.ServerError_MetadataError, fmt.Sprintf("invalid namespace %q: want tenant/namespace", ns))
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
	defer cancel()
	topics, err := c.srv.cfg.Broker.TopicsOfNamespace(ctx, tenant, name)
	if err != nil {
		c.sendError(m.GetRequestId(), errorCode(err), err.Error())
		return
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE.Enum(),
		GetTopicsOfNamespaceResponse: &pb.CommandGetTopicsOfNamespaceResponse{
			RequestId: proto.Uint64(m.GetRequestId()), Topics: topics,
			Filtered: proto.Bool(false), Changed: proto.Bool(true)}})
}

func cutNamespace(ns string) (tenant, name string, ok bool) {
	for i := 0; i < len(ns); i++ {
		if ns[i] == '/' {
			tenant, name = ns[:i], ns[i+1:]
			return tenant, name, tenant != "" && name != ""
		}
	}
	return "", "", false
}

// ---- producers

type producerSink struct {
	c  *conn
	id uint64
}

func (s producerSink) Closed() {
	s.c.mu.Lock()
	if p, ok := s.c.producers[s.id]; ok && p.p != nil {
		delete(s.c.producers, s.id)
	}
	s.c.mu.Unlock()
	s.c.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{
		ProducerId: proto.Uint64(s.id), RequestId: proto.Uint64(0)}})
}

func (c *conn) handleProducer(m *pb.CommandProducer) {
	id, reqID := m.GetProducerId(), m.GetRequestId()
	c.mu.Lock()
	if p, ok := c.producers[id]; ok {
		c.mu.Unlock()
		// A retry of a PRODUCER already handled or under way: answer it
		// the same way once the first one is done.
		go func() {
			select {
			case <-p.ready:
			case <-c.ctx.Done():
				return
			}
			if p.p == nil {
				c.sendError(reqID, pb.ServerError_ServiceNotReady, "producer is being created")
				return
			}
			c.producerSuccess(reqID, p.p)
		}()
		return
	}
	p := &producer{id: id, ready: make(chan struct{})}
	c.producers[id] = p
	c.mu.Unlock()
	go func() {
		bp, err := c.createProducer(m)
		c.mu.Lock()
		if err != nil || c.producers[id] != p {
			if c.producers[id] == p {
				delete(c.producers, id)
			}
			c.mu.Unlock()
			close(p.ready)
			if err == nil {
				bp.Close() // closed by the client meanwhile
				err = errors.New("producer closed while being created")
			}
			c.log.Info("pulsar: producer refused", "topic", m.GetTopic(), "err", err)
			c.sendError(reqID, errorCode(err), err.Error())
			return
		}
		p.p = bp
		c.mu.Unlock()
		close(p.ready)
		c.producerSuccess(reqID, bp)
	}()
}

func (c *conn) createProducer(m *pb.CommandProducer) (*broker.Producer, error) {
	t, err := c.topicName(m.GetTopic())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
	defer cancel()
	topic, err := c.srv.cfg.Broker.Topic(ctx, t, true)
	if err != nil {
		return nil, err
	}
	o := broker.ProducerOptions{AccessMode: broker.AccessMode(m.GetProducerAccessMode()),
		Sink: producerSink{c, m.GetProducerId()}}
	if m.GetUserProvidedProducerName() || m.ProducerName != nil {
		o.Name = m.GetProducerName()
	}
	if s := m.GetSchema(); s != nil {
		sc := schemaOf(s)
		o.Schema = &sc
	}
	return topic.AddProducer(ctx, o)
}

func (c *conn) producerSuccess(reqID uint64, p *broker.Producer) {
	r := &pb.CommandProducerSuccess{RequestId: proto.Uint64(reqID), ProducerName: proto.String(p.Name()),
		LastSequenceId: proto.Int64(p.LastSequenceID()), ProducerReady: proto.Bool(true)}
	if v := p.SchemaVersion(); v >= 0 {
		r.SchemaVersion = broker.EncodeSchemaVersion(v)
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: r})
}

func (c *conn) handleCloseProducer(m *pb.CommandCloseProducer) {
	c.mu.Lock()
	p := c.producers[m.GetProducerId()]
	delete(c.producers, m.GetProducerId())
	c.mu.Unlock()
	if p != nil && p.p != nil {
		p.p.Close()
	}
	c.sendSuccess(m.GetRequestId())
}

func (c *conn) handleSend(f *frame.Frame) {
	m := f.Cmd.Send
	pid, seq := m.GetProducerId(), m.GetSequenceId()
	c.mu.Lock()
	p := c.producers[pid]
	c.mu.Unlock()
	if p == nil || p.p == nil {
		c.sendSendError(pid, seq, pb.ServerError_ProducerBusy, fmt.Sprintf("producer %d is not ready on this connection", pid))
		return
	}
	if f.HeadersAndPayload == nil {
		c.sendSendError(pid, seq, pb.ServerError_UnknownError, "SEND without a message")
		return
	}
	if !f.ChecksumOK() {
		c.log.Warn("pulsar: SEND with a bad checksum refused", "producer", p.p.Name(), "sequence-id", seq)
		c.sendSendError(pid, seq, pb.ServerError_ChecksumError, "checksum of metadata and payload does not match")
		return
	}
	if m.TxnidMostBits != nil || m.TxnidLeastBits != nil {
		c.sendSendError(pid, seq, pb.ServerError_NotAllowedError, "transactions are not supported by this broker")
		return
	}
	if m.GetIsChunk() {
		c.sendSendError(pid, seq, pb.ServerError_NotAllowedError, "chunked messages are not supported by this broker yet")
		return
	}
	inBatch, batched, err := frame.MessagesInBatch(f.HeadersAndPayload)
	if err != nil {
		c.log.Warn("pulsar: SEND with malformed metadata refused", "producer", p.p.Name(), "err", err)
		c.sendSendError(pid, seq, pb.ServerError_UnknownError, "malformed message metadata: "+err.Error())
		return
	}
	n := m.GetNumMessages()
	if batched {
		n = inBatch
	}
	if n < 1 {
		n = 1
	}
	data, framed := f.HeadersAndPayload, f.WithRoom(ledger.AppendRoom)
	var tail ledger.TailCRC
	if crc, from, ok := f.Checksum(); !ok {
		// A client older than protocol v6 sent no checksum: store one, as
		// today's clients refuse messages without it.
		data, framed = withChecksum(data), nil
	} else if framed != nil {
		// Verified above: the stored entry's checksum is combined from it.
		tail = ledger.TailCRC{From: ledger.AppendRoom + from, CRC: crc}
	}
	req := broker.PublishRequest{SequenceID: int64(seq), HighestSequenceID: int64(m.GetHighestSequenceId()),
		Messages: n, Data: data, Framed: framed, FramedTail: tail}
	// Not m itself: the frame reader reuses it for the next SEND.
	highest, hasHighest := m.GetHighestSequenceId(), m.HighestSequenceId != nil
	read, latency := c.frameRead, c.srv.cfg.PublishLatency
	p.p.Publish(req, func(r broker.PublishResult) {
		if r.Err != nil {
			c.sendSendError(pid, seq, errorCode(r.Err), r.Err.Error())
			return
		}
		receipt := frame.Receipt{ProducerID: pid, SequenceID: seq,
			HighestSequenceID: highest, HasHighest: hasHighest,
			Ledger: uint64(r.ID.Position.Ledger), Entry: uint64(r.ID.Position.Entry), Partition: r.ID.Partition}
		if latency != nil {
			latency.Observe(time.Since(read).Seconds())
		}
		c.queue(func(dst []byte) ([]byte, error) { return frame.AppendSendReceipt(dst, receipt), nil })
	})
}

// sendSendError answers producer pid's SEND seq with SEND_ERROR. (A method,
// not a closure: handleSend's callback would carry it to the heap on
// every SEND.)
func (c *conn) sendSendError(pid, seq uint64, code pb.ServerError, msg string) {
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_SEND_ERROR.Enum(), SendError: &pb.CommandSendError{
		ProducerId: proto.Uint64(pid), SequenceId: proto.Uint64(seq), Error: code.Enum(), Message: proto.String(msg)}})
}

// ---- consumers

type consumerSink struct {
	c  *conn
	id uint64
	cs *consumer
}

// maxConvertedSize bounds the decompressed records of a Kafka batch
// converted for a Pulsar consumer.
const maxConvertedSize = 64 << 20

func (s *consumerSink) Send(ds []broker.Delivery) {
	c := s.c
	c.mu.Lock()
	bem := c.entryMetadata
	c.mu.Unlock()
	c.queue(func(dst []byte) ([]byte, error) {
		var err error
		for i := range ds {
			d := &ds[i]
			e := d.Entry
			msg := &pb.CommandMessage{ConsumerId: proto.Uint64(s.id), MessageId: &pb.MessageIdData{
				LedgerId: proto.Uint64(uint64(e.Position.Ledger)), EntryId: proto.Uint64(uint64(e.Position.Entry))}}
			if s.cs.part >= 0 {
				msg.MessageId.Partition = proto.Int32(s.cs.part)
			}
			if d.RedeliveryCount > 0 {
				msg.RedeliveryCount = proto.Uint32(d.RedeliveryCount)
			}
			if d.AckSet != nil {
				msg.AckSet = d.AckSet
			}
			var meta []byte
			if bem {
				meta, err = proto.Marshal(&msgpb.BrokerEntryMetadata{
					BrokerTimestamp: proto.Uint64(uint64(e.Header.PublishTime)),
					Index:           proto.Uint64(uint64(e.Header.NextOffset() - 1))})
				if err != nil {
					return dst, err
				}
			}
			payload, perr := broker.PulsarPayload(e, maxConvertedSize) // Kafka batches are converted
			if perr != nil {
				c.log.Error("pulsar: stored entry cannot be sent to a consumer; skipped", "entry", e.Position.String(), "err", perr)
				continue
			}
			dst, err = frame.AppendMessage(dst, &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: msg}, meta, payload)
			if err != nil {
				return dst, err
			}
		}
		return dst, nil
	})
}

func (s *consumerSink) ActiveChanged(active bool) {
	s.cs.mu.Lock()
	defer s.cs.mu.Unlock()
	if !s.cs.subscribed {
		s.cs.pendingActive = &active
		return
	}
	s.c.sendActive(s.id, active)
}

func (c *conn) sendActive(id uint64, active bool) {
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_ACTIVE_CONSUMER_CHANGE.Enum(), ActiveConsumerChange: &pb.CommandActiveConsumerChange{
		ConsumerId: proto.Uint64(id), IsActive: proto.Bool(active)}})
}

func (s *consumerSink) Closed() {
	s.c.mu.Lock()
	if cs, ok := s.c.consumers[s.id]; ok && cs == s.cs {
		delete(s.c.consumers, s.id)
	}
	s.c.mu.Unlock()
	s.c.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{
		ConsumerId: proto.Uint64(s.id), RequestId: proto.Uint64(0)}})
}

// consumer returns the ready consumer id, or nil.
func (c *conn) consumer(id uint64) *consumer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cs := c.consumers[id]; cs != nil && cs.c != nil {
		return cs
	}
	return nil
}

func (c *conn) handleSubscribe(m *pb.CommandSubscribe) {
	id, reqID := m.GetConsumerId(), m.GetRequestId()
	c.mu.Lock()
	if cs, ok := c.consumers[id]; ok {
		c.mu.Unlock()
		go func() {
			select {
			case <-cs.ready:
			case <-c.ctx.Done():
				return
			}
			if cs.c == nil {
				c.sendError(reqID, pb.ServerError_ServiceNotReady, "consumer is being created")
				return
			}
			c.sendSuccess(reqID)
		}()
		return
	}
	cs := &consumer{id: id, conn: c, ready: make(chan struct{}), part: -1}
	c.consumers[id] = cs
	c.mu.Unlock()
	go func() {
		bc, err := c.createConsumer(m, cs)
		c.mu.Lock()
		if err != nil || c.consumers[id] != cs {
			if c.consumers[id] == cs {
				delete(c.consumers, id)
			}
			c.mu.Unlock()
			close(cs.ready)
			if err == nil {
				bc.Close(context.Background())
				err = errors.New("consumer closed while being created")
			}
			c.log.Info("pulsar: subscription refused", "topic", m.GetTopic(), "subscription", m.GetSubscription(), "err", err)
			c.sendError(reqID, errorCode(err), err.Error())
			return
		}
		cs.c = bc
		c.mu.Unlock()
		close(cs.ready)
		cs.mu.Lock()
		c.sendSuccess(reqID)
		cs.subscribed = true
		if cs.pendingActive != nil {
			c.sendActive(id, *cs.pendingActive)
			cs.pendingActive = nil
		}
		cs.mu.Unlock()
	}()
}

func (c *conn) createConsumer(m *pb.CommandSubscribe, cs *consumer) (*broker.Consumer, error) {
	t, err := c.topicName(m.GetTopic())
	if err != nil {
		return nil, err
	}
	cs.part = int32(t.Partition)
	ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
	defer cancel()
	create := m.ForceTopicCreation == nil || m.GetForceTopicCreation()
	topic, err := c.srv.cfg.Broker.Topic(ctx, t, create)
	if err != nil {
		return nil, err
	}
	if s := m.GetSchema(); s != nil && s.GetType() != pb.Schema_None {
		// A topic with a schema: the consumer's must be able to read it;
		// a topic without one takes the consumer's (as Pulsar does for an
		// idle topic).
		reg := c.srv.cfg.Broker.Schemas()
		_, _, err := reg.Get(ctx, t, -1)
		switch {
		case errors.Is(err, broker.ErrSchemaNotFound):
			_, err = reg.GetOrCreate(ctx, t, schemaOf(s))
		case err == nil:
			err = reg.CheckConsumerSchema(ctx, t, schemaOf(s))
		}
		if err != nil {
			return nil, err
		}
	}
	o := broker.SubscribeOptions{
		Subscription: m.GetSubscription(),
		Type:         broker.SubType(m.GetSubType()),
		ConsumerName: m.GetConsumerName(),
		Priority:     m.GetPriorityLevel(),
		Initial:      broker.InitialPosition(m.GetInitialPosition()),
		Durable:      m.Durable == nil || m.GetDurable(),
		Sink:         &consumerSink{c: c, id: m.GetConsumerId(), cs: cs},
	}
	if id := m.GetStartMessageId(); id != nil {
		mid := messageID(id)
		o.StartMessageID = &mid
	}
	if ks := m.GetKeySharedMeta(); ks != nil && ks.GetKeySharedMode() == pb.KeySharedMode_STICKY {
		o.StickyRanges = []broker.HashRange{}
		for _, r := range ks.GetHashRanges() {
			o.StickyRanges = append(o.StickyRanges, broker.HashRange{Start: r.GetStart(), End: r.GetEnd()})
		}
	}
	return topic.Subscribe(ctx, o)
}

func messageID(id *pb.MessageIdData) broker.MessageID {
	mid := broker.MessageID{BatchIndex: -1, Partition: -1}
	mid.Position.Ledger = int64(id.GetLedgerId())
	mid.Position.Entry = int64(id.GetEntryId())
	if id.BatchIndex != nil {
		mid.BatchIndex = id.GetBatchIndex()
	}
	if id.Partition != nil {
		mid.Partition = id.GetPartition()
	}
	return mid
}

func (c *conn) handleCloseConsumer(m *pb.CommandCloseConsumer) {
	c.mu.Lock()
	cs := c.consumers[m.GetConsumerId()]
	delete(c.consumers, m.GetConsumerId())
	c.mu.Unlock()
	go func() {
		if cs != nil {
			select {
			case <-cs.ready:
			case <-c.ctx.Done():
			}
			if cs.c != nil {
				ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
				defer cancel()
				if err := cs.c.Close(ctx); err != nil {
					c.log.Warn("pulsar: closing consumer", "err", err)
				}
			}
		}
		c.sendSuccess(m.GetRequestId())
	}()
}

func (c *conn) handleUnsubscribe(m *pb.CommandUnsubscribe) {
	cs := c.consumer(m.GetConsumerId())
	if cs == nil {
		c.sendError(m.GetRequestId(), pb.ServerError_ConsumerNotFound, fmt.Sprintf("consumer %d not found", m.GetConsumerId()))
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
		defer cancel()
		if err := cs.c.Unsubscribe(ctx); err != nil {
			c.sendError(m.GetRequestId(), errorCode(err), err.Error())
			return
		}
		c.mu.Lock()
		if c.consumers[m.GetConsumerId()] == cs {
			delete(c.consumers, m.GetConsumerId())
		}
		c.mu.Unlock()
		c.sendSuccess(m.GetRequestId())
	}()
}

func (c *conn) handleAck(m *pb.CommandAck) {
	cs := c.consumer(m.GetConsumerId())
	if cs == nil {
		if m.RequestId != nil {
			c.ackResponse(m, pb.ServerError_ConsumerNotFound, "consumer not found")
		}
		return
	}
	acks := make([]broker.Ack, 0, len(m.GetMessageId()))
	for _, id := range m.GetMessageId() {
		a := broker.Ack{}
		a.Position.Ledger, a.Position.Entry = int64(id.GetLedgerId()), int64(id.GetEntryId())
		if len(id.GetAckSet()) > 0 {
			a.AckSet = id.GetAckSet()
		}
		acks = append(acks, a)
	}
	err := cs.c.Ack(m.GetAckType() == pb.CommandAck_Cumulative, acks)
	if err != nil {
		c.log.Warn("pulsar: acknowledgement failed", "err", err)
	}
	if m.RequestId != nil {
		if err != nil {
			c.ackResponse(m, errorCode(err), err.Error())
		} else {
			c.ackResponse(m, 0, "")
		}
	}
}

func (c *conn) ackResponse(m *pb.CommandAck, code pb.ServerError, msg string) {
	r := &pb.CommandAckResponse{ConsumerId: proto.Uint64(m.GetConsumerId()), RequestId: proto.Uint64(m.GetRequestId())}
	if msg != "" {
		r.Error, r.Message = code.Enum(), proto.String(msg)
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_ACK_RESPONSE.Enum(), AckResponse: r})
}

func (c *conn) handleRedeliver(m *pb.CommandRedeliverUnacknowledgedMessages) {
	cs := c.consumer(m.GetConsumerId())
	if cs == nil {
		return
	}
	var ps []ledger.Position
	for _, id := range m.GetMessageIds() {
		ps = append(ps, ledger.Position{Ledger: int64(id.GetLedgerId()), Entry: int64(id.GetEntryId())})
	}
	cs.c.Redeliver(ps)
}

func (c *conn) handleSeek(m *pb.CommandSeek) {
	cs := c.consumer(m.GetConsumerId())
	if cs == nil {
		c.sendError(m.GetRequestId(), pb.ServerError_ConsumerNotFound, fmt.Sprintf("consumer %d not found", m.GetConsumerId()))
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
		defer cancel()
		var err error
		switch {
		case m.MessageId != nil:
			id := messageID(m.GetMessageId())
			err = cs.c.Seek(ctx, &id, time.Time{})
		case m.MessagePublishTime != nil:
			err = cs.c.Seek(ctx, nil, time.UnixMilli(int64(m.GetMessagePublishTime())))
		default:
			err = fmt.Errorf("%w: SEEK without a message id or time", broker.ErrInvalidRequest)
		}
		if err != nil {
			c.sendError(m.GetRequestId(), errorCode(err), err.Error())
			return
		}
		c.sendSuccess(m.GetRequestId())
	}()
}

func (c *conn) handleGetLastMessageID(m *pb.CommandGetLastMessageId) {
	cs := c.consumer(m.GetConsumerId())
	if cs == nil {
		c.sendError(m.GetRequestId(), pb.ServerError_ConsumerNotFound, fmt.Sprintf("consumer %d not found", m.GetConsumerId()))
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
	defer cancel()
	id, _, err := cs.c.Topic().LastMessageID(ctx)
	if err != nil {
		c.sendError(m.GetRequestId(), errorCode(err), err.Error())
		return
	}
	last := &pb.MessageIdData{LedgerId: proto.Uint64(uint64(id.Position.Ledger)), EntryId: proto.Uint64(uint64(id.Position.Entry))}
	if id.BatchIndex >= 0 {
		last.BatchIndex = proto.Int32(id.BatchIndex)
	}
	if id.Partition >= 0 {
		last.Partition = proto.Int32(id.Partition)
	}
	md := cs.c.Subscription().Cursor().MarkDeletePosition()
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_LAST_MESSAGE_ID_RESPONSE.Enum(), GetLastMessageIdResponse: &pb.CommandGetLastMessageIdResponse{
		RequestId: proto.Uint64(m.GetRequestId()), LastMessageId: last,
		ConsumerMarkDeletePosition: &pb.MessageIdData{LedgerId: proto.Uint64(uint64(md.Ledger)), EntryId: proto.Uint64(uint64(md.Entry))}}})
}

// ---- schemas

func schemaOf(s *pb.Schema) broker.Schema {
	props := map[string]string{}
	for _, kv := range s.GetProperties() {
		props[kv.GetKey()] = kv.GetValue()
	}
	return broker.Schema{Type: broker.SchemaType(s.GetType()), Data: s.GetSchemaData(), Properties: props}
}

func (c *conn) handleGetSchema(m *pb.CommandGetSchema) {
	reply := func(r *pb.CommandGetSchemaResponse) {
		r.RequestId = proto.Uint64(m.GetRequestId())
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_SCHEMA_RESPONSE.Enum(), GetSchemaResponse: r})
	}
	fail := func(err error) {
		reply(&pb.CommandGetSchemaResponse{ErrorCode: errorCode(err).Enum(), ErrorMessage: proto.String(err.Error())})
	}
	t, err := c.topicName(m.GetTopic())
	if err != nil {
		fail(err)
		return
	}
	version := broker.SchemaVersion(-1)
	if m.SchemaVersion != nil {
		if version, err = broker.DecodeSchemaVersion(m.GetSchemaVersion()); err != nil {
			fail(err)
			return
		}
	}
	ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
	defer cancel()
	s, v, err := c.srv.cfg.Broker.Schemas().Get(ctx, t, version)
	if err != nil {
		fail(err)
		return
	}
	reply(&pb.CommandGetSchemaResponse{Schema: schemaProto(t, s), SchemaVersion: broker.EncodeSchemaVersion(v)})
}

func schemaProto(t broker.TopicName, s broker.Schema) *pb.Schema {
	typ := pb.Schema_Type(s.Type)
	b := t.Base()
	out := &pb.Schema{Name: proto.String(b.Tenant + "/" + b.Namespace + "/" + b.Local), SchemaData: s.Data, Type: &typ}
	for k, v := range s.Properties {
		out.Properties = append(out.Properties, &msgpb.KeyValue{Key: proto.String(k), Value: proto.String(v)})
	}
	return out
}

func (c *conn) handleGetOrCreateSchema(m *pb.CommandGetOrCreateSchema) {
	reply := func(r *pb.CommandGetOrCreateSchemaResponse) {
		r.RequestId = proto.Uint64(m.GetRequestId())
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_OR_CREATE_SCHEMA_RESPONSE.Enum(), GetOrCreateSchemaResponse: r})
	}
	t, err := c.topicName(m.GetTopic())
	if err == nil && m.GetSchema() == nil {
		err = fmt.Errorf("%w: GET_OR_CREATE_SCHEMA without a schema", broker.ErrInvalidSchema)
	}
	var v broker.SchemaVersion
	if err == nil {
		ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
		defer cancel()
		v, err = c.srv.cfg.Broker.Schemas().GetOrCreate(ctx, t, schemaOf(m.GetSchema()))
	}
	if err != nil {
		reply(&pb.CommandGetOrCreateSchemaResponse{ErrorCode: errorCode(err).Enum(), ErrorMessage: proto.String(err.Error())})
		return
	}
	reply(&pb.CommandGetOrCreateSchemaResponse{SchemaVersion: broker.EncodeSchemaVersion(v)})
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// withChecksum prefixes a headers-and-payload block that has no checksum
// with the checksum magic and its CRC-32C.
func withChecksum(hp []byte) []byte {
	out := make([]byte, 0, 6+len(hp))
	out = binary.BigEndian.AppendUint16(out, frame.MagicChecksum)
	out = binary.BigEndian.AppendUint32(out, crc32.Checksum(hp, castagnoli))
	return append(out, hp...)
}
