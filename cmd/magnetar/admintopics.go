package main

// `magnetar admin topics`: /admin/v2/persistent/... and /lookup/v2/topic/...

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/msgpb"
)

// messageIDBody is Pulsar's MessageId as the REST API takes and returns it.
type messageIDBody struct {
	LedgerID       int64 `json:"ledgerId"`
	EntryID        int64 `json:"entryId"`
	PartitionIndex int   `json:"partitionIndex"`
}

// parseMessageIDArg reads --message-id: earliest, latest, or
// ledger:entry (further :partition:batch parts, as consume prints them,
// are ignored).
func parseMessageIDArg(s string, allowSpecial bool) (messageIDBody, error) {
	switch {
	case allowSpecial && s == "earliest":
		return messageIDBody{-1, -1, -1}, nil
	case allowSpecial && s == "latest":
		return messageIDBody{math.MaxInt64, math.MaxInt64, -1}, nil
	}
	parts := strings.Split(s, ":")
	if len(parts) >= 2 && len(parts) <= 4 {
		l, err1 := strconv.ParseInt(parts[0], 10, 64)
		e, err2 := strconv.ParseInt(parts[1], 10, 64)
		if err1 == nil && err2 == nil && l >= 0 && e >= 0 {
			return messageIDBody{l, e, -1}, nil
		}
	}
	if allowSpecial {
		return messageIDBody{}, fmt.Errorf("invalid message id %q: want LEDGER:ENTRY, earliest or latest", s)
	}
	return messageIDBody{}, fmt.Errorf("invalid message id %q: want LEDGER:ENTRY", s)
}

// parseResetTime reads reset-cursor's --time: a time back from now
// (10m, "10m ago", 2h, 1d) or an RFC 3339 time. It returns Unix ms.
func parseResetTime(s string, now time.Time) (int64, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UnixMilli(), nil
	}
	rel := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "ago"))
	d, err := parseRelativeTime(rel)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("invalid --time %q: want a time back from now (10m, 2h, 1d, \"10m ago\") or an RFC 3339 time (2026-01-02T15:04:05Z)", s)
	}
	return now.Add(-d).UnixMilli(), nil
}

func newAdminTopicsCommand(a *app) *cobra.Command {
	cmd := groupCommand("topics", "Create, inspect and manage topics and their subscriptions",
		"  magnetar admin topics create-partitioned orders -p 4\n  magnetar admin topics stats orders\n  magnetar admin topics peek orders -s audit -n 5")

	// leaf is a command on one topic.
	leaf := func(c *cobra.Command, action func(r *adminRun, t adminTopic) error) *cobra.Command {
		c.Args = cobra.ExactArgs(1)
		return a.adminLeaf(c, func(r *adminRun, args []string) error {
			t, err := parseAdminTopic(args[0])
			if err != nil {
				return err
			}
			return action(r, t)
		})
	}
	// get is a command that shows the answer of one GET.
	get := func(c *cobra.Command, suffix string) *cobra.Command {
		return leaf(c, func(r *adminRun, t adminTopic) error {
			resp, err := r.call("GET", t.path+suffix, nil, nil)
			if err != nil {
				return err
			}
			return r.show(resp)
		})
	}
	subFlag := func(c *cobra.Command, sub *string) {
		c.Flags().StringVarP(sub, "subscription", "s", "", "subscription name (required)")
		_ = c.MarkFlagRequired("subscription")
	}

	var partitions int
	createPart := &cobra.Command{Use: "create-partitioned TOPIC", Short: "Create a partitioned topic",
		Example: "  magnetar admin topics create-partitioned orders -p 4"}
	createPart.Flags().IntVarP(&partitions, "partitions", "p", 0, "number of partitions (required)")
	_ = createPart.MarkFlagRequired("partitions")
	updatePart := &cobra.Command{Use: "update-partitions TOPIC", Short: "Grow a partitioned topic to more partitions",
		Example: "  magnetar admin topics update-partitions orders -p 8"}
	updatePart.Flags().IntVarP(&partitions, "partitions", "p", 0, "new number of partitions (required; partitions cannot be removed)")
	_ = updatePart.MarkFlagRequired("partitions")

	var force bool
	del := &cobra.Command{Use: "delete TOPIC", Short: "Delete a topic, partitioned or not",
		Long: `Delete a topic, partitioned or not (a partitioned topic with all its
partitions). It must have no producers or consumers connected, unless --force.`,
		Example: "  magnetar admin topics delete orders --force"}
	del.Flags().BoolVar(&force, "force", false, "delete even with producers or consumers connected")

	var perPartition bool
	stats := &cobra.Command{Use: "stats TOPIC", Short: "Show a topic's statistics: rates, counters, storage, publishers, subscriptions",
		Long: `Show a topic's statistics: rates, counters, storage, publishers and
subscriptions (backlog, consumers, unacknowledged messages). For a
partitioned topic, the sum over its partitions (partitioned-stats), with
each partition's own too if --per-partition.`,
		Example: "  magnetar admin topics stats orders\n  magnetar admin topics stats orders -o json"}
	stats.Flags().BoolVar(&perPartition, "per-partition", false, "partitioned topics: show each partition's statistics too")
	partStats := &cobra.Command{Use: "partitioned-stats TOPIC", Short: "Show a partitioned topic's statistics, summed over its partitions",
		Example: "  magnetar admin topics partitioned-stats orders --per-partition"}
	partStats.Flags().BoolVar(&perPartition, "per-partition", false, "show each partition's statistics too")

	var sub, createAt, resetID, resetTime string
	var skipN, peekN int
	createSub := &cobra.Command{Use: "create-subscription TOPIC", Short: "Create a subscription at a position",
		Example: "  magnetar admin topics create-subscription orders -s audit --message-id earliest"}
	subFlag(createSub, &sub)
	createSub.Flags().StringVar(&createAt, "message-id", "latest", "where the subscription starts: earliest, latest or LEDGER:ENTRY")
	deleteSub := &cobra.Command{Use: "delete-subscription TOPIC", Short: "Delete a subscription (it must have no consumers, unless --force)",
		Example: "  magnetar admin topics delete-subscription orders -s audit"}
	subFlag(deleteSub, &sub)
	deleteSub.Flags().BoolVar(&force, "force", false, "delete even with consumers connected (they are disconnected)")
	reset := &cobra.Command{Use: "reset-cursor TOPIC", Short: "Move a subscription back or forward to a time or a message",
		Example: `  magnetar admin topics reset-cursor orders -s audit --time 10m
  magnetar admin topics reset-cursor orders -s audit --time "2026-01-02T15:04:05Z"
  magnetar admin topics reset-cursor orders -s audit --message-id 12:0`}
	subFlag(reset, &sub)
	reset.Flags().StringVar(&resetTime, "time", "", "to the first message published at or after this time: back from now (10m, \"10m ago\", 2h, 1d) or RFC 3339")
	reset.Flags().StringVar(&resetID, "message-id", "", "to this message: LEDGER:ENTRY")
	skip := &cobra.Command{Use: "skip TOPIC", Short: "Skip (acknowledge) the next N messages of a subscription",
		Example: "  magnetar admin topics skip orders -s audit -n 10"}
	subFlag(skip, &sub)
	skip.Flags().IntVarP(&skipN, "count", "n", 0, "messages to skip (required)")
	_ = skip.MarkFlagRequired("count")
	skipAll := &cobra.Command{Use: "skip-all TOPIC", Short: "Skip (acknowledge) a subscription's whole backlog",
		Example: "  magnetar admin topics skip-all orders -s audit"}
	subFlag(skipAll, &sub)
	peek := &cobra.Command{Use: "peek TOPIC", Short: "Show the next N messages of a subscription without consuming them",
		Example: "  magnetar admin topics peek orders -s audit -n 5"}
	subFlag(peek, &sub)
	peek.Flags().IntVarP(&peekN, "count", "n", 1, "messages to show")
	var ledger, entry int64
	byID := &cobra.Command{Use: "get-message-by-id TOPIC", Short: "Show the message(s) stored at a ledger and entry",
		Example: "  magnetar admin topics get-message-by-id orders --ledger 12 --entry 0"}
	byID.Flags().Int64Var(&ledger, "ledger", -1, "ledger id (required)")
	byID.Flags().Int64Var(&entry, "entry", -1, "entry id (required)")
	_ = byID.MarkFlagRequired("ledger")
	_ = byID.MarkFlagRequired("entry")

	cmd.AddCommand(
		leaf(&cobra.Command{Use: "create TOPIC", Short: "Create a non-partitioned topic",
			Example: "  magnetar admin topics create my-topic\n  magnetar admin topics create persistent://acme/orders/eu"},
			func(r *adminRun, t adminTopic) error {
				resp, err := r.call("PUT", t.path, nil, nil)
				if err != nil {
					return err
				}
				return r.done(resp, "created topic %s", t.name)
			}),
		leaf(createPart, func(r *adminRun, t adminTopic) error {
			if partitions < 1 {
				return fmt.Errorf("invalid --partitions %d: want 1 or more", partitions)
			}
			resp, err := r.call("PUT", t.path+"/partitions", nil, partitions)
			if err != nil {
				return err
			}
			return r.done(resp, "created topic %s with %d partitions", t.name, partitions)
		}),
		leaf(updatePart, func(r *adminRun, t adminTopic) error {
			if partitions < 1 {
				return fmt.Errorf("invalid --partitions %d: want 1 or more", partitions)
			}
			resp, err := r.call("POST", t.path+"/partitions", nil, partitions)
			if err != nil {
				return err
			}
			return r.done(resp, "topic %s now has %d partitions", t.name, partitions)
		}),
		get(&cobra.Command{Use: "get-partitions TOPIC", Short: "Show the number of partitions of a topic (0: not partitioned)",
			Example: "  magnetar admin topics get-partitions orders"}, "/partitions"),
		a.adminLeaf(&cobra.Command{Use: "list TENANT/NAMESPACE", Short: "List the topics of a namespace (partitions of partitioned topics included)",
			Args: cobra.ExactArgs(1), Example: "  magnetar admin topics list public/default"},
			func(r *adminRun, args []string) error {
				path, err := namespacePath(args[0])
				if err != nil {
					return err
				}
				resp, err := r.call("GET", strings.Replace(path, "/namespaces/", "/persistent/", 1), nil, nil)
				if err != nil {
					return err
				}
				return r.show(resp)
			}),
		leaf(del, func(r *adminRun, t adminTopic) error {
			n, err := topicPartitions(r, t)
			if err != nil {
				return err
			}
			path := t.path
			if n > 0 {
				path += "/partitions"
			}
			resp, err := r.call("DELETE", path, forceQuery(force), nil)
			if err != nil {
				return err
			}
			return r.done(resp, "deleted topic %s", t.name)
		}),
		leaf(stats, func(r *adminRun, t adminTopic) error {
			n, err := topicPartitions(r, t)
			if err != nil {
				return err
			}
			path, q := t.path+"/stats", url.Values(nil)
			if n > 0 {
				path, q = t.path+"/partitioned-stats", url.Values{"perPartition": {strconv.FormatBool(perPartition)}}
			}
			resp, err := r.call("GET", path, q, nil)
			if err != nil {
				return err
			}
			return r.show(resp)
		}),
		leaf(partStats, func(r *adminRun, t adminTopic) error {
			resp, err := r.call("GET", t.path+"/partitioned-stats", url.Values{"perPartition": {strconv.FormatBool(perPartition)}}, nil)
			if err != nil {
				return err
			}
			return r.show(resp)
		}),
		get(&cobra.Command{Use: "internal-stats TOPIC", Short: "Show a topic's storage: ledgers, cursors and their positions",
			Example: "  magnetar admin topics internal-stats orders"}, "/internalStats"),
		get(&cobra.Command{Use: "subscriptions TOPIC", Short: "List the subscriptions of a topic",
			Example: "  magnetar admin topics subscriptions orders"}, "/subscriptions"),
		leaf(createSub, func(r *adminRun, t adminTopic) error {
			id, err := parseMessageIDArg(createAt, true)
			if err != nil {
				return err
			}
			if id.LedgerID >= 0 && id.LedgerID < math.MaxInt64 {
				id.PartitionIndex = t.name.Partition
			}
			resp, err := r.call("PUT", t.sub(sub), nil, id)
			if err != nil {
				return err
			}
			return r.done(resp, "created subscription %s on %s", sub, t.name)
		}),
		leaf(deleteSub, func(r *adminRun, t adminTopic) error {
			resp, err := r.call("DELETE", t.sub(sub), forceQuery(force), nil)
			if err != nil {
				return err
			}
			return r.done(resp, "deleted subscription %s of %s", sub, t.name)
		}),
		leaf(reset, func(r *adminRun, t adminTopic) error {
			if (resetTime == "") == (resetID == "") {
				return errors.New("give one of --time or --message-id")
			}
			var resp *adminResponse
			var err error
			if resetTime != "" {
				ms, err := parseResetTime(resetTime, r.now())
				if err != nil {
					return err
				}
				resp, err = r.call("POST", t.sub(sub)+"/resetcursor/"+strconv.FormatInt(ms, 10), nil, nil)
				if err != nil {
					return err
				}
				return r.done(resp, "reset subscription %s of %s to %s", sub, t.name, time.UnixMilli(ms).UTC().Format(time.RFC3339Nano))
			}
			id, err := parseMessageIDArg(resetID, false)
			if err != nil {
				return err
			}
			id.PartitionIndex = t.name.Partition
			if resp, err = r.call("POST", t.sub(sub)+"/resetcursor", nil, id); err != nil {
				return err
			}
			return r.done(resp, "reset subscription %s of %s to %d:%d", sub, t.name, id.LedgerID, id.EntryID)
		}),
		leaf(skip, func(r *adminRun, t adminTopic) error {
			if skipN < 1 {
				return fmt.Errorf("invalid --count %d: want 1 or more", skipN)
			}
			resp, err := r.call("POST", t.sub(sub)+"/skip/"+strconv.Itoa(skipN), nil, nil)
			if err != nil {
				return err
			}
			return r.done(resp, "skipped %d messages of subscription %s of %s", skipN, sub, t.name)
		}),
		leaf(skipAll, func(r *adminRun, t adminTopic) error {
			resp, err := r.call("POST", t.sub(sub)+"/skip_all", nil, nil)
			if err != nil {
				return err
			}
			return r.done(resp, "skipped the backlog of subscription %s of %s", sub, t.name)
		}),
		leaf(peek, func(r *adminRun, t adminTopic) error {
			if peekN < 1 {
				return fmt.Errorf("invalid --count %d: want 1 or more", peekN)
			}
			var msgs []shownMessage
			// Position i is the i-th entry of the backlog; an entry holds
			// a batch of messages or one.
			for pos := 1; len(msgs) < peekN; pos++ {
				resp, err := r.call("GET", t.sub(sub)+"/position/"+strconv.Itoa(pos), nil, nil)
				if err != nil {
					var ae *apiError
					if pos > 1 && errors.As(err, &ae) && ae.Status == http.StatusNotFound {
						break // the backlog has fewer
					}
					return err
				}
				got, err := decodeEntryResponse(resp, t.name.Partition)
				if err != nil {
					return runtimeError(err)
				}
				msgs = append(msgs, got...)
			}
			return r.showMessages(msgs[:min(peekN, len(msgs))])
		}),
		leaf(byID, func(r *adminRun, t adminTopic) error {
			if ledger < 0 || entry < 0 {
				return errors.New("--ledger and --entry must be 0 or more")
			}
			resp, err := r.call("GET", fmt.Sprintf("%s/ledger/%d/entry/%d", t.path, ledger, entry), nil, nil)
			if err != nil {
				return err
			}
			msgs, err := decodeEntryResponse(resp, t.name.Partition)
			if err != nil {
				return runtimeError(err)
			}
			return r.showMessages(msgs)
		}),
		get(&cobra.Command{Use: "last-message-id TOPIC", Short: "Show the id of the last message of a topic",
			Example: "  magnetar admin topics last-message-id orders"}, "/lastMessageId"),
		leaf(&cobra.Command{Use: "terminate TOPIC", Short: "Terminate a topic: it takes no more messages",
			Example: "  magnetar admin topics terminate orders"},
			func(r *adminRun, t adminTopic) error {
				resp, err := r.call("POST", t.path+"/terminate", nil, nil)
				if err != nil {
					return err
				}
				var id messageIDBody
				if json.Unmarshal(resp.Body, &id) == nil && len(resp.Body) > 0 {
					return r.done(resp, "terminated topic %s; its last message is %d:%d", t.name, id.LedgerID, id.EntryID)
				}
				return r.done(resp, "terminated topic %s", t.name)
			}),
		leaf(&cobra.Command{Use: "unload TOPIC", Short: "Unload a topic: close it on its broker, to be loaded again on next use",
			Example: "  magnetar admin topics unload orders"},
			func(r *adminRun, t adminTopic) error {
				resp, err := r.call("PUT", t.path+"/unload", nil, nil)
				if err != nil {
					return err
				}
				return r.done(resp, "unloaded topic %s", t.name)
			}),
		leaf(&cobra.Command{Use: "lookup TOPIC", Short: "Show the broker that serves a topic",
			Example: "  magnetar admin topics lookup orders"},
			func(r *adminRun, t adminTopic) error {
				resp, err := r.call("GET", strings.Replace(t.path, "/admin/v2/", "/lookup/v2/topic/", 1), nil, nil)
				if err != nil {
					return err
				}
				return r.show(resp)
			}),
	)
	return cmd
}

// topicPartitions returns the number of partitions of t (0: not
// partitioned), from GET .../partitions: {"partitions": N}.
func topicPartitions(r *adminRun, t adminTopic) (int, error) {
	if t.name.IsPartition() {
		return 0, nil
	}
	resp, err := r.call("GET", t.path+"/partitions", nil, nil)
	if err != nil {
		return 0, err
	}
	var meta struct {
		Partitions int `json:"partitions"`
	}
	if err := json.Unmarshal(resp.Body, &meta); err != nil {
		return 0, runtimeError(fmt.Errorf("GET %s/partitions: unexpected answer %q", t.path, resp.Body))
	}
	return meta.Partitions, nil
}

// showMessages prints peeked messages: JSON lines with -o json.
func (r *adminRun) showMessages(msgs []shownMessage) error {
	for i, m := range msgs {
		if r.json {
			if err := writeMessageJSON(r.out, m); err != nil {
				return err
			}
			continue
		}
		writeMessageText(r.out, i+1, m)
	}
	return nil
}

// Headers of an entry answer (peek, get-message-by-id), as Pulsar sends
// them. The body is the entry's payload, uncompressed: for a batch, each
// message as a 4-byte big-endian size, a SingleMessageMetadata, and the
// payload of that size.
const (
	hdrMessageID   = "X-Pulsar-Message-ID"
	hdrPublishTime = "X-Pulsar-Publish-Time"
	hdrBatchSize   = "X-Pulsar-Num-Batch-Message"
	hdrProperties  = "X-Pulsar-Property"
	hdrPropPrefix  = "X-Pulsar-Property-"
	hdrKey         = "X-Pulsar-Partition-Key"
)

// decodeEntryResponse reads the messages of an entry answer of a topic
// (partition: its index, or -1). Their ids are ledger:entry:partition:batch
// as consume prints them (batch -1 if the entry is no batch).
func decodeEntryResponse(resp *adminResponse, partition int) ([]shownMessage, error) {
	h := resp.Header
	id := h.Get(hdrMessageID)
	if id == "" {
		return nil, errors.New("the broker's answer has no " + hdrMessageID + " header")
	}
	id = fmt.Sprintf("%s:%d", id, partition)
	base := shownMessage{ID: id + ":-1", Key: h.Get(hdrKey), PublishTime: parsePublishTime(h.Get(hdrPublishTime))}
	// The JSON header keeps the keys' case; the older one header per
	// property loses it to HTTP's canonical form.
	props := map[string]string{}
	if js := h.Get(hdrProperties); js != "" {
		if err := json.Unmarshal([]byte(js), &props); err != nil {
			return nil, fmt.Errorf("bad %s header: %w", hdrProperties, err)
		}
	} else {
		for k := range h {
			if strings.HasPrefix(k, http.CanonicalHeaderKey(hdrPropPrefix)) {
				props[k[len(hdrPropPrefix):]] = h.Get(k)
			}
		}
	}
	if len(props) > 0 {
		base.Properties = props
	}
	nb := h.Get(hdrBatchSize)
	if nb == "" {
		base.Payload = resp.Body
		return []shownMessage{base}, nil
	}
	count, err := strconv.Atoi(nb)
	if err != nil || count < 0 {
		return nil, fmt.Errorf("bad %s header %q", hdrBatchSize, nb)
	}
	base.ID = id
	return splitBatch(base, resp.Body, count)
}

func parsePublishTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms)
	}
	return time.Time{}
}

// splitBatch splits a batch payload into its count messages; each gets
// base's fields, its own key and properties, and the id id:index.
func splitBatch(base shownMessage, data []byte, count int) ([]shownMessage, error) {
	out := make([]shownMessage, 0, count)
	for i := range count {
		if len(data) < 4 {
			return nil, fmt.Errorf("batch of %d messages truncated at message %d", count, i)
		}
		size := binary.BigEndian.Uint32(data)
		data = data[4:]
		if uint64(size) > uint64(len(data)) {
			return nil, fmt.Errorf("batch of %d messages: message %d metadata truncated", count, i)
		}
		var md msgpb.SingleMessageMetadata
		if err := proto.Unmarshal(data[:size], &md); err != nil {
			return nil, fmt.Errorf("batch of %d messages: message %d metadata: %w", count, i, err)
		}
		data = data[size:]
		n := int(md.GetPayloadSize())
		if n < 0 || n > len(data) {
			return nil, fmt.Errorf("batch of %d messages: message %d payload truncated", count, i)
		}
		m := base
		m.ID = fmt.Sprintf("%s:%d", base.ID, i)
		m.Payload, data = data[:n], data[n:]
		m.Key = md.GetPartitionKey()
		if len(md.GetProperties()) > 0 {
			m.Properties = map[string]string{}
			for _, kv := range md.GetProperties() {
				m.Properties[kv.GetKey()] = kv.GetValue()
			}
		}
		out = append(out, m)
	}
	return out, nil
}
