package admin

// Topics: Pulsar's /admin/v2/persistent/{tenant}/{namespace}/... and the
// namespace's topic list, with Pulsar's paths, verbs and JSON shapes (as
// pulsar-client-go's pulsaradmin and pulsar-admin send and read them).
//
//	GET    /admin/v2/persistent/{t}/{ns}                       topics (non-partitioned and partitions)
//	GET    /admin/v2/persistent/{t}/{ns}/partitioned           partitioned topics
//	GET    /admin/v2/namespaces/{t}/{ns}/topics                topics (as the first)
//	GET    /admin/v2/non-persistent/{t}/{ns}[/partitioned]     [] (no non-persistent topics)
//	PUT    .../{topic}                                         create non-partitioned (409 if it exists)
//	DELETE .../{topic}?force=                                  delete (412 with clients unless force)
//	PUT    .../{topic}/partitions                              create partitioned; body N or {"partitions": N}
//	POST   .../{topic}/partitions                              grow; body N (fewer: 422, as Pulsar)
//	GET    .../{topic}/partitions                              {"partitions": N} (0: not partitioned)
//	DELETE .../{topic}/partitions?force=                       delete every partition and the metadata
//	GET    .../{topic}/stats                                   TopicStats
//	GET    .../{topic}/partitioned-stats?perPartition=         PartitionedTopicStats
//	GET    .../{topic}/internalStats                           PersistentTopicInternalStats
//	GET    .../{topic}/subscriptions                           names
//	PUT    .../{topic}/subscription/{sub}                      create at a MessageId body (default latest)
//	DELETE .../{topic}/subscription/{sub}?force=               delete (412 with consumers unless force)
//	POST   .../{topic}/subscription/{sub}/resetcursor/{ms}     reset to a publish time
//	POST   .../{topic}/subscription/{sub}/resetcursor          reset to a ResetCursorData body
//	POST   .../{topic}/subscription/{sub}/skip/{n}             skip n messages
//	POST   .../{topic}/subscription/{sub}/skip_all             clear the backlog
//	GET    .../{topic}/subscription/{sub}/position/{n}         peek the n-th unacknowledged entry
//	GET    .../{topic}/ledger/{l}/entry/{e}                    the entry's message(s)
//	GET    .../{topic}/lastMessageId                           MessageId
//	POST   .../{topic}/terminate                               MessageId of the last message
//	PUT    .../{topic}/unload                                  move (or close); clients reconnect
//
// Topic names in paths may be URL-encoded; a partition's name
// (x-partition-N) addresses one partition. Operations on a subscription of
// a partitioned topic's name apply to every partition, as in Pulsar.
//
// A peeked message is answered as Pulsar answers it: the payload,
// uncompressed, as the body (a batch's payload, the single-message records in it, for
// pulsaradmin to split), the message id in X-Pulsar-Message-ID ("L:E"),
// the batch size in X-Pulsar-num-batch-message, the properties as JSON in
// X-Pulsar-Property, and publish time, producer name and sequence id in
// X-Pulsar-* headers.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/ledger"
)

func init() { registrations = append(registrations, registerTopics) }

const topicPath = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"

func registerTopics(a *api, s *Server) {
	ns := "/admin/v2/persistent/{tenant}/{namespace}"
	a.handle(s, "GET "+ns, a.listTopics)
	a.handle(s, "GET /admin/v2/namespaces/{tenant}/{namespace}/topics", a.listTopics)
	a.handle(s, "GET "+ns+"/partitioned", a.listPartitionedTopics)
	// No non-persistent topics; pulsaradmin's topic list asks for them too.
	a.handle(s, "GET /admin/v2/non-persistent/{tenant}/{namespace}", a.listNonPersistent)
	a.handle(s, "GET /admin/v2/non-persistent/{tenant}/{namespace}/partitioned", a.listNonPersistent)
	a.handle(s, "PUT "+topicPath, a.createTopic)
	a.handle(s, "DELETE "+topicPath, a.deleteTopic)
	a.handle(s, "PUT "+topicPath+"/partitions", a.createPartitioned)
	a.handle(s, "POST "+topicPath+"/partitions", a.updatePartitions)
	a.handle(s, "GET "+topicPath+"/partitions", a.getPartitions)
	a.handle(s, "DELETE "+topicPath+"/partitions", a.deletePartitioned)
	a.handle(s, "GET "+topicPath+"/stats", topicGet(a.b.TopicStats))
	a.handle(s, "GET "+topicPath+"/partitioned-stats", a.partitionedStats)
	a.handle(s, "GET "+topicPath+"/internalStats", topicGet(a.b.InternalStats))
	a.handle(s, "GET "+topicPath+"/subscriptions", topicGet(func(ctx context.Context, t broker.TopicName) ([]string, error) {
		subs, err := a.b.Subscriptions(ctx, t)
		return nonNil(subs), err
	}))
	a.handle(s, "PUT "+topicPath+"/subscription/{sub}", a.createSubscription)
	a.handle(s, "DELETE "+topicPath+"/subscription/{sub}", a.deleteSubscription)
	a.handle(s, "POST "+topicPath+"/subscription/{sub}/resetcursor/{timestamp}", a.resetCursorToTime)
	a.handle(s, "POST "+topicPath+"/subscription/{sub}/resetcursor", a.resetCursorToID)
	a.handle(s, "POST "+topicPath+"/subscription/{sub}/skip/{n}", a.skipMessages)
	a.handle(s, "POST "+topicPath+"/subscription/{sub}/skip_all", a.skipAll)
	a.handle(s, "GET "+topicPath+"/subscription/{sub}/position/{n}", a.peekMessage)
	a.handle(s, "GET "+topicPath+"/ledger/{ledger}/entry/{entry}", a.getEntry)
	a.handle(s, "GET "+topicPath+"/lastMessageId", a.lastMessageID)
	a.handle(s, "POST "+topicPath+"/terminate", a.terminate)
	a.handle(s, "PUT "+topicPath+"/unload", a.unload)
}

// topicOf parses the topic named by the request path.
func topicOf(r *http.Request) (broker.TopicName, error) {
	return parseTopic(r.PathValue("tenant"), r.PathValue("namespace"), r.PathValue("topic"))
}

func parseTopic(tenant, namespace, local string) (broker.TopicName, error) {
	for _, p := range []string{tenant, namespace, local} {
		if p == "" || strings.Contains(p, "/") {
			return broker.TopicName{}, errStatus(http.StatusBadRequest, "invalid topic name %s/%s/%s", tenant, namespace, local)
		}
	}
	t, err := broker.ParseTopicName("persistent://" + tenant + "/" + namespace + "/" + local)
	if err != nil {
		return t, errStatus(http.StatusBadRequest, "%v", err)
	}
	return t, nil
}

// boolQuery reads a boolean query parameter (absent: false).
func boolQuery(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errStatus(http.StatusBadRequest, "query parameter %s=%q: want true or false", name, v)
	}
	return b, nil
}

// intPath reads an integer path parameter.
func intPath(r *http.Request, name string) (int64, error) {
	v := r.PathValue(name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, errStatus(http.StatusBadRequest, "%s %q: want an integer", name, v)
	}
	return n, nil
}

// checkNamespace answers 400 for an invalid namespace name and 404 for
// one that does not exist.
func (a *api) checkNamespace(r *http.Request) error {
	t, err := parseTopic(r.PathValue("tenant"), r.PathValue("namespace"), "x")
	if err != nil {
		return err
	}
	return a.b.CheckNamespace(r.Context(), t)
}

func (a *api) listTopics(w http.ResponseWriter, r *http.Request) error {
	if err := a.checkNamespace(r); err != nil {
		return err
	}
	names, err := a.b.TopicsOfNamespace(r.Context(), r.PathValue("tenant"), r.PathValue("namespace"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, nonNil(names))
	return nil
}

func (a *api) listPartitionedTopics(w http.ResponseWriter, r *http.Request) error {
	if err := a.checkNamespace(r); err != nil {
		return err
	}
	names, err := a.b.PartitionedTopicsOfNamespace(r.Context(), r.PathValue("tenant"), r.PathValue("namespace"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, nonNil(names))
	return nil
}

func (a *api) listNonPersistent(w http.ResponseWriter, r *http.Request) error {
	if err := a.checkNamespace(r); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, []string{})
	return nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (a *api) createTopic(w http.ResponseWriter, r *http.Request) error {
	t, err := topicOf(r)
	if err != nil {
		return err
	}
	var props map[string]string // topic properties: accepted, not kept
	if err := readJSON(r, &props, false); err != nil {
		return err
	}
	if err := a.b.CreateTopic(r.Context(), t); err != nil {
		return err
	}
	noContent(w)
	return nil
}

func (a *api) deleteTopic(w http.ResponseWriter, r *http.Request) error {
	t, err := topicOf(r)
	if err != nil {
		return err
	}
	force, err := boolQuery(r, "force")
	if err != nil {
		return err
	}
	if err := a.b.DeleteTopic(r.Context(), t, force); err != nil {
		return err
	}
	noContent(w)
	return nil
}

// readPartitions reads a partition count: a JSON number, or an object
// {"partitions": N, ...} (pulsaradmin's media type for creation).
func readPartitions(r *http.Request) (int, error) {
	var raw json.RawMessage
	if err := readJSON(r, &raw, true); err != nil {
		return 0, err
	}
	var n int64
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '{' {
		var m struct {
			Partitions *int64 `json:"partitions"`
		}
		if err := json.Unmarshal(t, &m); err != nil || m.Partitions == nil {
			return 0, errStatus(http.StatusBadRequest, "invalid body: want the number of partitions")
		}
		n = *m.Partitions
	} else if err := json.Unmarshal(t, &n); err != nil {
		return 0, errStatus(http.StatusBadRequest, "invalid body %s: want the number of partitions", truncated(t))
	}
	if n < 1 {
		return 0, errStatus(http.StatusBadRequest, "number of partitions should be more than 0 (got %d)", n)
	}
	if n > broker.MaxPartitions {
		return 0, errStatus(http.StatusBadRequest, "number of partitions %d is over the limit %d", n, broker.MaxPartitions)
	}
	return int(n), nil
}

func truncated(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "..."
	}
	return string(b)
}

func (a *api) createPartitioned(w http.ResponseWriter, r *http.Request) error {
	t, err := topicOf(r)
	if err != nil {
		return err
	}
	if t.IsPartition() {
		return errStatus(http.StatusBadRequest, "partitioned topic name %s may not end in -partition-N", t)
	}
	n, err := readPartitions(r)
	if err != nil {
		return err
	}
	if err := a.b.CreatePartitioned(r.Context(), t, n); err != nil {
		return err
	}
	noContent(w)
	return nil
}

func (a *api) updatePartitions(w http.ResponseWriter, r *http.Request) error {
	t, err := topicOf(r)
	if err != nil {
		return err
	}
	n, err := readPartitions(r)
	if err != nil {
		return err
	}
	err = a.b.UpdatePartitions(r.Context(), t, n)
	switch {
	case errors.Is(err, broker.ErrShrinkPartitions):
		// Pulsar answers 422 (Unprocessable Entity) to a shrink.
		return errStatus(http.StatusUnprocessableEntity, "%v", err)
	case errors.Is(err, broker.ErrTopicNotFound):
		return errStatus(http.StatusUnprocessableEntity, "topic %s is not a partitioned topic", t)
	case err != nil:
		return err
	}
	noContent(w)
	return nil
}

func (a *api) getPartitions(w http.ResponseWriter, r *http.Request) error {
	t, err := topicOf(r)
	if err != nil {
		return err
	}
	n, err := a.b.PartitionedMetadata(r.Context(), t)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, broker.PartitionsMetadata{Partitions: n})
	return nil
}

func (a *api) deletePartitioned(w http.ResponseWriter, r *http.Request) error {
	t, err := topicOf(r)
	if err != nil {
		return err
	}
	force, err := boolQuery(r, "force")
	if err != nil {
		return err
	}
	if err := a.b.DeletePartitioned(r.Context(), t, force); err != nil {
		return err
	}
	noContent(w)
	return nil
}

func (a *api) partitionedStats(w http.ResponseWriter, r *http.Request) error {
	t, err := topicOf(r)
	if err != nil {
		return err
	}
	per, err := boolQuery(r, "perPartition")
	if err != nil {
		return err
	}
	st, err := a.b.PartitionedStats(r.Context(), t, per)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// messageIDJSON is Pulsar's MessageId as JSON (MessageIdImpl, and
// ResetCursorData for resets).
type messageIDJSON struct {
	LedgerID       *int64 `json:"ledgerId"`
	EntryID        *int64 `json:"entryId"`
	PartitionIndex *int32 `json:"partitionIndex,omitempty"`
	BatchIndex     *int32 `json:"batchIndex,omitempty"`
	IsExcluded     bool   `json:"isExcluded,omitempty"`
}

// messageID converts a message id body; earliest (-1:-1) and latest
// (Long.MAX_VALUE) markers are kept as such.
func (m messageIDJSON) messageID() (broker.MessageID, error) {
	if m.LedgerID == nil || m.EntryID == nil {
		return broker.MessageID{}, errStatus(http.StatusBadRequest, "message id needs ledgerId and entryId")
	}
	id := broker.MessageID{Position: ledger.Position{Ledger: *m.LedgerID, Entry: *m.EntryID}, BatchIndex: -1, Partition: -1}
	if m.PartitionIndex != nil {
		id.Partition = *m.PartitionIndex
	}
	if m.BatchIndex != nil {
		id.BatchIndex = *m.BatchIndex
	}
	if !id.IsEarliest() && !id.IsLatest() && id.Position.Entry < 0 {
		return id, errStatus(http.StatusBadRequest, "invalid message id %d:%d", *m.LedgerID, *m.EntryID)
	}
	if id.IsEarliest() {
		id.Position = ledger.Position{Ledger: -1, Entry: -1}
	}
	return id, nil
}

func (a *api) createSubscription(w http.ResponseWriter, r *http.Request) error {
	t, err := topicOf(r)
	if err != nil {
		return err
	}
	var body messageIDJSON
	if err := readJSON(r, &body, false); err != nil {
		return err
	}
	latest := int64(^uint64(0) >> 1)
	id := broker.MessageID{Position: ledger.Position{Ledger: latest, Entry: latest}, BatchIndex: -1, Partition: -1}
	if body.LedgerID != nil || body.EntryID != nil {
		if id, err = body.messageID(); err != nil {
			return err
		}
	}
	if err := a.b.CreateSubscription(r.Context(), t, r.PathValue("sub"), id); err != nil {
		return err
	}
	noContent(w)
	return nil
}

func (a *api) deleteSubscription(w http.ResponseWriter, r *http.Request) error {
	t, err := topicOf(r)
	if err != nil {
		return err
	}
	force, err := boolQuery(r, "force")
	if err != nil {
		return err
	}
	if err := a.b.DeleteSubscription(r.Context(), t, r.PathValue("sub"), force); err != nil {
		return err
	}
	noContent(w)
	return nil
}

func (a *api) resetCursorToTime(w http.ResponseWriter, r *http.Request) error {
	t, err := topicOf(r)
	if err != nil {
		return err
	}
	ms, err := intPath(r, "timestamp")
	if err != nil {
		return err
	}
	if err := a.b.ResetCursor(r.Context(), t, r.PathValue("sub"), nil, time.UnixMilli(ms), false); err != nil {
		return err
	}
	noContent(w)
	return nil
}

func (a *api) resetCursorToID(w http.ResponseWriter, r *http.Request) error {
	t, err := topicOf(r)
	if err != nil {
		return err
	}
	var body messageIDJSON
	if err := readJSON(r, &body, true); err != nil {
		return err
	}
	id, err := body.messageID()
	if err != nil {
		return err
	}
	if err := a.b.ResetCursor(r.Context(), t, r.PathValue("sub"), &id, time.Time{}, body.IsExcluded); err != nil {
		return err
	}
	noContent(w)
	return nil
}

func (a *api) skipMessages(w http.ResponseWriter, r *http.Request) error {
	t, err := topicOf(r)
	if err != nil {
		return err
	}
	n, err := intPath(r, "n")
	if err != nil {
		return err
	}
	if n < 0 {
		return errStatus(http.StatusBadRequest, "number of messages to skip %d: want ≥ 0", n)
	}
	if err := a.b.SkipMessages(r.Context(), t, r.PathValue("sub"), n); err != nil {
		return err
	}
	noContent(w)
	return nil
}

func (a *api) skipAll(w http.ResponseWriter, r *http.Request) error {
	t, err := topicOf(r)
	if err != nil {
		return err
	}
	if err := a.b.SkipMessages(r.Context(), t, r.PathValue("sub"), -1); err != nil {
		return err
	}
	noContent(w)
	return nil
}

func (a *api) peekMessage(w http.ResponseWriter, r *http.Request) error {
	t, err := topicOf(r)
	if err != nil {
		return err
	}
	n, err := intPath(r, "n")
	if err != nil {
		return err
	}
	if n < 1 || n > 1<<31 {
		return errStatus(http.StatusBadRequest, "position %d: want 1 or more", n)
	}
	e, err := a.b.PeekEntry(r.Context(), t, r.PathValue("sub"), int(n))
	if err != nil {
		return messageErr(err)
	}
	return writeEntry(w, e)
}

func (a *api) getEntry(w http.ResponseWriter, r *http.Request) error {
	t, err := topicOf(r)
	if err != nil {
		return err
	}
	l, err := intPath(r, "ledger")
	if err != nil {
		return err
	}
	e, err := intPath(r, "entry")
	if err != nil {
		return err
	}
	entry, err := a.b.ReadEntry(r.Context(), t, ledger.Position{Ledger: l, Entry: e})
	if err != nil {
		return messageErr(err)
	}
	return writeEntry(w, entry)
}

func messageErr(err error) error {
	if errors.Is(err, broker.ErrMessageNotFound) {
		return errStatus(http.StatusNotFound, "%v", err)
	}
	return err
}

// maxPeekSize bounds the decompressed size of a Kafka batch shown by a
// peek.
const maxPeekSize = 64 << 20

// writeEntry answers a stored message as Pulsar does (see the file
// comment).
func writeEntry(w http.ResponseWriter, e ledger.Entry) error {
	stored, err := broker.PulsarPayload(e, maxPeekSize) // a Kafka batch shows as a Pulsar batch
	if err != nil {
		return fmt.Errorf("entry %v: %w", e.Position, err)
	}
	md, payload, err := broker.ParseEntry(stored)
	if err != nil {
		return fmt.Errorf("entry %v: %w", e.Position, err)
	}
	if payload, err = broker.DecodePayload(md, payload); err != nil {
		return fmt.Errorf("entry %v: %w", e.Position, err)
	}
	h := w.Header()
	h.Set("X-Pulsar-Message-ID", e.Position.String())
	h.Set("X-Pulsar-publish-time", time.UnixMilli(int64(md.GetPublishTime())).UTC().Format("2006-01-02T15:04:05.000Z"))
	if md.ProducerName != nil {
		h.Set("X-Pulsar-producer-name", md.GetProducerName())
	}
	h.Set("X-Pulsar-sequence-id", strconv.FormatUint(md.GetSequenceId(), 10))
	if md.PartitionKey != nil {
		h.Set("X-Pulsar-partition-key", md.GetPartitionKey())
	}
	if md.EventTime != nil {
		h.Set("X-Pulsar-event-time", time.UnixMilli(int64(md.GetEventTime())).UTC().Format("2006-01-02T15:04:05.000Z"))
	}
	if md.NumMessagesInBatch != nil {
		h.Set("X-Pulsar-num-batch-message", strconv.Itoa(int(md.GetNumMessagesInBatch())))
		h.Set("X-Pulsar-batch-size", strconv.Itoa(len(payload)))
	}
	props := map[string]string{}
	for _, kv := range md.GetProperties() {
		props[kv.GetKey()] = kv.GetValue()
	}
	pj, _ := json.Marshal(props)
	h.Set("X-Pulsar-Property", string(pj))
	h.Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(payload)
	return nil
}

// messageIDOut is Pulsar's MessageId as answered (BatchMessageIdImpl
// adds batchIndex).
type messageIDOut struct {
	LedgerID       int64  `json:"ledgerId"`
	EntryID        int64  `json:"entryId"`
	PartitionIndex int32  `json:"partitionIndex"`
	BatchIndex     *int32 `json:"batchIndex,omitempty"`
}

func toMessageIDOut(id broker.MessageID) messageIDOut {
	out := messageIDOut{LedgerID: id.Position.Ledger, EntryID: id.Position.Entry, PartitionIndex: id.Partition}
	if id.BatchIndex >= 0 {
		bi := id.BatchIndex
		out.BatchIndex = &bi
	}
	return out
}

func (a *api) lastMessageID(w http.ResponseWriter, r *http.Request) error {
	t, err := topicOf(r)
	if err != nil {
		return err
	}
	id, _, err := a.b.LastMessageID(r.Context(), t)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toMessageIDOut(id))
	return nil
}

func (a *api) terminate(w http.ResponseWriter, r *http.Request) error {
	t, err := topicOf(r)
	if err != nil {
		return err
	}
	if n, err := a.b.PartitionedMetadata(r.Context(), t); err != nil {
		return err
	} else if n > 0 {
		return errStatus(http.StatusMethodNotAllowed, "termination of a partitioned topic is not allowed")
	}
	id, err := a.b.Terminate(r.Context(), t)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toMessageIDOut(id))
	return nil
}

func (a *api) unload(w http.ResponseWriter, r *http.Request) error {
	t, err := topicOf(r)
	if err != nil {
		return err
	}
	parts, err := a.b.PartitionNames(r.Context(), t)
	if err != nil {
		return err
	}
	for _, p := range parts {
		err := a.b.UnloadTopic(r.Context(), p)
		if owner, ok := notOwner(err); ok && len(parts) > 1 {
			// A partition served elsewhere: its owner unloads it.
			err = a.forward(r.Context(), owner, http.MethodPut, "/admin/v2/persistent/"+p.Tenant+"/"+p.Namespace+"/"+p.LocalName()+"/unload")
		}
		if err != nil {
			return err
		}
	}
	noContent(w)
	return nil
}

// topicGet answers a GET that reads one thing about the topic in the path
// with get's result as JSON.
func topicGet[T any](get func(context.Context, broker.TopicName) (T, error)) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		t, err := topicOf(r)
		if err != nil {
			return err
		}
		v, err := get(r.Context(), t)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, v)
		return nil
	}
}
