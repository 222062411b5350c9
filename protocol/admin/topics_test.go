package admin

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/brokertest"
	"github.com/magnetar-io/magnetar/broker/msgpb"
	"github.com/magnetar-io/magnetar/ledger"
)

// topicsEnv is a real broker (meta/local store, one in-process bookie,
// managed ledgers) behind the REST API on an httptest server.
type topicsEnv struct {
	b   *broker.Broker
	url string
}

func newTopicsEnv(t *testing.T) *topicsEnv {
	t.Helper()
	log := quietLogger()
	b := brokertest.Start(t, brokertest.Options{Ledger: func(c *ledger.Config) {
		c.CursorFlushInterval, c.MinLedgerAge = 10*time.Millisecond, -1
	}}).Broker
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Listener: ln, Gatherer: newTestRegistry(t), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	if err := RegisterAPI(s, APIConfig{Broker: b, Cluster: "standalone", BrokerServiceURL: "pulsar://127.0.0.1:6650",
		WebServiceURL: "http://127.0.0.1:8080", Logger: log}); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.mux)
	t.Cleanup(hs.Close)
	return &topicsEnv{b: b, url: hs.URL}
}

// do sends a request and returns status, body and headers.
func (e *topicsEnv) do(t *testing.T, method, path, body string) (int, string, http.Header) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.url+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// expect checks a request's status and, if reason is not empty, that the
// error body's reason contains it.
func (e *topicsEnv) expect(t *testing.T, method, path, body string, status int, reason string) string {
	t.Helper()
	got, b, _ := e.do(t, method, path, body)
	if got != status {
		t.Fatalf("%s %s %s: status %d (%s); want %d", method, path, body, got, b, status)
	}
	if reason != "" {
		var r struct{ Reason string }
		if err := json.Unmarshal([]byte(b), &r); err != nil || !strings.Contains(r.Reason, reason) {
			t.Fatalf("%s %s: body %s; want a reason containing %q", method, path, b, reason)
		}
	}
	return b
}

func (e *topicsEnv) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	b := e.expect(t, "GET", path, "", http.StatusOK, "")
	if err := json.Unmarshal([]byte(b), v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, b)
	}
}

// pulsarEntry builds a stored Pulsar entry (checksum, metadata, payload).
func pulsarEntry(t *testing.T, seq uint64, payload []byte, props map[string]string, batch int) []byte {
	t.Helper()
	md := &msgpb.MessageMetadata{ProducerName: proto.String("prod"), SequenceId: proto.Uint64(seq),
		PublishTime: proto.Uint64(1_764_450_000_000)}
	for k, v := range props {
		md.Properties = append(md.Properties, &msgpb.KeyValue{Key: proto.String(k), Value: proto.String(v)})
	}
	body := payload
	if batch > 0 {
		md.NumMessagesInBatch = proto.Int32(int32(batch))
		body = nil
		for i := range batch {
			smd, err := proto.Marshal(&msgpb.SingleMessageMetadata{PayloadSize: proto.Int32(int32(len(payload) + 1))})
			if err != nil {
				t.Fatal(err)
			}
			body = binary.BigEndian.AppendUint32(body, uint32(len(smd)))
			body = append(body, smd...)
			body = append(body, payload...)
			body = append(body, byte('0'+i))
		}
	}
	mb, err := proto.Marshal(md)
	if err != nil {
		t.Fatal(err)
	}
	rest := binary.BigEndian.AppendUint32(nil, uint32(len(mb)))
	rest = append(append(rest, mb...), body...)
	out := binary.BigEndian.AppendUint16(nil, 0x0e01)
	out = binary.BigEndian.AppendUint32(out, crc32.Checksum(rest, crc32.MakeTable(crc32.Castagnoli)))
	return append(out, rest...)
}

type nopProducerSink struct{}

func (nopProducerSink) Closed() {}

type countingSink struct {
	mu     sync.Mutex
	n      int
	closed int
}

func (s *countingSink) Send(ds []broker.Delivery) { s.mu.Lock(); s.n += len(ds); s.mu.Unlock() }
func (s *countingSink) ActiveChanged(bool)        {}
func (s *countingSink) Closed()                   { s.mu.Lock(); s.closed++; s.mu.Unlock() }
func (s *countingSink) counts() (int, int)        { s.mu.Lock(); defer s.mu.Unlock(); return s.n, s.closed }

// publish stores entries on topic and returns their positions.
func (e *topicsEnv) publish(t *testing.T, topic string, entries ...[]byte) []ledger.Position {
	t.Helper()
	ctx := context.Background()
	tn, err := broker.ParseTopicName(topic)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := e.b.Topic(ctx, tn, true)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tp.AddProducer(ctx, broker.ProducerOptions{Sink: nopProducerSink{}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var out []ledger.Position
	for i, data := range entries {
		md, _, _ := broker.ParseEntry(data)
		ch := make(chan broker.PublishResult, 1)
		p.Publish(broker.PublishRequest{SequenceID: int64(i), Messages: max(md.GetNumMessagesInBatch(), 1), Data: data},
			func(r broker.PublishResult) { ch <- r })
		r := <-ch
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		out = append(out, r.ID.Position)
	}
	return out
}

const ns = "/admin/v2/persistent/public/default"

func TestTopicsCreateListDelete(t *testing.T) {
	e := newTopicsEnv(t)
	e.expect(t, "PUT", ns+"/t1", "", http.StatusNoContent, "")
	e.expect(t, "PUT", ns+"/t1", "", http.StatusConflict, "already exists")
	e.expect(t, "PUT", ns+"/p1/partitions", "3", http.StatusNoContent, "")
	e.expect(t, "PUT", ns+"/p2/partitions", `{"partitions":2,"properties":null}`, http.StatusNoContent, "")
	e.expect(t, "PUT", ns+"/p1/partitions", "3", http.StatusConflict, "already exists")
	e.expect(t, "PUT", ns+"/t1/partitions", "3", http.StatusConflict, "non-partitioned")

	// Bad input: 400 with a reason and nothing created.
	for _, c := range []struct{ method, path, body, reason string }{
		{"PUT", ns + "/bad/partitions", "-1", "more than 0"},
		{"PUT", ns + "/bad/partitions", "0", "more than 0"},
		{"PUT", ns + "/bad/partitions", `"three"`, "number of partitions"},
		{"PUT", ns + "/bad/partitions", `{"partitions":"x"}`, "number of partitions"},
		{"PUT", ns + "/bad/partitions", "", "body required"},
		{"PUT", ns + "/bad/partitions", "{", "invalid JSON"},
		{"PUT", ns + "/bad/partitions", "100000000", "limit"},
		{"PUT", ns + "/bad-partition-1/partitions", "2", "-partition-"},
		{"PUT", ns + "/bad%20name", "", "invalid character"},
		{"PUT", ns + "/bad%2Fname", "", "invalid topic name"},
		{"PUT", "/admin/v2/persistent/pub%21ic/default/x", "", "invalid character"},
		{"GET", "/admin/v2/persistent/pub%21ic/default", "", "tenant"},
		{"DELETE", ns + "/t1?force=maybe", "", "force"},
	} {
		e.expect(t, c.method, c.path, c.body, http.StatusBadRequest, c.reason)
	}
	// Unknown namespaces and tenants: 404.
	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/admin/v2/persistent/public/nons/x", ""},
		{"PUT", "/admin/v2/persistent/public/nons/x/partitions", "2"},
		{"PUT", "/admin/v2/persistent/notenant/default/x", ""},
		{"GET", "/admin/v2/persistent/public/nons", ""},
		{"GET", "/admin/v2/persistent/public/nons/partitioned", ""},
		{"GET", "/admin/v2/namespaces/notenant/default/topics", ""},
	} {
		e.expect(t, c.method, c.path, c.body, http.StatusNotFound, "namespace not found")
	}

	var list []string
	e.getJSON(t, ns, &list)
	want := []string{"persistent://public/default/p1-partition-0", "persistent://public/default/p1-partition-1",
		"persistent://public/default/p1-partition-2", "persistent://public/default/p2-partition-0",
		"persistent://public/default/p2-partition-1", "persistent://public/default/t1"}
	if !slices.Equal(list, want) {
		t.Fatalf("topics: %v; want %v", list, want)
	}
	var nsList []string
	e.getJSON(t, "/admin/v2/namespaces/public/default/topics", &nsList)
	if !slices.Equal(nsList, want) {
		t.Fatalf("namespace topics: %v", nsList)
	}
	e.getJSON(t, ns+"/partitioned", &list)
	if !slices.Equal(list, []string{"persistent://public/default/p1", "persistent://public/default/p2"}) {
		t.Fatalf("partitioned: %v", list)
	}

	var md struct{ Partitions int }
	e.getJSON(t, ns+"/p1/partitions", &md)
	if md.Partitions != 3 {
		t.Fatalf("partitions of p1: %d", md.Partitions)
	}
	e.expect(t, "POST", ns+"/p1/partitions", "5", http.StatusNoContent, "")
	e.expect(t, "POST", ns+"/p1/partitions", "4", http.StatusUnprocessableEntity, "can't be less than")
	e.expect(t, "POST", ns+"/p1/partitions", "-4", http.StatusBadRequest, "more than 0")
	e.expect(t, "POST", ns+"/t1/partitions", "4", http.StatusUnprocessableEntity, "not a partitioned topic")
	e.getJSON(t, ns+"/p1/partitions", &md)
	if md.Partitions != 5 {
		t.Fatalf("partitions of p1 after the refused shrink: %d; want 5", md.Partitions)
	}
	e.getJSON(t, ns+"/t1/partitions", &md)
	if md.Partitions != 0 {
		t.Fatalf("partitions of t1: %d", md.Partitions)
	}

	// Delete with a producer connected: 412 unless forced.
	tn, _ := broker.ParseTopicName("persistent://public/default/t1")
	tp, err := e.b.Topic(context.Background(), tn, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.AddProducer(context.Background(), broker.ProducerOptions{Sink: nopProducerSink{}}); err != nil {
		t.Fatal(err)
	}
	e.expect(t, "DELETE", ns+"/t1", "", http.StatusPreconditionFailed, "active producers")
	e.expect(t, "DELETE", ns+"/t1?force=true", "", http.StatusNoContent, "")
	e.expect(t, "DELETE", ns+"/t1", "", http.StatusNotFound, "not found")
	e.expect(t, "DELETE", ns+"/p1", "", http.StatusPreconditionFailed, "partitioned")
	e.expect(t, "DELETE", ns+"/p1/partitions", "", http.StatusNoContent, "")
	e.expect(t, "DELETE", ns+"/p1/partitions", "", http.StatusNotFound, "not found")
	e.expect(t, "DELETE", ns+"/p2/partitions?force=true", "", http.StatusNoContent, "")
	e.getJSON(t, ns, &list)
	if len(list) != 0 {
		t.Fatalf("after deleting: %v", list)
	}
}

func TestTopicsStatsSubscriptionsPeek(t *testing.T) {
	e := newTopicsEnv(t)
	topic := "persistent://public/default/s1"
	e.expect(t, "PUT", ns+"/s1", "", http.StatusNoContent, "")
	e.expect(t, "PUT", ns+"/s1/subscription/early", `{"ledgerId":-1,"entryId":-1,"partitionIndex":-1}`, http.StatusNoContent, "")
	e.expect(t, "PUT", ns+"/s1/subscription/early", "", http.StatusConflict, "already exists")
	e.expect(t, "PUT", ns+"/s1/subscription/late", "", http.StatusNoContent, "")
	e.expect(t, "PUT", ns+"/s1/subscription/bad", `{"ledgerId":"x"}`, http.StatusBadRequest, "invalid JSON")
	e.expect(t, "PUT", ns+"/nope/subscription/x", "", http.StatusNotFound, "not found")
	ps := e.publish(t, topic,
		pulsarEntry(t, 0, []byte("m0"), map[string]string{"k": "v"}, 0),
		pulsarEntry(t, 1, []byte("m1"), nil, 0),
		pulsarEntry(t, 2, []byte("b"), nil, 3),
		pulsarEntry(t, 3, []byte("m3"), nil, 0))

	// Latest is the end at creation: what comes after is backlog.
	e.expect(t, "PUT", ns+"/s1/subscription/later", "", http.StatusNoContent, "")
	var subs []string
	e.getJSON(t, ns+"/s1/subscriptions", &subs)
	if !slices.Equal(subs, []string{"early", "late", "later"}) {
		t.Fatalf("subscriptions: %v", subs)
	}
	type subStats struct {
		MsgBacklog int64
		Type       string
		Consumers  []struct{ ConsumerName string }
	}
	var stats struct {
		MsgInCounter  int64
		MsgRateIn     float64
		StorageSize   int64
		Publishers    []any
		Subscriptions map[string]subStats
	}
	e.getJSON(t, ns+"/s1/stats", &stats)
	if stats.MsgInCounter != 6 || stats.MsgRateIn <= 0 || stats.StorageSize <= 0 ||
		stats.Subscriptions["early"].MsgBacklog != 6 || stats.Subscriptions["late"].MsgBacklog != 6 || stats.Subscriptions["later"].MsgBacklog != 0 || stats.Publishers == nil {
		t.Fatalf("stats: %+v", stats)
	}

	// Peek the first entry: payload and headers as pulsaradmin reads them.
	code, body, h := e.do(t, "GET", ns+"/s1/subscription/early/position/1", "")
	if code != 200 || body != "m0" || h.Get("X-Pulsar-Message-ID") != ps[0].String() ||
		h.Get("X-Pulsar-Property") != `{"k":"v"}` || h.Get("X-Pulsar-Publish-Time") == "" {
		t.Fatalf("peek 1: %d %q %v", code, body, h)
	}
	code, body, h = e.do(t, "GET", ns+"/s1/subscription/early/position/3", "")
	if code != 200 || h.Get("X-Pulsar-Num-Batch-Message") != "3" || !strings.Contains(body, "b0") || !strings.Contains(body, "b2") {
		t.Fatalf("peek 3 (batch): %d %q %v", code, body, h)
	}
	e.expect(t, "GET", ns+"/s1/subscription/early/position/5", "", http.StatusNotFound, "not found")
	e.expect(t, "GET", ns+"/s1/subscription/early/position/0", "", http.StatusBadRequest, "position")
	e.expect(t, "GET", ns+"/s1/subscription/early/position/x", "", http.StatusBadRequest, "integer")
	e.expect(t, "GET", ns+"/s1/subscription/nosub/position/1", "", http.StatusNotFound, "subscription not found")
	code, body, _ = e.do(t, "GET", fmt.Sprintf("%s/s1/ledger/%d/entry/%d", ns, ps[1].Ledger, ps[1].Entry), "")
	if code != 200 || body != "m1" {
		t.Fatalf("entry %v: %d %q", ps[1], code, body)
	}
	e.expect(t, "GET", fmt.Sprintf("%s/s1/ledger/%d/entry/%d", ns, ps[3].Ledger, ps[3].Entry+1), "", http.StatusNotFound, "not found")

	// Skip, skip all, reset.
	backlog := func(sub string) int64 {
		e.getJSON(t, ns+"/s1/stats", &stats)
		return stats.Subscriptions[sub].MsgBacklog
	}
	e.expect(t, "POST", ns+"/s1/subscription/early/skip/2", "", http.StatusNoContent, "")
	if got := backlog("early"); got != 4 {
		t.Fatalf("after skip 2: backlog %d", got)
	}
	e.expect(t, "POST", ns+"/s1/subscription/early/skip/-2", "", http.StatusBadRequest, "skip")
	e.expect(t, "POST", ns+"/s1/subscription/early/skip_all", "", http.StatusNoContent, "")
	if got := backlog("early"); got != 0 {
		t.Fatalf("after skip_all: backlog %d", got)
	}
	// A connected consumer is disconnected by a reset.
	tn, _ := broker.ParseTopicName(topic)
	tp, _ := e.b.Topic(context.Background(), tn, false)
	sink := &countingSink{}
	if _, err := tp.Subscribe(context.Background(), broker.SubscribeOptions{Subscription: "early", Durable: true, Sink: sink}); err != nil {
		t.Fatal(err)
	}
	e.expect(t, "POST", ns+"/s1/subscription/early/resetcursor",
		fmt.Sprintf(`{"ledgerId":%d,"entryId":%d,"partitionIndex":-1}`, ps[1].Ledger, ps[1].Entry), http.StatusNoContent, "")
	if _, closed := sink.counts(); closed != 1 {
		t.Fatalf("consumer closed %d times by the reset; want 1", closed)
	}
	if got := backlog("early"); got != 5 {
		t.Fatalf("after reset to entry 1: backlog %d; want 5", got)
	}
	e.expect(t, "POST", ns+"/s1/subscription/early/resetcursor",
		fmt.Sprintf(`{"ledgerId":%d,"entryId":%d,"isExcluded":true}`, ps[1].Ledger, ps[1].Entry), http.StatusNoContent, "")
	if got := backlog("early"); got != 4 {
		t.Fatalf("after reset past entry 1: backlog %d; want 4", got)
	}
	e.expect(t, "POST", ns+"/s1/subscription/early/resetcursor/0", "", http.StatusNoContent, "")
	if got := backlog("early"); got != 6 {
		t.Fatalf("after reset to time 0: backlog %d; want 6", got)
	}
	e.expect(t, "POST", ns+"/s1/subscription/early/resetcursor/"+fmt.Sprint(time.Now().Add(time.Hour).UnixMilli()), "", http.StatusNoContent, "")
	if got := backlog("early"); got != 0 {
		t.Fatalf("after reset to the future: backlog %d; want 0", got)
	}
	e.expect(t, "POST", ns+"/s1/subscription/early/resetcursor/soon", "", http.StatusBadRequest, "integer")
	e.expect(t, "POST", ns+"/s1/subscription/early/resetcursor", `{"entryId":1}`, http.StatusBadRequest, "ledgerId")
	e.expect(t, "POST", ns+"/s1/subscription/early/resetcursor", ``, http.StatusBadRequest, "body required")
	e.expect(t, "POST", ns+"/s1/subscription/nosub/skip_all", "", http.StatusNotFound, "subscription not found")

	// Internal stats.
	var is struct {
		NumberOfEntries    int64
		LastConfirmedEntry string
		Ledgers            []struct{ LedgerID, Entries int64 }
		Cursors            map[string]struct{ MarkDeletePosition, ReadPosition, IndividuallyDeletedMessages string }
	}
	e.getJSON(t, ns+"/s1/internalStats", &is)
	if is.NumberOfEntries != 4 || is.LastConfirmedEntry != ps[3].String() || len(is.Ledgers) == 0 ||
		is.Cursors["early"].MarkDeletePosition != ps[3].String() || is.Cursors["late"].IndividuallyDeletedMessages != "[]" {
		t.Fatalf("internal stats: %+v", is)
	}

	// Delete a subscription: 412 with a consumer unless forced.
	sink2 := &countingSink{}
	if _, err := tp.Subscribe(context.Background(), broker.SubscribeOptions{Subscription: "late", Durable: true, Sink: sink2}); err != nil {
		t.Fatal(err)
	}
	e.expect(t, "DELETE", ns+"/s1/subscription/late", "", http.StatusPreconditionFailed, "active consumers")
	e.expect(t, "DELETE", ns+"/s1/subscription/late?force=true", "", http.StatusNoContent, "")
	e.expect(t, "DELETE", ns+"/s1/subscription/late", "", http.StatusNotFound, "subscription not found")
	e.getJSON(t, ns+"/s1/subscriptions", &subs)
	if !slices.Equal(subs, []string{"early", "later"}) {
		t.Fatalf("subscriptions after delete: %v", subs)
	}
	e.expect(t, "GET", ns+"/nope/stats", "", http.StatusNotFound, "not found")
	e.expect(t, "GET", ns+"/nope/internalStats", "", http.StatusNotFound, "not found")
}

func TestTopicsPartitionedStatsTerminateUnloadLookup(t *testing.T) {
	e := newTopicsEnv(t)
	e.expect(t, "PUT", ns+"/pt/partitions", "2", http.StatusNoContent, "")
	e.publish(t, "persistent://public/default/pt-partition-1", pulsarEntry(t, 0, []byte("x"), nil, 0))
	e.expect(t, "PUT", ns+"/pt/subscription/all", `{"ledgerId":-1,"entryId":-1}`, http.StatusNoContent, "")
	var ps struct {
		MsgInCounter  int64
		Metadata      struct{ Partitions int }
		Partitions    map[string]struct{ MsgInCounter int64 }
		Subscriptions map[string]struct{ MsgBacklog int64 }
	}
	e.getJSON(t, ns+"/pt/partitioned-stats?perPartition=true", &ps)
	if ps.MsgInCounter != 1 || ps.Metadata.Partitions != 2 || len(ps.Partitions) != 2 ||
		ps.Partitions["persistent://public/default/pt-partition-1"].MsgInCounter != 1 || ps.Subscriptions["all"].MsgBacklog != 1 {
		t.Fatalf("partitioned stats: %+v", ps)
	}
	var subs []string
	e.getJSON(t, ns+"/pt-partition-0/subscriptions", &subs)
	if !slices.Equal(subs, []string{"all"}) {
		t.Fatalf("subscriptions of partition 0: %v", subs)
	}
	e.expect(t, "GET", ns+"/pt/stats", "", http.StatusNotFound, "partitioned")
	e.expect(t, "POST", ns+"/pt/terminate", "", http.StatusMethodNotAllowed, "partitioned")
	e.expect(t, "GET", ns+"/nope/partitioned-stats", "", http.StatusNotFound, "not found")

	// lastMessageId and terminate on a partition.
	var id struct {
		LedgerID, EntryID int64
		PartitionIndex    int
	}
	e.getJSON(t, ns+"/pt-partition-1/lastMessageId", &id)
	if id.EntryID != 0 || id.PartitionIndex != 1 {
		t.Fatalf("lastMessageId: %+v", id)
	}
	b := e.expect(t, "POST", ns+"/pt-partition-1/terminate", "", http.StatusOK, "")
	var tid struct {
		LedgerID, EntryID int64
		PartitionIndex    int
	}
	if err := json.Unmarshal([]byte(b), &tid); err != nil || tid != id {
		t.Fatalf("terminate: %s; want %+v", b, id)
	}
	e.expect(t, "PUT", ns+"/pt/unload", "", http.StatusNoContent, "")
	e.expect(t, "PUT", ns+"/nope/unload", "", http.StatusNotFound, "not found")
	e.expect(t, "GET", ns+"/nope/lastMessageId", "", http.StatusNotFound, "not found")

	var ld map[string]string
	e.getJSON(t, "/lookup/v2/topic/persistent/public/default/pt", &ld)
	if ld["brokerUrl"] != "pulsar://127.0.0.1:6650" || ld["httpUrl"] != "http://127.0.0.1:8080" ||
		ld["brokerUrlTls"] != "" || ld["httpUrlTls"] != "" || ld["nativeUrl"] != "pulsar://127.0.0.1:6650" {
		t.Fatalf("lookup: %v", ld)
	}
	e.expect(t, "GET", "/lookup/v2/topic/persistent/public/default/bad%20name", "", http.StatusBadRequest, "invalid")
}
