package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/rest"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

// Topics, subscriptions and lookup through pulsaradmin, with real traffic
// from pulsar-client-go, against the shared standalone server. Topics
// live in public/default.

const defaultNS = "/admin/v2/persistent/public/default"

// topicName is a fresh topic of the test in public/default.
func topicName(t *testing.T, suffix string) (string, utils.TopicName) {
	t.Helper()
	full := "persistent://public/default/" + name(t) + suffix
	tn, err := utils.GetTopicName(full)
	if err != nil {
		t.Fatal(err)
	}
	return full, *tn
}

// statusOf is the HTTP status of a pulsaradmin error (0 if not one).
func statusOf(err error) int {
	var re rest.Error
	if errors.As(err, &re) {
		return re.Code
	}
	return 0
}

// refuse sends a request that must fail with status and a JSON reason
// containing reason.
func refuse(t *testing.T, method, path, body string, status int, reason string) {
	t.Helper()
	code, resp := httpDo(t, method, path, body)
	var r struct{ Reason string }
	if code != status || json.Unmarshal([]byte(resp), &r) != nil || !strings.Contains(r.Reason, reason) {
		t.Errorf("%s %s %q = %d %s; want %d with a reason containing %q", method, path, body, code, resp, status, reason)
	}
}

// sameState fails t if the answers to paths change across f.
func sameState(t *testing.T, paths []string, f func()) {
	t.Helper()
	read := func() []string {
		var out []string
		for _, p := range paths {
			code, body := httpDo(t, "GET", p, "")
			out = append(out, fmt.Sprintf("%s %d %s", p, code, body))
		}
		return out
	}
	before := read()
	f()
	if after := read(); !slices.Equal(before, after) {
		t.Fatalf("refused requests changed state:\nbefore %q\nafter  %q", before, after)
	}
}

// produce sends n messages ("<prefix>-i", property i=<i>) without batching
// and returns their ids.
func produce(t *testing.T, c pulsar.Client, topic, prefix string, n int) []pulsar.MessageID {
	t.Helper()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var ids []pulsar.MessageID
	for i := range n {
		id, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "%s-%d", prefix, i),
			Properties: map[string]string{"i": fmt.Sprint(i)}})
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		ids = append(ids, id)
	}
	return ids
}

func publicDefault(t *testing.T) utils.NameSpaceName {
	t.Helper()
	n, err := utils.GetNameSpaceName("public", "default")
	if err != nil {
		t.Fatal(err)
	}
	return *n
}

func backlogOf(t *testing.T, topic utils.TopicName, sub string) int64 {
	t.Helper()
	st, err := adminClient(t).Topics().GetStats(topic)
	if err != nil {
		t.Fatal(err)
	}
	ss, ok := st.Subscriptions[sub]
	if !ok {
		t.Fatalf("no subscription %s in the stats of %s", sub, topic.String())
	}
	return ss.MsgBacklog
}

func TestTopicsCreateListUpdateDelete(t *testing.T) {
	admin := adminClient(t).Topics()
	plainName, plain := topicName(t, "-plain")
	partedName, parted := topicName(t, "-parted")
	if err := admin.Create(plain, 0); err != nil {
		t.Fatalf("create non-partitioned: %v", err)
	}
	if err := admin.Create(plain, 0); statusOf(err) != http.StatusConflict {
		t.Fatalf("create again: %v; want 409", err)
	}
	if err := admin.Create(parted, 3); err != nil {
		t.Fatalf("create partitioned: %v", err)
	}
	if err := admin.Create(parted, 3); statusOf(err) != http.StatusConflict {
		t.Fatalf("create partitioned again: %v; want 409", err)
	}
	partitioned, nonPartitioned, err := admin.List(publicDefault(t))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(partitioned, partedName) || slices.Contains(partitioned, plainName) {
		t.Fatalf("partitioned topics %v: want %s (only)", partitioned, partedName)
	}
	for _, want := range []string{plainName, partedName + "-partition-0", partedName + "-partition-2"} {
		if !slices.Contains(nonPartitioned, want) {
			t.Fatalf("topics %v: want %s", nonPartitioned, want)
		}
	}
	md, err := admin.GetMetadata(parted)
	if err != nil || md.Partitions != 3 {
		t.Fatalf("metadata: %+v, %v", md, err)
	}
	if err := admin.Update(parted, 5); err != nil {
		t.Fatalf("grow: %v", err)
	}
	if err := admin.Update(parted, 2); statusOf(err) != http.StatusUnprocessableEntity {
		t.Fatalf("shrink: %v; want 422", err)
	}
	if md, _ := admin.GetMetadata(parted); md.Partitions != 5 {
		t.Fatalf("after a refused shrink: %d partitions; want 5", md.Partitions)
	}
	if md, err := admin.GetMetadata(plain); err != nil || md.Partitions != 0 {
		t.Fatalf("metadata of a non-partitioned topic: %+v, %v", md, err)
	}

	// A topic with a producer connected is deleted only by force (the
	// producer is disconnected; reconnecting, it would create the topic
	// again, as in Pulsar, so it is closed before the check).
	c := harness.NewClient(t, shared.Server(t).PulsarURL())
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: plainName})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Delete(plain, false, true); statusOf(err) != http.StatusPreconditionFailed {
		t.Fatalf("delete with a producer: %v; want 412", err)
	}
	p.Close()
	if err := admin.Delete(plain, true, true); err != nil {
		t.Fatalf("forced delete: %v", err)
	}
	if err := admin.Delete(plain, false, true); statusOf(err) != http.StatusNotFound {
		t.Fatalf("delete again: %v; want 404", err)
	}
	if err := admin.Delete(parted, false, false); err != nil {
		t.Fatalf("delete partitioned: %v", err)
	}
	partitioned, nonPartitioned, err = admin.List(publicDefault(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{plainName, partedName, partedName + "-partition-0"} {
		if slices.Contains(partitioned, gone) || slices.Contains(nonPartitioned, gone) {
			t.Fatalf("%s still listed after delete", gone)
		}
	}
}

func TestTopicsStatsPeekSkipReset(t *testing.T) {
	adm := adminClient(t)
	topicStr, topic := topicName(t, "")
	c := harness.NewClient(t, shared.Server(t).PulsarURL())
	if err := adm.Topics().Create(topic, 0); err != nil {
		t.Fatal(err)
	}
	if err := adm.Subscriptions().Create(topic, "watch", utils.Earliest); err != nil {
		t.Fatalf("create subscription at earliest: %v", err)
	}
	if err := adm.Subscriptions().Create(topic, "watch", utils.Earliest); statusOf(err) != http.StatusConflict {
		t.Fatalf("create subscription again: %v; want 409", err)
	}
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topicStr, SubscriptionName: "work", Type: pulsar.Shared,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, Name: "worker"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	ids := produce(t, c, topicStr, "msg", 10)
	for range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		m, err := cons.Receive(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	harness.WaitFor(t, 10*time.Second, func() bool { return backlogOf(t, topic, "work") == 6 }, "backlog of work to be 6")

	st, err := adm.Topics().GetStats(topic)
	if err != nil {
		t.Fatal(err)
	}
	if st.MsgCounterIn != 10 || st.MsgRateIn <= 0 || st.MsgThroughputIn <= 0 || st.StorageSize <= 0 || st.AverageMsgSize <= 0 {
		t.Errorf("topic stats in: %+v", st)
	}
	work := st.Subscriptions["work"]
	if work.SubType != "Shared" || work.MsgOutCounter < 4 || work.MsgRateOut <= 0 || len(work.Consumers) != 1 ||
		work.Consumers[0].ConsumerName != "worker" || work.UnAckedMessages != int64(work.Consumers[0].UnAckedMessages) {
		t.Errorf("subscription work: %+v", work)
	}
	if w := st.Subscriptions["watch"]; w.MsgBacklog != 10 || len(w.Consumers) != 0 {
		t.Errorf("subscription watch: %+v", w)
	}
	subs, err := adm.Subscriptions().List(topic)
	if err != nil || !slices.Equal(subs, []string{"watch", "work"}) {
		t.Fatalf("subscriptions: %v, %v", subs, err)
	}

	// Peek: the first three of watch, contents and properties.
	msgs, err := adm.Subscriptions().PeekMessages(topic, "watch", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 3 {
		t.Fatalf("peeked %d messages; want 3", len(msgs))
	}
	for i, m := range msgs {
		if string(m.Payload) != fmt.Sprintf("msg-%d", i) || m.Properties["i"] != fmt.Sprint(i) ||
			m.MessageID.LedgerID != ids[i].LedgerID() || m.MessageID.EntryID != ids[i].EntryID() {
			t.Errorf("peeked %d: %q %v %v; want msg-%d at %v", i, m.Payload, m.Properties, m.MessageID, i, ids[i])
		}
	}
	m, err := adm.Subscriptions().GetMessageByID(topic, ids[7].LedgerID(), ids[7].EntryID())
	if err != nil || string(m.Payload) != "msg-7" {
		t.Fatalf("message by id: %+v, %v", m, err)
	}
	if _, err := adm.Subscriptions().GetMessageByID(topic, ids[9].LedgerID(), ids[9].EntryID()+1); statusOf(err) != http.StatusNotFound {
		t.Fatalf("message past the end: %v; want 404", err)
	}

	// Skip 3, then reset to msg-5 by id, by time, and clear.
	if err := adm.Subscriptions().SkipMessages(topic, "watch", 3); err != nil {
		t.Fatal(err)
	}
	if b := backlogOf(t, topic, "watch"); b != 7 {
		t.Fatalf("after skipping 3: backlog %d; want 7", b)
	}
	if msgs, err := adm.Subscriptions().PeekMessages(topic, "watch", 1); err != nil || string(msgs[0].Payload) != "msg-3" {
		t.Fatalf("after skipping 3, first is %v, %v; want msg-3", msgs, err)
	}
	reset := utils.MessageID{LedgerID: ids[5].LedgerID(), EntryID: ids[5].EntryID(), PartitionIndex: -1}
	if err := adm.Subscriptions().ResetCursorToMessageID(topic, "watch", reset); err != nil {
		t.Fatal(err)
	}
	if b := backlogOf(t, topic, "watch"); b != 5 {
		t.Fatalf("after reset to msg-5: backlog %d; want 5", b)
	}
	if err := adm.Subscriptions().ResetCursorToTimestamp(topic, "watch", 0); err != nil {
		t.Fatal(err)
	}
	if b := backlogOf(t, topic, "watch"); b != 10 {
		t.Fatalf("after reset to time 0: backlog %d; want 10", b)
	}
	if err := adm.Subscriptions().ResetCursorToTimestamp(topic, "watch", time.Now().Add(time.Hour).UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if b := backlogOf(t, topic, "watch"); b != 0 {
		t.Fatalf("after reset to the future: backlog %d; want 0", b)
	}
	if err := adm.Subscriptions().ResetCursorToTimestamp(topic, "watch", 0); err != nil {
		t.Fatal(err)
	}
	if err := adm.Subscriptions().ClearBacklog(topic, "watch"); err != nil {
		t.Fatal(err)
	}
	if b := backlogOf(t, topic, "watch"); b != 0 {
		t.Fatalf("after skip_all: backlog %d; want 0", b)
	}

	// A connected consumer reconnects after a reset and gets the messages again.
	if err := adm.Subscriptions().ResetCursorToMessageID(topic, "work", utils.Earliest); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		m, err := cons.Receive(ctx)
		cancel()
		if err != nil {
			t.Fatalf("after reset, received %d distinct messages: %v", len(seen), err)
		}
		seen[string(m.Payload())] = true
		cons.Ack(m)
	}

	is, err := adm.Topics().GetInternalStats(topic)
	if err != nil {
		t.Fatal(err)
	}
	last := ids[9]
	if is.NumberOfEntries != 10 || is.LastConfirmedEntry != fmt.Sprintf("%d:%d", last.LedgerID(), last.EntryID()) ||
		len(is.Ledgers) == 0 || is.Cursors["watch"].MarkDeletePosition == "" || is.Cursors["work"].ReadPosition == "" {
		t.Errorf("internal stats: %+v", is)
	}
	lid, err := adm.Topics().GetLastMessageID(topic)
	if err != nil || lid.LedgerID != last.LedgerID() || lid.EntryID != last.EntryID() {
		t.Fatalf("last message id: %+v, %v; want %v", lid, err, last)
	}

	// A subscription with a consumer is deleted only by force.
	if err := adm.Subscriptions().Delete(topic, "work"); statusOf(err) != http.StatusPreconditionFailed {
		t.Fatalf("delete a subscription with a consumer: %v; want 412", err)
	}
	if err := adm.Subscriptions().ForceDelete(topic, "work"); err != nil {
		t.Fatal(err)
	}
	// The disconnected consumer reconnects and subscribes again (as with
	// Pulsar): close it and delete what it made.
	cons.Close()
	if err := adm.Subscriptions().Delete(topic, "work"); err != nil && statusOf(err) != http.StatusNotFound {
		t.Fatal(err)
	}
	if err := adm.Subscriptions().Delete(topic, "watch"); err != nil {
		t.Fatal(err)
	}
	if subs, _ := adm.Subscriptions().List(topic); len(subs) != 0 {
		t.Fatalf("subscriptions after deleting both: %v", subs)
	}
	if err := adm.Subscriptions().Delete(topic, "watch"); statusOf(err) != http.StatusNotFound {
		t.Fatalf("delete again: %v; want 404", err)
	}
}

func TestTopicsPeekBatch(t *testing.T) {
	adm := adminClient(t)
	topicStr, topic := topicName(t, "")
	c := harness.NewClient(t, shared.Server(t).PulsarURL())
	if err := adm.Topics().Create(topic, 0); err != nil {
		t.Fatal(err)
	}
	if err := adm.Subscriptions().Create(topic, "s", utils.Earliest); err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topicStr, BatchingMaxMessages: 5,
		BatchingMaxPublishDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	done := make(chan error, 5)
	for i := range 5 {
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "b-%d", i)},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { done <- err })
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := adm.Subscriptions().PeekMessages(topic, "s", 5)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		got = append(got, string(m.Payload))
	}
	if !slices.Equal(got, []string{"b-0", "b-1", "b-2", "b-3", "b-4"}) {
		t.Fatalf("peeked batch: %q", got)
	}
	if b := backlogOf(t, topic, "s"); b != 5 {
		t.Fatalf("backlog %d; want 5", b)
	}
}

func TestTopicsTerminateUnloadLookup(t *testing.T) {
	adm := adminClient(t)
	topicStr, topic := topicName(t, "")
	c := harness.NewClient(t, shared.Server(t).PulsarURL())
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topicStr, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// A subscription keeps the data (without one, ledgers no cursor needs
	// are trimmed once closed, as in Pulsar without retention).
	if err := adm.Subscriptions().Create(topic, "keep", utils.Earliest); err != nil {
		t.Fatal(err)
	}
	send := func(s string) (pulsar.MessageID, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(s)})
	}
	if _, err := send("one"); err != nil {
		t.Fatal(err)
	}
	// Unload: the producer reconnects and goes on.
	if err := adm.Topics().Unload(topic); err != nil {
		t.Fatal(err)
	}
	last, err := send("two")
	if err != nil {
		t.Fatalf("send after unload: %v", err)
	}
	ld, err := adm.Topics().Lookup(topic)
	if err != nil || ld.BrokerURL != shared.Server(t).PulsarURL() || ld.HTTPURL != shared.Server(t).HTTPURL() {
		t.Fatalf("lookup: %+v, %v", ld, err)
	}

	id, err := adm.Topics().Terminate(topic)
	if err != nil {
		t.Fatal(err)
	}
	if id.LedgerID != last.LedgerID() || id.EntryID != last.EntryID() {
		t.Fatalf("terminate: %+v; want the last message %v", id, last)
	}
	if _, err := send("three"); !errors.Is(err, pulsar.ErrTopicTerminated) && !errors.Is(err, pulsar.ErrProducerClosed) {
		t.Fatalf("send after terminate: %v; want topic terminated (or the producer closed for it)", err)
	}
	if _, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topicStr}); err == nil || !strings.Contains(err.Error(), "TopicTerminated") {
		t.Fatalf("new producer after terminate: %v; want TopicTerminatedError", err)
	}
	// A reader still reads everything.
	r, err := c.CreateReader(pulsar.ReaderOptions{Topic: topicStr, StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, want := range []string{"one", "two"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		m, err := r.Next(ctx)
		cancel()
		if err != nil || string(m.Payload()) != want {
			t.Fatalf("reader after terminate: %v, %v; want %s", m, err, want)
		}
	}
}

func TestTopicsPartitionedStats(t *testing.T) {
	adm := adminClient(t)
	topicStr, topic := topicName(t, "")
	if err := adm.Topics().Create(topic, 2); err != nil {
		t.Fatal(err)
	}
	if err := adm.Subscriptions().Create(topic, "all", utils.Earliest); err != nil {
		t.Fatal(err)
	}
	c := harness.NewClient(t, shared.Server(t).PulsarURL())
	produce(t, c, topicStr, "p", 6)
	st, err := adm.Topics().GetPartitionedStats(topic, true)
	if err != nil {
		t.Fatal(err)
	}
	if st.Metadata.Partitions != 2 || len(st.Partitions) != 2 || st.Subscriptions["all"].MsgBacklog != 6 {
		t.Fatalf("partitioned stats: %+v", st)
	}
	var in int64
	for _, ps := range st.Partitions {
		in += ps.MsgCounterIn
	}
	if in != 6 {
		t.Fatalf("messages in over the partitions: %d; want 6", in)
	}
	// Skip and clear apply to every partition.
	if err := adm.Subscriptions().ClearBacklog(topic, "all"); err != nil {
		t.Fatal(err)
	}
	if st, _ := adm.Topics().GetPartitionedStats(topic, false); st.Subscriptions["all"].MsgBacklog != 0 || len(st.Partitions) != 0 {
		t.Fatalf("after clearing: %+v", st)
	}
	if _, err := adm.Topics().Terminate(topic); statusOf(err) != http.StatusMethodNotAllowed {
		t.Fatalf("terminate a partitioned topic: %v; want 405", err)
	}
}

func TestTopicsBadInput(t *testing.T) {
	topicStr, topic := topicName(t, "")
	adm := adminClient(t)
	if err := adm.Topics().Create(topic, 2); err != nil {
		t.Fatal(err)
	}
	if err := adm.Subscriptions().Create(topic, "s", utils.Earliest); err != nil {
		t.Fatal(err)
	}
	c := harness.NewClient(t, shared.Server(t).PulsarURL())
	produce(t, c, topicStr, "x", 3)
	local := topic.GetLocalName()
	base := defaultNS + "/" + local
	state := []string{defaultNS, defaultNS + "/partitioned", base + "/partitions", base + "/partitioned-stats",
		base + "/subscriptions"}
	sameState(t, state, func() {
		refuse(t, "PUT", defaultNS+"/"+name(t)+"-neg/partitions", "-3", http.StatusBadRequest, "more than 0")
		refuse(t, "PUT", defaultNS+"/"+name(t)+"-zero/partitions", "0", http.StatusBadRequest, "more than 0")
		refuse(t, "PUT", defaultNS+"/"+name(t)+"-json/partitions", "{not json", http.StatusBadRequest, "invalid JSON")
		refuse(t, "PUT", defaultNS+"/"+name(t)+"-str/partitions", `"2"`, http.StatusBadRequest, "number of partitions")
		refuse(t, "PUT", defaultNS+"/bad%20name", "", http.StatusBadRequest, "invalid character")
		refuse(t, "PUT", defaultNS+"/bad%2Fname", "", http.StatusBadRequest, "invalid topic name")
		refuse(t, "PUT", "/admin/v2/persistent/bad$tenant/default/x", "", http.StatusBadRequest, "invalid character")
		refuse(t, "PUT", base+"/partitions", "4", http.StatusConflict, "already exists")
		refuse(t, "PUT", base, "", http.StatusConflict, "already exists")
		refuse(t, "POST", base+"/partitions", "1", http.StatusUnprocessableEntity, "less than")
		refuse(t, "POST", base+"/partitions", "-1", http.StatusBadRequest, "more than 0")
		refuse(t, "POST", base+"/partitions", "[2]", http.StatusBadRequest, "number of partitions")
		refuse(t, "DELETE", base+"/partitions?force=perhaps", "", http.StatusBadRequest, "force")
		refuse(t, "PUT", base+"/subscription/s", "", http.StatusConflict, "already exists")
		refuse(t, "PUT", base+"/subscription/t", `{"ledgerId": "one"}`, http.StatusBadRequest, "invalid JSON")
		refuse(t, "POST", base+"/subscription/s/skip/-1", "", http.StatusBadRequest, "skip")
		refuse(t, "POST", base+"/subscription/s/skip/many", "", http.StatusBadRequest, "integer")
		refuse(t, "POST", base+"/subscription/s/resetcursor/yesterday", "", http.StatusBadRequest, "integer")
		refuse(t, "POST", base+"/subscription/s/resetcursor", `{"ledgerId":1}`, http.StatusBadRequest, "entryId")
		refuse(t, "POST", base+"/subscription/nosuch/skip_all", "", http.StatusNotFound, "subscription not found")
		refuse(t, "GET", base+"-partition-0/subscription/s/position/0", "", http.StatusBadRequest, "position")
		refuse(t, "GET", base+"-partition-0/ledger/x/entry/0", "", http.StatusBadRequest, "integer")
		refuse(t, "GET", defaultNS+"/"+name(t)+"-missing/stats", "", http.StatusNotFound, "not found")
		refuse(t, "GET", defaultNS+"/"+name(t)+"-missing/internalStats", "", http.StatusNotFound, "not found")
		refuse(t, "DELETE", defaultNS+"/"+name(t)+"-missing", "", http.StatusNotFound, "not found")
		refuse(t, "DELETE", defaultNS+"/"+name(t)+"-missing/partitions", "", http.StatusNotFound, "not found")
		refuse(t, "GET", "/lookup/v2/topic/persistent/public/default/bad%20name", "", http.StatusBadRequest, "invalid")
		missingNS := "/admin/v2/persistent/public/" + name(t)
		refuse(t, "PUT", missingNS+"/x", "", http.StatusNotFound, "namespace not found")
		refuse(t, "PUT", missingNS+"/x/partitions", "2", http.StatusNotFound, "namespace not found")
		refuse(t, "GET", missingNS, "", http.StatusNotFound, "namespace not found")
		refuse(t, "GET", "/admin/v2/persistent/"+name(t)+"/default", "", http.StatusNotFound, "namespace not found")
	})
	// The refused requests created nothing either.
	_, nonPartitioned, err := adm.Topics().List(publicDefault(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nonPartitioned {
		if strings.Contains(n, "/bad") || strings.HasSuffix(n, "-neg") || strings.HasSuffix(n, "-zero") {
			t.Errorf("refused request created %s", n)
		}
	}
}

func TestTopicsPeekCompressed(t *testing.T) {
	adm := adminClient(t)
	c := harness.NewClient(t, shared.Server(t).PulsarURL())
	for _, comp := range []struct {
		name string
		typ  pulsar.CompressionType
	}{{"lz4", pulsar.LZ4}, {"zlib", pulsar.ZLib}, {"zstd", pulsar.ZSTD}} {
		topicStr, topic := topicName(t, "-"+comp.name)
		if err := adm.Topics().Create(topic, 0); err != nil {
			t.Fatal(err)
		}
		if err := adm.Subscriptions().Create(topic, "s", utils.Earliest); err != nil {
			t.Fatal(err)
		}
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topicStr, CompressionType: comp.typ,
			BatchingMaxMessages: 3, BatchingMaxPublishDelay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 3)
		want := []string{}
		for i := range 3 {
			payload := strings.Repeat(fmt.Sprintf("%s-%d ", comp.name, i), 20)
			want = append(want, payload)
			p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(payload)},
				func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { done <- err })
		}
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		p.Close()
		msgs, err := adm.Subscriptions().PeekMessages(topic, "s", 3)
		if err != nil {
			t.Fatalf("%s: %v", comp.name, err)
		}
		var got []string
		for _, m := range msgs {
			got = append(got, string(m.Payload))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: peeked %q; want %q", comp.name, got, want)
		}
	}
}
