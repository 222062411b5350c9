package pulsar

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/brokertest"
	"github.com/magnetar-io/magnetar/broker/msgpb"
	"github.com/magnetar-io/magnetar/protocol/pulsar/frame"
	pb "github.com/magnetar-io/magnetar/protocol/pulsar/pulsarpb"
)

func testLogger() *slog.Logger {
	if os.Getenv("PULSAR_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// testServer is a Pulsar server over a real broker, managed ledgers and
// one in-process bookie, on a loopback port.
type testServer struct {
	addr   string
	broker *broker.Broker
}

func startServer(t testing.TB, tweak func(*Config)) *testServer {
	t.Helper()
	log := testLogger()
	b := brokertest.Start(t, brokertest.Options{}).Broker
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Broker: b, AdvertisedURL: "pulsar://" + ln.Addr().String(), MaxMessageSize: 64 << 10, Logger: log}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return &testServer{addr: ln.Addr().String(), broker: b}
}

// rawClient speaks the protocol frame by frame.
type rawClient struct {
	t  testing.TB
	nc net.Conn
	r  *frame.Reader
}

func dial(t testing.TB, s *testServer) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawClient{t: t, nc: nc, r: frame.NewReader(nc, frame.DefaultMaxFrameSize)}
}

func (c *rawClient) write(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rawClient) send(cmd *pb.BaseCommand) {
	c.t.Helper()
	b, err := frame.AppendCommand(nil, cmd)
	if err != nil {
		c.t.Fatal(err)
	}
	c.write(b)
}

// read returns the next frame, skipping PINGs from the broker.
func (c *rawClient) read() *frame.Frame {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := c.r.ReadFrame()
		if err != nil {
			c.t.Fatalf("reading a frame: %v", err)
		}
		if f.Cmd.GetType() != pb.BaseCommand_PING {
			return f
		}
	}
}

// expectClosed checks that the broker closes the connection.
func (c *rawClient) expectClosed() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := c.r.ReadFrame()
		if err == nil {
			if f.Cmd.GetType() == pb.BaseCommand_PING {
				continue
			}
			c.t.Fatalf("got %v, want the connection closed", f.Cmd.GetType())
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.t.Fatal("connection still open after 10 s, want it closed")
		}
		return
	}
}

func (c *rawClient) connect() {
	c.t.Helper()
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
		ClientVersion: proto.String("raw-test"), ProtocolVersion: proto.Int32(21)}})
	f := c.read()
	if f.Cmd.GetType() != pb.BaseCommand_CONNECTED {
		c.t.Fatalf("got %v, want CONNECTED", f.Cmd.GetType())
	}
	if got := f.Cmd.Connected.GetMaxMessageSize(); got != 64<<10 {
		c.t.Fatalf("max_message_size %d, want %d", got, 64<<10)
	}
}

func (c *rawClient) producer(topic string, id uint64) {
	c.t.Helper()
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(id), RequestId: proto.Uint64(100 + id)}})
	f := c.read()
	if f.Cmd.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
		c.t.Fatalf("got %v (%v), want PRODUCER_SUCCESS", f.Cmd.GetType(), f.Cmd.Error)
	}
}

func sendFrame(t testing.TB, producer, seq uint64, payload []byte) []byte {
	t.Helper()
	b, err := frame.AppendPayloadCommand(nil,
		&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(producer), SequenceId: proto.Uint64(seq)}},
		&msgpb.MessageMetadata{ProducerName: proto.String("raw"), SequenceId: proto.Uint64(seq), PublishTime: proto.Uint64(uint64(time.Now().UnixMilli()))},
		payload)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func entriesOf(t *testing.T, s *testServer, topic string) int64 {
	t.Helper()
	tn, err := broker.ParseTopicName(topic)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := s.broker.Topic(context.Background(), tn, false)
	if err != nil {
		t.Fatal(err)
	}
	return tp.ManagedLedger().NumberOfEntries()
}

// A SEND whose checksum does not match is answered with SEND_ERROR
// (ChecksumError) and not stored; the connection goes on.
func TestSendWithBadChecksum(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s)
	c.connect()
	c.producer("checksum", 1)
	bad := sendFrame(t, 1, 0, []byte("hello"))
	bad[len(bad)-1] ^= 0xff
	c.write(bad)
	f := c.read()
	if f.Cmd.GetType() != pb.BaseCommand_SEND_ERROR || f.Cmd.SendError.GetError() != pb.ServerError_ChecksumError {
		t.Fatalf("got %v %v, want SEND_ERROR ChecksumError", f.Cmd.GetType(), f.Cmd.SendError)
	}
	c.write(sendFrame(t, 1, 1, []byte("hello")))
	f = c.read()
	if f.Cmd.GetType() != pb.BaseCommand_SEND_RECEIPT || f.Cmd.SendReceipt.GetSequenceId() != 1 {
		t.Fatalf("got %v, want SEND_RECEIPT for sequence id 1", f.Cmd)
	}
	if n := entriesOf(t, s, "checksum"); n != 1 {
		t.Fatalf("%d entries stored, want 1 (the bad SEND must not be stored)", n)
	}
}

// A SEND without the checksum block (clients before protocol v6) is stored
// with one, so that consumers can verify it.
func TestSendWithoutChecksumIsStoredWithOne(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s)
	c.connect()
	c.producer("nochecksum", 1)
	full := sendFrame(t, 1, 0, []byte("old client"))
	// Drop the magic and checksum (6 bytes after the command) and fix the
	// total size.
	cmdSize := binary.BigEndian.Uint32(full[4:8])
	at := 8 + int(cmdSize)
	stripped := append(append([]byte{}, full[:at]...), full[at+6:]...)
	binary.BigEndian.PutUint32(stripped, uint32(len(stripped)-4))
	c.write(stripped)
	if f := c.read(); f.Cmd.GetType() != pb.BaseCommand_SEND_RECEIPT {
		t.Fatalf("got %v, want SEND_RECEIPT", f.Cmd)
	}
	tn, _ := broker.ParseTopicName("nochecksum")
	tp, err := s.broker.Topic(context.Background(), tn, false)
	if err != nil {
		t.Fatal(err)
	}
	es, err := tp.ManagedLedger().Read(context.Background(), tp.ManagedLedger().FirstPosition(), 1)
	if err != nil || len(es) != 1 {
		t.Fatalf("read: %v, %d entries", err, len(es))
	}
	if got := binary.BigEndian.Uint16(es[0].Payload); got != frame.MagicChecksum {
		t.Fatalf("stored entry starts with %#x, want the checksum magic", got)
	}
	fr := &frame.Frame{HeadersAndPayload: es[0].Payload}
	if !fr.ChecksumOK() {
		t.Fatal("stored checksum does not verify")
	}
}

// Input that is not the protocol closes that connection only: the broker
// keeps serving others.
func TestBadInputClosesTheConnection(t *testing.T) {
	s := startServer(t, nil)
	cases := []struct {
		name  string
		input func(t *testing.T) []byte
	}{
		{"garbage", func(*testing.T) []byte { return []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n") }},
		{"command larger than the frame", func(*testing.T) []byte { return []byte{0, 0, 0, 8, 0, 0, 1, 0, 1, 2, 3, 4} }},
		{"frame over the limit", func(*testing.T) []byte {
			b := make([]byte, 8)
			binary.BigEndian.PutUint32(b, 64<<10+frame.FramePadding+1)
			return b
		}},
		{"command that does not decode", func(*testing.T) []byte {
			return []byte{0, 0, 0, 9, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0xff}
		}},
		{"command before CONNECT", func(t *testing.T) []byte {
			b, err := frame.AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{
				ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(10)}})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, s)
			c.write(tc.input(t))
			c.expectClosed()
		})
	}
	// Still serving.
	c := dial(t, s)
	c.connect()
	c.producer("after-bad-input", 1)
	c.write(sendFrame(t, 1, 0, []byte("ok")))
	if f := c.read(); f.Cmd.GetType() != pb.BaseCommand_SEND_RECEIPT {
		t.Fatalf("got %v, want SEND_RECEIPT", f.Cmd)
	}
}

// The log line of a closed connection says why: input that is not the
// protocol is a bad frame; a client resetting its connection, or closing
// it in the middle of a frame, is a failed read.
func TestClosedConnectionLogLine(t *testing.T) {
	var logs lockedBuffer
	s := startServer(t, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	c := dial(t, s)
	c.write([]byte{0, 0, 0, 8, 0, 0, 1, 0, 1, 2, 3, 4}) // command larger than the frame
	c.expectClosed()
	waitLog(t, &logs, "bad frame")

	c = dial(t, s)
	c.connect()
	c.write([]byte{0, 0}) // half a frame size, then a reset
	if err := c.nc.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	c.nc.Close()
	waitLog(t, &logs, "read failed")

	c = dial(t, s)
	c.connect()
	c.write([]byte{0, 0, 0, 20, 0, 0}) // a frame cut off by a close
	c.nc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(logs.String(), "read failed") < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := strings.Count(logs.String(), "read failed"); n != 2 {
		t.Fatalf("%d failed-read lines, want the reset's and the cut frame's:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "bad frame"); n != 1 {
		t.Fatalf("%d bad-frame lines, want the first connection's only:\n%s", n, logs.String())
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger and a test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitLog waits for a log line holding want.
func waitLog(t *testing.T, logs *lockedBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q:\n%s", want, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A message over the announced maximum closes the connection (Pulsar
// clients never send one: they check max_message_size first).
func TestMessageOverMaxSize(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s)
	c.connect()
	c.producer("big", 1)
	c.write(sendFrame(t, 1, 0, make([]byte, 64<<10+frame.FramePadding)))
	c.expectClosed()
	if n := entriesOf(t, s, "big"); n != 0 {
		t.Fatalf("%d entries stored, want 0", n)
	}
}

// Commands the broker does not implement get an ERROR naming them.
func TestUnsupportedCommandGetsError(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s)
	c.connect()
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_NEW_TXN.Enum(), NewTxn: &pb.CommandNewTxn{RequestId: proto.Uint64(77)}})
	f := c.read()
	if f.Cmd.GetType() != pb.BaseCommand_ERROR || f.Cmd.Error.GetRequestId() != 77 ||
		!strings.Contains(f.Cmd.Error.GetMessage(), "NEW_TXN") {
		t.Fatalf("got %v, want ERROR for request 77 naming NEW_TXN", f.Cmd)
	}
	// The connection goes on.
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	if f := c.read(); f.Cmd.GetType() != pb.BaseCommand_PONG {
		t.Fatalf("got %v, want PONG", f.Cmd.GetType())
	}
}

// Requests about things that do not exist get clear errors.
func TestErrors(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s)
	c.connect()

	c.write(sendFrame(t, 9, 0, []byte("no producer")))
	if f := c.read(); f.Cmd.GetType() != pb.BaseCommand_SEND_ERROR {
		t.Fatalf("SEND without a producer: got %v, want SEND_ERROR", f.Cmd)
	}

	c.send(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		Topic: proto.String("persistent://a/b/c/d/e"), RequestId: proto.Uint64(1)}})
	f := c.read()
	if f.Cmd.GetType() != pb.BaseCommand_LOOKUP_RESPONSE || f.Cmd.LookupTopicResponse.GetError() != pb.ServerError_InvalidTopicName {
		t.Fatalf("lookup of an invalid name: got %v, want InvalidTopicName", f.Cmd)
	}

	c.send(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		Topic: proto.String("fine"), RequestId: proto.Uint64(2)}})
	f = c.read()
	if f.Cmd.LookupTopicResponse.GetResponse() != pb.CommandLookupTopicResponse_Connect ||
		f.Cmd.LookupTopicResponse.GetBrokerServiceUrl() != "pulsar://"+s.addr {
		t.Fatalf("lookup: got %v, want Connect to pulsar://%s", f.Cmd, s.addr)
	}

	c.send(&pb.BaseCommand{Type: pb.BaseCommand_SEEK.Enum(), Seek: &pb.CommandSeek{
		ConsumerId: proto.Uint64(5), RequestId: proto.Uint64(3)}})
	f = c.read()
	if f.Cmd.GetType() != pb.BaseCommand_ERROR || f.Cmd.Error.GetError() != pb.ServerError_ConsumerNotFound {
		t.Fatalf("SEEK of an unknown consumer: got %v, want ERROR ConsumerNotFound", f.Cmd)
	}
}

// A client that stops talking is disconnected after two keep-alive
// intervals without traffic.
func TestIdleClientDisconnected(t *testing.T) {
	s := startServer(t, func(c *Config) { c.KeepAliveInterval = 100 * time.Millisecond })
	c := dial(t, s)
	start := time.Now() // before CONNECT, so at or before the broker's last read
	c.connect()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	pings := 0
	for {
		f, err := c.r.ReadFrame()
		if errors.Is(err, io.EOF) || (err != nil && !isTimeout(err)) {
			break
		}
		if err != nil {
			t.Fatal("still connected after 10 s")
		}
		if f.Cmd.GetType() == pb.BaseCommand_PING {
			pings++
		}
	}
	if pings == 0 {
		t.Fatal("no PING before the disconnection")
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("disconnected after %v, before two intervals", d)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
