package kafka_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

// kafkajs (npm, pinned in js/package.json) runs as node scripts in js/,
// which print their results as JSON. Its consumer needs consumer groups
// (JoinGroup, SyncGroup, offset commits), which the server does not serve
// yet; kafkajs consuming comes with them. Until then what kafkajs produces
// is read back with franz-go.

// kafkajsDir is the scripts' directory with its node_modules, or a test
// failure saying how to get them.
func kafkajsDir(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node not found (%v): install Node.js (Debian: apt-get install nodejs npm), then run `npm ci` in compat-tests/kafka/js", err)
	}
	dir, err := filepath.Abs("js")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "kafkajs")); err != nil {
		t.Fatalf("kafkajs is not installed (%v): run `npm ci` in compat-tests/kafka/js (scripts/test.sh does)", err)
	}
	return dir
}

// runKafkajs runs `node script` in js/ with the server's address in
// MAGNETAR_KAFKA, env and stdin, and decodes its JSON stdout into out; a
// failure reports its stderr.
func runKafkajs(t testing.TB, ctx context.Context, srv *harness.Server, script string, env []string, stdin []byte, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*opTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir = kafkajsDir(t)
	cmd.Env = append(append(os.Environ(), "MAGNETAR_KAFKA="+srv.KafkaAddr(), "KAFKAJS_NO_PARTITIONER_WARNING=1"), env...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s: %v\nstderr:\n%s\nstdout:\n%.2000s", script, err, stderr.Bytes(), stdout.Bytes())
	}
	if stderr.Len() > 0 {
		t.Logf("node %s stderr:\n%s", script, stderr.Bytes())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("node %s output: %v\n%.2000s", script, err, stdout.Bytes())
	}
}

// kafkajsInput is produce.js's stdin. Keys and values are base64 in
// JSON ([]byte), nil as null.
type kafkajsInput struct {
	Topic      string           `json:"topic"`
	Partition  int32            `json:"partition"`
	Codec      string           `json:"codec"`
	Idempotent bool             `json:"idempotent"`
	Messages   []kafkajsMessage `json:"messages"`
}

type kafkajsMessage struct {
	Key     []byte      `json:"key"`
	Value   []byte      `json:"value"`
	Headers [][2]string `json:"headers"`
}

// kafkajsProduce produces msgs to partition 0 of topic with produce.js in
// one send, and checks the RecordMetadata: no error, base offset first.
func kafkajsProduce(t testing.TB, ctx context.Context, srv *harness.Server, topic, codec string, idempotent bool, first int64, msgs []compatMsg) {
	t.Helper()
	in := kafkajsInput{Topic: topic, Codec: codec, Idempotent: idempotent}
	for _, m := range msgs {
		km := kafkajsMessage{Key: m.Key, Value: m.Value, Headers: [][2]string{}}
		for _, h := range m.Headers {
			km.Headers = append(km.Headers, [2]string{h.Key, h.Value})
		}
		in.Messages = append(in.Messages, km)
	}
	stdin, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Results []struct {
			TopicName  string `json:"topicName"`
			Partition  int32  `json:"partition"`
			ErrorCode  int16  `json:"errorCode"`
			BaseOffset string `json:"baseOffset"`
		} `json:"results"`
	}
	runKafkajs(t, ctx, srv, "produce.js", nil, stdin, &out)
	if len(out.Results) != 1 {
		t.Fatalf("produce results %+v, want one", out.Results)
	}
	r := out.Results[0]
	if r.TopicName != topic || r.Partition != 0 || r.ErrorCode != 0 || r.BaseOffset != strconv.FormatInt(first, 10) {
		t.Fatalf("produce result %+v, want %s/0 error 0 base offset %d", r, topic, first)
	}
}

// franzReadAll reads want from topic (one partition) with franz-go from
// the start, checking contents and offsets 0, 1, ...
func franzReadAll(t testing.TB, ctx context.Context, srv *harness.Server, topic string, want []compatMsg) {
	t.Helper()
	cl := franzClient(t, srv, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(16<<20), kgo.FetchMaxPartitionBytes(16<<20))
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	got := 0
	for got < len(want) {
		fs := cl.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatalf("poll after %d of %d records: %v", got, len(want), err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if got >= len(want) {
				t.Fatalf("unexpected record at offset %d: %.40q", r.Offset, r.Value)
			}
			if r.Partition != 0 || r.Offset != int64(got) {
				t.Fatalf("record %d at partition %d offset %d", got, r.Partition, r.Offset)
			}
			var hs []compatHeader
			for _, h := range r.Headers {
				hs = append(hs, compatHeader{h.Key, string(h.Value)})
			}
			checkCompatMsg(t, got, want[got], r.Key, r.Value, hs)
			got++
		})
	}
}

// TestKafkajsProduce: kafkajs's producer with each codec it can have
// (ZSTD's npm codec does not build; see js/common.js), its idempotent
// producer, and a 4 MiB message; franz-go reads everything back.
func TestKafkajsProduce(t *testing.T) {
	srv := shared.Server(t)
	ctx := testCtx(t)
	for _, codec := range []string{"none", "gzip", "snappy", "lz4"} {
		t.Run(codec, func(t *testing.T) {
			topic := harness.Name(t)
			msgs := compatMessages(codec)
			kafkajsProduce(t, ctx, srv, topic, codec, false, 0, msgs)
			franzReadAll(t, ctx, srv, topic, msgs)
		})
	}
	t.Run("idempotent", func(t *testing.T) {
		topic := harness.Name(t)
		msgs := compatMessages("idempotent")
		kafkajsProduce(t, ctx, srv, topic, "gzip", true, 0, msgs)
		franzReadAll(t, ctx, srv, topic, msgs)
	})
	t.Run("large", func(t *testing.T) {
		topic := harness.Name(t)
		msgs := []compatMsg{
			{Key: []byte("small-before"), Value: []byte("v0")},
			{Key: []byte("large"), Value: compatRandom(t, largeValueSize), Headers: []compatHeader{{"size", "4MiB"}}},
			{Key: []byte("small-after"), Value: []byte("v2")},
		}
		for i, m := range msgs {
			kafkajsProduce(t, ctx, srv, topic, "none", false, int64(i), []compatMsg{m})
		}
		franzReadAll(t, ctx, srv, topic, msgs)
	})
}

// TestKafkajsAdmin: kafkajs's admin client (js/admin.js) on one topic.
func TestKafkajsAdmin(t *testing.T) {
	srv := shared.Server(t)
	ctx := testCtx(t)
	topic := harness.Name(t)
	var out struct {
		Created      bool `json:"created"`
		CreatedAgain bool `json:"createdAgain"`
		Metadata     struct {
			Topics []struct {
				Name       string `json:"name"`
				Partitions []struct {
					PartitionID int32   `json:"partitionId"`
					Leader      int32   `json:"leader"`
					Replicas    []int32 `json:"replicas"`
				} `json:"partitions"`
			} `json:"topics"`
		} `json:"metadata"`
		Offsets []struct {
			Partition int32  `json:"partition"`
			Offset    string `json:"offset"`
			High      string `json:"high"`
			Low       string `json:"low"`
		} `json:"offsets"`
		Configs struct {
			Resources []struct {
				ErrorCode     int16  `json:"errorCode"`
				ResourceName  string `json:"resourceName"`
				ConfigEntries []struct {
					ConfigName  string `json:"configName"`
					ConfigValue string `json:"configValue"`
				} `json:"configEntries"`
			} `json:"resources"`
		} `json:"configs"`
		ListedBefore bool `json:"listedBefore"`
		ListedAfter  bool `json:"listedAfter"`
	}
	runKafkajs(t, ctx, srv, "admin.js", []string{"TOPIC=" + topic}, nil, &out)

	if !out.Created || out.CreatedAgain {
		t.Errorf("createTopics = %v, again = %v; want true, false (already exists)", out.Created, out.CreatedAgain)
	}
	if md := out.Metadata.Topics; len(md) != 1 || md[0].Name != topic || len(md[0].Partitions) != 3 {
		t.Errorf("fetchTopicMetadata = %+v, want %s with 3 partitions", md, topic)
	} else {
		for i, p := range md[0].Partitions {
			if p.PartitionID != int32(i) || len(p.Replicas) != 1 || p.Replicas[0] != p.Leader {
				t.Errorf("partition %d: %+v", i, p)
			}
		}
	}
	// Partition p holds p+1 messages, from offset 0.
	if len(out.Offsets) != 3 {
		t.Errorf("fetchTopicOffsets = %+v, want 3 partitions", out.Offsets)
	}
	for _, o := range out.Offsets {
		want := strconv.Itoa(int(o.Partition) + 1)
		if o.Offset != want || o.High != want || o.Low != "0" {
			t.Errorf("fetchTopicOffsets partition %d: offset %s high %s low %s; want %s %s 0", o.Partition, o.Offset, o.High, o.Low, want, want)
		}
	}
	if rs := out.Configs.Resources; len(rs) != 1 || rs[0].ErrorCode != 0 || rs[0].ResourceName != topic {
		t.Errorf("describeConfigs = %+v, want %s without error", rs, topic)
	} else {
		configs := map[string]string{}
		for _, e := range rs[0].ConfigEntries {
			configs[e.ConfigName] = e.ConfigValue
		}
		if configs["max.message.bytes"] != "5242880" {
			t.Errorf("describeConfigs: max.message.bytes = %q, want 5242880; all: %v", configs["max.message.bytes"], configs)
		}
	}
	if !out.ListedBefore || out.ListedAfter {
		t.Errorf("listTopics lists the topic: before deleteTopics %v, after %v; want true, false", out.ListedBefore, out.ListedAfter)
	}
	if t.Failed() {
		b, _ := json.MarshalIndent(out, "", "  ")
		t.Logf("admin.js answered:\n%s", strings.TrimSpace(string(b)))
	}
}
