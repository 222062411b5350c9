package kafka_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

// kcat is librdkafka's command-line client (Debian package kcat,
// librdkafka 2.x). It produces and consumes one partition (-p); it has no
// admin commands beyond metadata (-L).

// kcatBin finds kcat or fails the test saying what to install: a
// compatibility test that silently skips proves nothing.
func kcatBin(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat not found (%v): install it with `apt-get install kcat` (scripts/test.sh does)", err)
	}
	return path
}

// runKcat runs kcat against srv with args and stdin, and returns its
// stdout; a non-zero exit fails the test with its stderr.
func runKcat(t testing.TB, ctx context.Context, srv *harness.Server, stdin []byte, args ...string) []byte {
	t.Helper()
	stdout, stderr, err := kcatOutput(t, ctx, srv, stdin, args...)
	if err != nil {
		t.Fatalf("kcat %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr)
	}
	if len(stderr) > 0 {
		t.Logf("kcat %s stderr:\n%s", strings.Join(args, " "), stderr)
	}
	return stdout
}

// kcatOutput runs kcat against srv (killing it after opTimeout).
func kcatOutput(t testing.TB, ctx context.Context, srv *harness.Server, stdin []byte, args ...string) (stdout, stderr []byte, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	args = append([]string{"-b", srv.KafkaAddr(), "-X", "client.id=magnetar-compat-kcat"}, args...)
	cmd := exec.CommandContext(ctx, kcatBin(t), args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.Bytes(), errOut.Bytes(), err
}

// kcatRecord is one line of kcat -C -J.
type kcatRecord struct {
	Topic     string   `json:"topic"`
	Partition int32    `json:"partition"`
	Offset    int64    `json:"offset"`
	Headers   []string `json:"headers"` // name, value, name, value, ...
	Key       *string  `json:"key"`     // nil: null key
	Payload   *string  `json:"payload"` // nil: null value
}

// kcatConsume reads count messages of partition 0 of topic from the
// beginning (-c: exit after count; see TestKcatEndOfPartition for -e) as
// JSON lines.
func kcatConsume(t testing.TB, ctx context.Context, srv *harness.Server, topic string, count int) []kcatRecord {
	t.Helper()
	out := runKcat(t, ctx, srv, nil, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-c", fmt.Sprint(count), "-J", "-q")
	return parseKcatJSON(t, out)
}

func parseKcatJSON(t testing.TB, out []byte) []kcatRecord {
	t.Helper()
	var recs []kcatRecord
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var r kcatRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("kcat -J line %q: %v", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return recs
}

func optBytes(s *string) []byte {
	if s == nil {
		return nil
	}
	return []byte(*s)
}

// TestKcatProduceConsume: kcat produces each codec's messages from stdin
// in one run (-K key delimiter; -Z: an empty key or value is sent as
// null, so nil keys and tombstones), headers from -H (the same on every
// message: kcat has no per-line headers), and reads them back.
func TestKcatProduceConsume(t *testing.T) {
	srv := shared.Server(t)
	ctx := testCtx(t)
	for _, codec := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		t.Run(codec, func(t *testing.T) {
			topic := harness.Name(t)
			msgs := compatMessages(codec)
			headers := []compatHeader{{"h-tag", codec}, {"h-client", "kcat"}}
			var in bytes.Buffer
			for i := range msgs {
				msgs[i].Headers = headers
				fmt.Fprintf(&in, "%s\t%s\n", msgs[i].Key, msgs[i].Value)
			}
			runKcat(t, ctx, srv, in.Bytes(), "-P", "-t", topic, "-p", "0", "-z", codec, "-K", "\t", "-Z",
				"-H", "h-tag="+codec, "-H", "h-client=kcat", "-X", "linger.ms=50")
			recs := kcatConsume(t, ctx, srv, topic, len(msgs))
			if len(recs) != len(msgs) {
				t.Fatalf("consumed %d messages, want %d: %+v", len(recs), len(msgs), recs)
			}
			for i, r := range recs {
				if r.Topic != topic || r.Partition != 0 || r.Offset != int64(i) {
					t.Fatalf("message %d at %s/%d offset %d, want %s/0 offset %d", i, r.Topic, r.Partition, r.Offset, topic, i)
				}
				if len(r.Headers)%2 != 0 {
					t.Fatalf("message %d: odd header list %q", i, r.Headers)
				}
				var hs []compatHeader
				for j := 0; j < len(r.Headers); j += 2 {
					hs = append(hs, compatHeader{r.Headers[j], r.Headers[j+1]})
				}
				checkCompatMsg(t, i, msgs[i], optBytes(r.Key), optBytes(r.Payload), hs)
			}
		})
	}
}

// TestKcatLargeMessage: a 4 MiB value given as a file (one message per
// file), which needs message.max.bytes raised on the producer; the
// consumer's fetch.message.max.bytes (1 MiB) is smaller than the batch.
func TestKcatLargeMessage(t *testing.T) {
	srv := shared.Server(t)
	ctx := testCtx(t)
	topic := harness.Name(t)
	// Printable, so the consumer's output can be compared byte for byte.
	large := []byte(hex.EncodeToString(compatRandom(t, largeValueSize/2)))
	file := filepath.Join(t.TempDir(), "large")
	if err := os.WriteFile(file, large, 0o644); err != nil {
		t.Fatal(err)
	}
	runKcat(t, ctx, srv, []byte("small-before\tv0\n"), "-P", "-t", topic, "-p", "0", "-K", "\t")
	runKcat(t, ctx, srv, nil, "-P", "-t", topic, "-p", "0", "-k", "large", "-X", "message.max.bytes=6000000", file)
	runKcat(t, ctx, srv, []byte("small-after\tv2\n"), "-P", "-t", topic, "-p", "0", "-K", "\t")

	out := runKcat(t, ctx, srv, nil, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-c", "3", "-q", "-f", "%o|%k|%S|%s\n")
	want := fmt.Sprintf("0|small-before|2|v0\n1|large|%d|%s\n2|small-after|2|v2\n", len(large), large)
	if string(out) != want {
		t.Fatalf("consumed %d bytes %.200q..., want %d bytes %.200q...", len(out), out, len(want), want)
	}
}

// TestKcatMetadata: kcat -L lists the broker (at the address the test
// dialled) and a topic kcat produced to, with its one partition led by
// that broker.
func TestKcatMetadata(t *testing.T) {
	srv := shared.Server(t)
	ctx := testCtx(t)
	topic := harness.Name(t)
	runKcat(t, ctx, srv, []byte("k\tv\n"), "-P", "-t", topic, "-K", "\t")
	type kcatTopic struct {
		Topic      string `json:"topic"`
		Partitions []struct {
			Partition int32 `json:"partition"`
			Leader    int32 `json:"leader"`
		} `json:"partitions"`
	}
	var md struct {
		Brokers []struct {
			ID   int32  `json:"id"`
			Name string `json:"name"`
		} `json:"brokers"`
		Topics []kcatTopic `json:"topics"`
	}
	out := runKcat(t, ctx, srv, nil, "-L", "-J", "-t", topic)
	if err := json.Unmarshal(out, &md); err != nil {
		t.Fatalf("kcat -L -J: %v\n%s", err, out)
	}
	if len(md.Brokers) != 1 || md.Brokers[0].Name != srv.KafkaAddr() {
		t.Fatalf("brokers %+v, want one at %s", md.Brokers, srv.KafkaAddr())
	}
	i := slices.IndexFunc(md.Topics, func(tp kcatTopic) bool { return tp.Topic == topic })
	if i < 0 {
		t.Fatalf("topic %s not in %s", topic, out)
	}
	ps := md.Topics[i].Partitions
	if len(ps) != 1 || ps[0].Partition != 0 || ps[0].Leader != md.Brokers[0].ID {
		t.Fatalf("topic %s partitions %+v, want partition 0 led by broker %d", topic, ps, md.Brokers[0].ID)
	}
}

// TestKcatEndOfPartition: kcat -e exits when it reaches the end of the
// partition, which librdkafka learns from a Fetch response at the high
// watermark with no records: its record set must be empty (size 0), not
// null (-1), or librdkafka reports "invalid MessageSetSize -1", backs off
// and fetches again, forever.
func TestKcatEndOfPartition(t *testing.T) {
	t.Parallel() // it waits out its deadline when failing
	srv := shared.Server(t)
	ctx := testCtx(t)
	topic := harness.Name(t)
	runKcat(t, ctx, srv, []byte("k0\tv0\nk1\tv1\n"), "-P", "-t", topic, "-p", "0", "-K", "\t")
	args := []string{"-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-J", "-q", "-d", "fetch"}
	// Two messages and the end take a fraction of a second.
	eofCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stdout, stderr, err := kcatOutput(t, eofCtx, srv, nil, args...)
	if err != nil {
		t.Fatalf("kcat %s did not reach the end of the partition: %v; librdkafka protocol errors:\n%s",
			strings.Join(args, " "), err, kcatProtocolErrors(stderr))
	}
	recs := parseKcatJSON(t, stdout)
	if len(recs) != 2 || recs[0].Offset != 0 || recs[1].Offset != 1 || optBytes(recs[1].Payload) == nil || *recs[1].Payload != "v1" {
		t.Fatalf("consumed %+v, want offsets 0 and 1", recs)
	}
}

// TestKcatOffsetOutOfRange: a fetch beyond the high watermark is answered
// OFFSET_OUT_OF_RANGE, which makes librdkafka apply auto.offset.reset
// (here: earliest) and read the partition from offset 0. The error
// partition's record set must be empty, not null, for librdkafka to get
// as far as the error code.
func TestKcatOffsetOutOfRange(t *testing.T) {
	t.Parallel() // it waits out its deadline when failing
	srv := shared.Server(t)
	ctx := testCtx(t)
	topic := harness.Name(t)
	runKcat(t, ctx, srv, []byte("k0\tv0\nk1\tv1\n"), "-P", "-t", topic, "-p", "0", "-K", "\t")
	args := []string{"-C", "-t", topic, "-p", "0", "-o", "100", "-c", "2", "-J", "-q", "-X", "auto.offset.reset=earliest", "-d", "fetch"}
	resetCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stdout, stderr, err := kcatOutput(t, resetCtx, srv, nil, args...)
	if err != nil {
		t.Fatalf("kcat %s did not reset to the earliest offset: %v; librdkafka protocol errors:\n%s",
			strings.Join(args, " "), err, kcatProtocolErrors(stderr))
	}
	recs := parseKcatJSON(t, stdout)
	if len(recs) != 2 || recs[0].Offset != 0 || recs[1].Offset != 1 {
		t.Fatalf("consumed %+v, want offsets 0 and 1", recs)
	}
}

// kcatProtocolErrors returns the first librdkafka protocol error lines
// of a debug log.
func kcatProtocolErrors(stderr []byte) string {
	var lines []string
	for line := range strings.Lines(string(stderr)) {
		if strings.Contains(line, "PROTOERR") && len(lines) < 4 {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "")
}
