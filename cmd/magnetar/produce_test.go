package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestProduceArgs(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "m.json")
	if err := os.WriteFile(file, []byte("{\"a\": 1}\nsecond line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	opts, err := produceArgs("acme/orders/eu", []string{"one", "two,three"}, []string{file}, []string{"k=v", "empty=", "eq=a=b"}, "key-1", 3)
	if err != nil {
		t.Fatal(err)
	}
	want := produceOptions{
		Topic:      "persistent://acme/orders/eu",
		Messages:   [][]byte{[]byte("one"), []byte("two,three"), []byte("{\"a\": 1}\nsecond line\n")},
		Key:        "key-1",
		Properties: map[string]string{"k": "v", "empty": "", "eq": "a=b"},
		Repeat:     3,
	}
	if !reflect.DeepEqual(opts, want) {
		t.Errorf("produceArgs = %+v, want %+v", opts, want)
	}
	if opts, err := produceArgs("t", nil, nil, nil, "", 1); err != nil || !opts.FromStdin || opts.Topic != "persistent://public/default/t" {
		t.Errorf("no -m or -f: %+v, %v; want stdin", opts, err)
	}
	for _, tc := range []struct {
		topic  string
		files  []string
		props  []string
		repeat int
		want   string
	}{
		{"a/b", nil, nil, 1, "invalid topic name"},
		{"t", []string{filepath.Join(dir, "missing")}, nil, 1, "--files: open "},
		{"t", nil, []string{"novalue"}, 1, `invalid property "novalue": want key=value`},
		{"t", nil, []string{"=v"}, 1, `invalid property "=v"`},
		{"t", nil, nil, 0, "invalid --num-produce 0"},
	} {
		if _, err := produceArgs(tc.topic, []string{"m"}, tc.files, tc.props, "", tc.repeat); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("produceArgs(%q, %v, %v, %d) = %v, want %q", tc.topic, tc.files, tc.props, tc.repeat, err, tc.want)
		}
	}
}

// TestClientUsageErrors: mistakes exit 2 before connecting.
func TestClientUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"produce"}, "accepts 1 arg(s), received 0"},
		{[]string{"produce", "a/b", "-m", "x"}, "invalid topic name"},
		{[]string{"produce", "t", "-m", "x", "-p", "bad"}, `invalid property "bad"`},
		{[]string{"produce", "t", "-m", "x", "-n", "0"}, "invalid --num-produce 0"},
		{[]string{"produce", "t", "-m", "x", "--service-url", "http://localhost:6650"}, `invalid service-url "http://localhost:6650" (from flag --service-url): want pulsar://host:port`},
		{[]string{"consume", "t"}, `required flag(s) "subscription" not set`},
		{[]string{"consume", "t", "-s", "a/b"}, `invalid --subscription "a/b"`},
		{[]string{"consume", "t", "-s", "s", "-t", "queue"}, "invalid --subscription-type: want one of exclusive, failover, key_shared, shared"},
		{[]string{"consume", "t", "-s", "s", "-p", "oldest"}, "invalid --subscription-position: want one of earliest, latest"},
		{[]string{"consume", "t", "-s", "s", "-n", "-1"}, "invalid --num-messages -1"},
		{[]string{"consume", "t", "-s", "s", "--format", "xml"}, `invalid --format "xml": want text or json`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			clearEnv(t)
			t.Setenv("MAGNETAR_SERVICE_URL", "pulsar://127.0.0.1:1")
			r := run(t, tc.args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", r.code, r.stderr, exitUsage, tc.want)
			}
			if strings.Contains(r.stderr, "cannot reach") {
				t.Errorf("connected before checking the arguments")
			}
		})
	}
}

// TestClientKafkaErrors: --kafka's usage errors exit 2; an unreachable
// Kafka listener fails at once with exit 1.
func TestClientKafkaErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"consume", "t", "-s", "a/b", "--kafka"}, exitUsage, `invalid --subscription "a/b"`},
		{[]string{"produce", "t", "-m", "x", "--kafka", "--kafka-bootstrap", "localhost"}, exitUsage, `invalid kafka-bootstrap "localhost"`},
		{[]string{"produce", "t", "-m", "x", "--kafka", "--kafka-bootstrap", addr}, exitRuntime, "cannot reach the broker's Kafka listener at " + addr},
		{[]string{"consume", "t", "--kafka", "--kafka-bootstrap", addr}, exitRuntime, "cannot reach the broker's Kafka listener at " + addr},
	} {
		clearEnv(t)
		r := run(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
}

// TestClientUnreachable: produce and consume fail at once, with exit 1,
// when nothing listens at the service URL.
func TestClientUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	for _, args := range [][]string{{"produce", "t", "-m", "x"}, {"consume", "t", "-s", "s"}} {
		clearEnv(t)
		start := time.Now()
		r := run(t, append(args, "--service-url", "pulsar://"+addr)...)
		want := "magnetar " + args[0] + ": cannot reach the broker at pulsar://" + addr + ": connection refused"
		if r.code != exitRuntime || !strings.Contains(r.stderr, want) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", args, r.code, r.stderr, want)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%v: took %v", args, d)
		}
	}
}

func TestWriteMessage(t *testing.T) {
	at := time.Date(2026, 1, 2, 15, 4, 5, 123e6, time.UTC)
	m := shownMessage{ID: "5:1:-1:-1", Topic: "persistent://public/default/t", PublishTime: at, Key: "k",
		Properties: map[string]string{"b": "2", "a": "1"}, Payload: []byte("héllo")}
	var b bytes.Buffer
	writeMessageText(&b, 3, m)
	want := "----- message 3 -----\nid:           5:1:-1:-1\ntopic:        persistent://public/default/t\n" +
		"publish time: 2026-01-02T15:04:05.123Z\nkey:          k\nproperties:   a=1, b=2\npayload:      héllo\n"
	if b.String() != want {
		t.Errorf("text:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	if err := writeMessageJSON(&b, m); err != nil {
		t.Fatal(err)
	}
	wantJSON := `{"id":"5:1:-1:-1","topic":"persistent://public/default/t","publishTime":"2026-01-02T15:04:05.123Z","key":"k","properties":{"a":"1","b":"2"},"payload":"héllo"}` + "\n"
	if b.String() != wantJSON {
		t.Errorf("json:\n%s\nwant:\n%s", b.String(), wantJSON)
	}
	// Not printable: a hex dump; not UTF-8: base64. Empty payloads are
	// printable.
	b.Reset()
	writeMessageText(&b, 1, shownMessage{ID: "1:2", Payload: []byte{0, 1, 2}})
	if !strings.Contains(b.String(), "payload:      (3 bytes, hex)\n00000000  00 01 02") {
		t.Errorf("binary text:\n%s", b.String())
	}
	b.Reset()
	writeMessageJSON(&b, shownMessage{ID: "1:2", Payload: []byte{0xff}})
	if b.String() != `{"id":"1:2","payloadBase64":"/w=="}`+"\n" {
		t.Errorf("binary json: %s", b.String())
	}
	b.Reset()
	writeMessageJSON(&b, shownMessage{ID: "1:3", Payload: nil})
	if b.String() != `{"id":"1:3","payload":""}`+"\n" {
		t.Errorf("empty json: %s", b.String())
	}
}

// runBinary runs the magnetar binary to completion with stdin and
// returns its output and exit code.
func runBinary(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, magnetarBinary(t), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envPrefix) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("magnetar %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// TestCLIEndToEnd drives a real standalone with the binary: produce,
// consume, and the admin commands.
func TestCLIEndToEnd(t *testing.T) {
	_, ready := startStandaloneProc(t)
	svc := []string{"--service-url", "pulsar://" + ready.PulsarAdvertised}
	admin := []string{"--url", "http://" + ready.HTTP}
	const topic = "cli-e2e"

	out, errOut, code := runBinary(t, "", append([]string{"produce", topic, "-m", "first", "-m", "second", "-m", "third",
		"-k", "key-1", "-p", "source=test"}, svc...)...)
	if code != 0 {
		t.Fatalf("produce: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	ids := strings.Fields(out)
	if len(ids) != 3 || !strings.Contains(errOut, "3 messages produced to persistent://public/default/"+topic) {
		t.Errorf("produce: stdout %q (want 3 message ids), stderr %q", out, errOut)
	}

	// Stdin, one message a line.
	if out, errOut, code := runBinary(t, "fourth\nfifth\n", append([]string{"produce", topic}, svc...)...); code != 0 || len(strings.Fields(out)) != 2 {
		t.Fatalf("produce from stdin: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	out, errOut, code = runBinary(t, "", append([]string{"consume", topic, "-s", "cli", "-n", "3", "-p", "earliest"}, svc...)...)
	if code != 0 {
		t.Fatalf("consume: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for i, p := range []string{"first", "second", "third"} {
		block := "----- message " + strconv.Itoa(i+1) + " -----\nid:           " + ids[i] + "\ntopic:        persistent://public/default/" + topic + "\npublish time: "
		if !strings.Contains(out, block) || !strings.Contains(out, "key:          key-1\nproperties:   source=test\npayload:      "+p+"\n") {
			t.Errorf("consume output lacks message %d (%s, %s):\n%s", i+1, ids[i], p, out)
		}
	}
	if strings.Contains(out, "fourth") {
		t.Errorf("consume printed more than -n 3:\n%s", out)
	}

	// The same subscription goes on where it left off; JSON lines.
	out, errOut, code = runBinary(t, "", append([]string{"consume", topic, "-s", "cli", "-n", "2", "--format", "json"}, svc...)...)
	if code != 0 {
		t.Fatalf("consume json: exit %d\nstderr:\n%s", code, errOut)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m messageJSON
		if err := json.Unmarshal([]byte(line), &m); err != nil || m.Payload == nil {
			t.Fatalf("consume json line %q: %v", line, err)
		}
		got = append(got, *m.Payload)
	}
	if strings.Join(got, ",") != "fourth,fifth" {
		t.Errorf("consume json: payloads %v, want fourth, fifth", got)
	}

	out, errOut, code = runBinary(t, "", append([]string{"admin", "tenants", "list"}, admin...)...)
	if code != 0 || !strings.Contains("\n"+out, "\npublic\n") {
		t.Errorf("admin tenants list: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	out, errOut, code = runBinary(t, "", append([]string{"admin", "topics", "stats", topic, "-o", "json"}, admin...)...)
	var stats struct {
		MsgInCounter  int64          `json:"msgInCounter"`
		Subscriptions map[string]any `json:"subscriptions"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &stats) != nil {
		t.Fatalf("admin topics stats: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if stats.MsgInCounter < 3 || stats.Subscriptions["cli"] == nil {
		t.Errorf("admin topics stats: msgInCounter %d (want ≥ 3), subscriptions %v (want cli):\n%s", stats.MsgInCounter, stats.Subscriptions, out)
	}
	// The text form shows the same counter.
	out, _, code = runBinary(t, "", append([]string{"admin", "topics", "stats", "persistent://public/default/" + topic}, admin...)...)
	if code != 0 || !strings.Contains(out, "msgInCounter ") {
		t.Errorf("admin topics stats (text): exit %d\n%s", code, out)
	}

	// The Kafka protocol on the same topic: what Pulsar wrote, Kafka reads
	// (offsets 0..4), and what Kafka writes continues the offsets.
	kafka := []string{"--kafka", "--kafka-bootstrap", ready.KafkaAdvertised}
	out, errOut, code = runBinary(t, "", append([]string{"produce", topic, "-m", "sixth", "-k", "key-6", "-p", "h=v"}, kafka...)...)
	if code != 0 || strings.TrimSpace(out) != "0:5" {
		t.Fatalf("produce --kafka: exit %d, stdout %q (want 0:5), stderr %q", code, out, errOut)
	}
	out, errOut, code = runBinary(t, "", append([]string{"consume", topic, "-n", "6", "-p", "earliest", "--format", "json"}, kafka...)...)
	if code != 0 {
		t.Fatalf("consume --kafka: exit %d\nstderr:\n%s", code, errOut)
	}
	got = nil
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m messageJSON
		if err := json.Unmarshal([]byte(line), &m); err != nil || m.Payload == nil {
			t.Fatalf("consume --kafka line %q: %v", line, err)
		}
		got = append(got, m.ID+"="+*m.Payload)
	}
	if want := "0:0=first,0:1=second,0:2=third,0:3=fourth,0:4=fifth,0:5=sixth"; strings.Join(got, ",") != want {
		t.Errorf("consume --kafka: %v, want %s", got, want)
	}
	// The Kafka group "cli" is the subscription "cli", which acknowledged
	// five messages above: the group starts at the sixth.
	out, errOut, code = runBinary(t, "", append([]string{"consume", topic, "-s", "cli", "-n", "1", "--format", "json"}, kafka...)...)
	if code != 0 || !strings.Contains(out, `"id":"0:5"`) || !strings.Contains(out, `"payload":"sixth"`) {
		t.Errorf("consume --kafka -s cli: exit %d, stdout %q, stderr %q; want 0:5 sixth", code, out, errOut)
	}

	// A refusal from the server: exit 1 with its reason and status.
	_, errOut, code = runBinary(t, "", append([]string{"admin", "tenants", "get", "no-such-tenant"}, admin...)...)
	if code != 1 || !strings.Contains(errOut, "(404 Not Found, GET /admin/v2/tenants/no-such-tenant)") {
		t.Errorf("admin tenants get no-such-tenant: exit %d, stderr %q", code, errOut)
	}
}

// TestBinaryCompletion: the completion scripts are there for bash, zsh
// and fish.
func TestBinaryCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		out, errOut, code := runBinary(t, "", "completion", sh)
		if code != 0 || !strings.Contains(out, "magnetar") || len(out) < 1000 {
			t.Errorf("completion %s: exit %d, %d bytes, stderr %q", sh, code, len(out), errOut)
		}
	}
	// Commands complete dynamically.
	out, _, code := runBinary(t, "", "__complete", "admin", "topics", "")
	if code != 0 || !strings.Contains(out, "create-partitioned") || !strings.Contains(out, "reset-cursor") {
		t.Errorf("__complete admin topics: exit %d\n%s", code, out)
	}
}

// TestKafkaError: the Kafka client's failures are worded for the command
// line, a timeout saying how long was waited and where to look.
func TestKafkaError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{kerr.NotEnoughReplicas, "send record 1: NOT_ENOUGH_REPLICAS: Messages are rejected since there are fewer in-sync replicas than required."},
		{context.DeadlineExceeded, "send record 1: context deadline exceeded (no answer from the broker within 10s)"},
		{kgo.ErrRecordTimeout, "send record 1: records have timed out before they were able to be produced (the broker did not acknowledge it within 10s; its log says why)"},
		{errors.New("other"), "send record 1: other"},
	} {
		if got := kafkaError("send record 1", tc.err).Error(); got != tc.want {
			t.Errorf("kafkaError(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
