package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/msgpb"
)

// fakeAnswer is what the fake REST API answers to one "METHOD /path".
type fakeAnswer struct {
	status int
	body   string
	header map[string]string
}

// fakeRequest is a request the fake REST API received.
type fakeRequest struct {
	Method, Path, Query, Body string
}

func (r fakeRequest) String() string {
	s := r.Method + " " + r.Path
	if r.Query != "" {
		s += "?" + r.Query
	}
	if r.Body != "" {
		s += " " + r.Body
	}
	return s
}

// fakeAdmin mimics the REST API: scripted answers by "METHOD /path"
// (204 with no body when none is scripted), every request recorded.
type fakeAdmin struct {
	*httptest.Server
	mu       sync.Mutex
	answers  map[string]fakeAnswer
	requests []fakeRequest
}

func newFakeAdmin(t *testing.T, answers map[string]fakeAnswer) *fakeAdmin {
	f := &fakeAdmin{answers: answers}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.requests = append(f.requests, fakeRequest{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, string(body)})
		a, ok := f.answers[r.Method+" "+r.URL.EscapedPath()]
		f.mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		for k, v := range a.header {
			w.Header().Set(k, v)
		}
		if a.body != "" && a.header["Content-Type"] == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(a.status)
		io.WriteString(w, a.body)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAdmin) got() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, len(f.requests))
	for i, r := range f.requests {
		out[i] = r.String()
	}
	return out
}

func ok(body string) fakeAnswer { return fakeAnswer{status: 200, body: body} }

// TestAdminRequests: each command sends Pulsar's requests (method, path,
// query, JSON body) and prints the answer.
func TestAdminRequests(t *testing.T) {
	const topic = "/admin/v2/persistent/public/default/t1"
	answers := map[string]fakeAnswer{
		"GET /admin/v2/clusters":                                ok(`["standalone"]`),
		"GET /admin/v2/clusters/standalone":                     ok(`{"serviceUrl":"http://h:8080","brokerServiceUrl":"pulsar://h:6650"}`),
		"GET /admin/v2/tenants":                                 ok(`["public","pulsar"]`),
		"GET /admin/v2/tenants/acme":                            ok(`{"adminRoles":["alice"],"allowedClusters":["standalone"]}`),
		"GET /admin/v2/namespaces/public":                       ok(`["public/default"]`),
		"GET /admin/v2/namespaces/public/default":               ok(`{"retention_policies":{"retentionTimeInMinutes":60,"retentionSizeInMB":10},"deduplicationEnabled":true}`),
		"GET /admin/v2/namespaces/public/default/messageTTL":    ok(`3600`),
		"GET " + topic + "/partitions":                          ok(`{"partitions":0}`),
		"GET /admin/v2/persistent/public/default/p1/partitions": ok(`{"partitions":3}`),
		"GET " + topic + "/stats":                               ok(`{"msgInCounter":3,"subscriptions":{"s1":{"msgBacklog":2,"consumers":[]}}}`),
		"POST " + topic + "/terminate":                          ok(`{"ledgerId":7,"entryId":2,"partitionIndex":-1}`),
		"GET /lookup/v2/topic/persistent/public/default/t1":     ok(`{"brokerUrl":"pulsar://h:6650","httpUrl":"http://h:8080"}`),
	}
	for _, tc := range []struct {
		args []string
		want []string // requests, in order
		out  []string // in stdout
	}{
		{[]string{"clusters", "list"}, []string{"GET /admin/v2/clusters"}, []string{"standalone\n"}},
		{[]string{"clusters", "get", "standalone"}, []string{"GET /admin/v2/clusters/standalone"}, []string{"brokerServiceUrl  pulsar://h:6650\n"}},
		{[]string{"tenants", "list"}, []string{"GET /admin/v2/tenants"}, []string{"public\npulsar\n"}},
		{[]string{"tenants", "get", "acme"}, []string{"GET /admin/v2/tenants/acme"}, []string{"adminRoles  alice\n", "allowedClusters  standalone\n"}},
		{[]string{"tenants", "create", "acme", "--admin-roles", "a,b", "--allowed-clusters", "c1"},
			[]string{`PUT /admin/v2/tenants/acme {"adminRoles":["a","b"],"allowedClusters":["c1"]}`}, []string{"created tenant acme"}},
		{[]string{"tenants", "create", "acme"},
			[]string{"GET /admin/v2/clusters", `PUT /admin/v2/tenants/acme {"adminRoles":[],"allowedClusters":["standalone"]}`}, nil},
		{[]string{"tenants", "update", "acme", "--admin-roles", "carol"},
			[]string{"GET /admin/v2/tenants/acme", `POST /admin/v2/tenants/acme {"adminRoles":["carol"],"allowedClusters":["standalone"]}`}, []string{"updated tenant acme"}},
		{[]string{"tenants", "delete", "acme", "--force"}, []string{"DELETE /admin/v2/tenants/acme?force=true"}, []string{"deleted tenant acme"}},
		{[]string{"namespaces", "list", "public"}, []string{"GET /admin/v2/namespaces/public"}, []string{"public/default\n"}},
		{[]string{"namespaces", "create", "acme/orders"}, []string{"PUT /admin/v2/namespaces/acme/orders"}, []string{"created namespace acme/orders"}},
		{[]string{"namespaces", "delete", "acme/orders"}, []string{"DELETE /admin/v2/namespaces/acme/orders"}, nil},
		{[]string{"namespaces", "delete", "acme/orders", "--force"}, []string{"DELETE /admin/v2/namespaces/acme/orders?force=true"}, nil},
		{[]string{"namespaces", "policies", "public/default"}, []string{"GET /admin/v2/namespaces/public/default"},
			[]string{"deduplicationEnabled  true\n", "retention_policies.retentionSizeInMB  10\n"}},
		{[]string{"namespaces", "topics", "public/default"}, []string{"GET /admin/v2/namespaces/public/default/topics"}, nil},
		{[]string{"namespaces", "set-retention", "public/default", "--time", "3d", "--size", "10G"},
			[]string{`POST /admin/v2/namespaces/public/default/retention {"retentionSizeInMB":10240,"retentionTimeInMinutes":4320}`}, nil},
		{[]string{"namespaces", "set-retention", "public/default", "--time", "-1", "--size", "-1"},
			[]string{`POST /admin/v2/namespaces/public/default/retention {"retentionSizeInMB":-1,"retentionTimeInMinutes":-1}`}, nil},
		{[]string{"namespaces", "get-retention", "public/default"}, []string{"GET /admin/v2/namespaces/public/default/retention"}, nil},
		{[]string{"namespaces", "remove-retention", "public/default"}, []string{"DELETE /admin/v2/namespaces/public/default/retention"}, nil},
		{[]string{"namespaces", "set-message-ttl", "public/default", "--ttl", "1h"}, []string{`POST /admin/v2/namespaces/public/default/messageTTL 3600`}, nil},
		{[]string{"namespaces", "set-message-ttl", "public/default", "--ttl", "90"}, []string{`POST /admin/v2/namespaces/public/default/messageTTL 90`}, nil},
		{[]string{"namespaces", "get-message-ttl", "public/default"}, []string{"GET /admin/v2/namespaces/public/default/messageTTL"}, []string{"3600\n"}},
		{[]string{"namespaces", "remove-message-ttl", "public/default"}, []string{"DELETE /admin/v2/namespaces/public/default/messageTTL"}, nil},
		{[]string{"namespaces", "set-backlog-quota", "public/default", "--limit-size", "1G", "--policy", "producer_exception"},
			[]string{`POST /admin/v2/namespaces/public/default/backlogQuota?backlogQuotaType=destination_storage {"limitSize":1073741824,"limitTime":-1,"policy":"producer_exception"}`}, nil},
		{[]string{"namespaces", "set-backlog-quota", "public/default", "--limit-size", "10M", "--limit-time", "1h", "--policy", "consumer_backlog_eviction"},
			[]string{`POST /admin/v2/namespaces/public/default/backlogQuota?backlogQuotaType=destination_storage {"limitSize":10485760,"limitTime":-1,"policy":"consumer_backlog_eviction"}`,
				`POST /admin/v2/namespaces/public/default/backlogQuota?backlogQuotaType=message_age {"limitSize":-1,"limitTime":3600,"policy":"consumer_backlog_eviction"}`}, nil},
		{[]string{"namespaces", "get-backlog-quotas", "public/default"}, []string{"GET /admin/v2/namespaces/public/default/backlogQuotaMap"}, nil},
		{[]string{"namespaces", "remove-backlog-quota", "public/default"}, []string{"DELETE /admin/v2/namespaces/public/default/backlogQuota?backlogQuotaType=destination_storage"}, nil},
		{[]string{"namespaces", "remove-backlog-quota", "public/default", "--type", "message_age"}, []string{"DELETE /admin/v2/namespaces/public/default/backlogQuota?backlogQuotaType=message_age"}, nil},
		{[]string{"namespaces", "set-deduplication", "public/default", "--enable"}, []string{"POST /admin/v2/namespaces/public/default/deduplication true"}, nil},
		{[]string{"namespaces", "set-deduplication", "public/default", "--disable"}, []string{"POST /admin/v2/namespaces/public/default/deduplication false"}, nil},
		{[]string{"namespaces", "set-auto-topic-creation", "public/default", "--enable", "--type", "partitioned", "--partitions", "4"},
			[]string{`POST /admin/v2/namespaces/public/default/autoTopicCreation {"allowAutoTopicCreation":true,"defaultNumPartitions":4,"topicType":"partitioned"}`}, nil},
		{[]string{"namespaces", "set-auto-topic-creation", "public/default", "--disable"},
			[]string{`POST /admin/v2/namespaces/public/default/autoTopicCreation {"allowAutoTopicCreation":false,"topicType":"non-partitioned"}`}, nil},
		{[]string{"namespaces", "remove-auto-topic-creation", "public/default"}, []string{"DELETE /admin/v2/namespaces/public/default/autoTopicCreation"}, nil},
		{[]string{"topics", "create", "t1"}, []string{"PUT " + topic}, []string{"created topic persistent://public/default/t1"}},
		{[]string{"topics", "create", "acme/orders/eu"}, []string{"PUT /admin/v2/persistent/acme/orders/eu"}, nil},
		{[]string{"topics", "create-partitioned", "persistent://public/default/t1", "-p", "4"}, []string{"PUT " + topic + "/partitions 4"}, nil},
		{[]string{"topics", "update-partitions", "t1", "-p", "8"}, []string{"POST " + topic + "/partitions 8"}, nil},
		{[]string{"topics", "get-partitions", "t1"}, []string{"GET " + topic + "/partitions"}, []string{"partitions  0\n"}},
		{[]string{"topics", "list", "public/default"}, []string{"GET /admin/v2/persistent/public/default"}, nil},
		{[]string{"topics", "delete", "t1"}, []string{"GET " + topic + "/partitions", "DELETE " + topic}, []string{"deleted topic"}},
		{[]string{"topics", "delete", "p1", "--force"}, []string{"GET /admin/v2/persistent/public/default/p1/partitions", "DELETE /admin/v2/persistent/public/default/p1/partitions?force=true"}, nil},
		{[]string{"topics", "stats", "t1"}, []string{"GET " + topic + "/partitions", "GET " + topic + "/stats"},
			[]string{"msgInCounter  3\n", "subscriptions.s1.consumers  []\n", "subscriptions.s1.msgBacklog  2\n"}},
		{[]string{"topics", "stats", "p1", "--per-partition"}, []string{"GET /admin/v2/persistent/public/default/p1/partitions", "GET /admin/v2/persistent/public/default/p1/partitioned-stats?perPartition=true"}, nil},
		{[]string{"topics", "stats", "t1-partition-2"}, []string{"GET " + topic + "-partition-2/stats"}, nil},
		{[]string{"topics", "partitioned-stats", "p1"}, []string{"GET /admin/v2/persistent/public/default/p1/partitioned-stats?perPartition=false"}, nil},
		{[]string{"topics", "internal-stats", "t1"}, []string{"GET " + topic + "/internalStats"}, nil},
		{[]string{"topics", "subscriptions", "t1"}, []string{"GET " + topic + "/subscriptions"}, nil},
		{[]string{"topics", "create-subscription", "t1", "-s", "s1"}, []string{`PUT ` + topic + `/subscription/s1 {"ledgerId":9223372036854775807,"entryId":9223372036854775807,"partitionIndex":-1}`}, nil},
		{[]string{"topics", "create-subscription", "t1", "-s", "s 1", "--message-id", "earliest"}, []string{`PUT ` + topic + `/subscription/s%201 {"ledgerId":-1,"entryId":-1,"partitionIndex":-1}`}, nil},
		{[]string{"topics", "create-subscription", "t1", "-s", "s1", "--message-id", "12:3"}, []string{`PUT ` + topic + `/subscription/s1 {"ledgerId":12,"entryId":3,"partitionIndex":-1}`}, nil},
		{[]string{"topics", "delete-subscription", "t1", "-s", "s1"}, []string{"DELETE " + topic + "/subscription/s1"}, nil},
		{[]string{"topics", "delete-subscription", "t1", "-s", "s1", "--force"}, []string{"DELETE " + topic + "/subscription/s1?force=true"}, nil},
		{[]string{"topics", "reset-cursor", "t1", "-s", "s1", "--time", "2026-01-02T15:04:05Z"}, []string{"POST " + topic + "/subscription/s1/resetcursor/1767366245000"}, nil},
		{[]string{"topics", "reset-cursor", "t1", "-s", "s1", "--message-id", "12:3:-1:-1"}, []string{`POST ` + topic + `/subscription/s1/resetcursor {"ledgerId":12,"entryId":3,"partitionIndex":-1}`}, nil},
		{[]string{"topics", "skip", "t1", "-s", "s1", "-n", "5"}, []string{"POST " + topic + "/subscription/s1/skip/5"}, nil},
		{[]string{"topics", "skip-all", "t1", "-s", "s1"}, []string{"POST " + topic + "/subscription/s1/skip_all"}, nil},
		{[]string{"topics", "last-message-id", "t1"}, []string{"GET " + topic + "/lastMessageId"}, nil},
		{[]string{"topics", "terminate", "t1"}, []string{"POST " + topic + "/terminate"}, []string{"terminated topic persistent://public/default/t1; its last message is 7:2"}},
		{[]string{"topics", "unload", "t1"}, []string{"PUT " + topic + "/unload"}, nil},
		{[]string{"topics", "lookup", "t1"}, []string{"GET /lookup/v2/topic/persistent/public/default/t1"}, []string{"brokerUrl  pulsar://h:6650\n"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			clearEnv(t)
			f := newFakeAdmin(t, answers)
			r := run(t, append(append([]string{"admin"}, tc.args...), "--url", f.URL)...)
			if r.code != 0 {
				t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
			}
			if got := f.got(); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			spaces := regexp.MustCompile(` {2,}`)
			for _, w := range tc.out {
				if !strings.Contains(spaces.ReplaceAllString(r.stdout, "  "), w) {
					t.Errorf("stdout lacks %q:\n%s", w, r.stdout)
				}
			}
		})
	}
}

// TestAdminResetCursorRelativeTime: --time 10m and "10m ago" reset to ten
// minutes before now.
func TestAdminResetCursorRelativeTime(t *testing.T) {
	now := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	for _, s := range []string{"10m", "10m ago", "600", "600s"} {
		ms, err := parseResetTime(s, now)
		if err != nil || ms != now.Add(-10*time.Minute).UnixMilli() {
			t.Errorf("parseResetTime(%q) = %d, %v; want %d", s, ms, err, now.Add(-10*time.Minute).UnixMilli())
		}
	}
	for _, s := range []string{"", "ten minutes", "-5m", "2026-13-01"} {
		if _, err := parseResetTime(s, now); err == nil {
			t.Errorf("parseResetTime(%q): no error", s)
		}
	}
	clearEnv(t)
	f := newFakeAdmin(t, nil)
	before := time.Now().Add(-10 * time.Minute).UnixMilli()
	r := run(t, "admin", "topics", "reset-cursor", "t", "-s", "s", "--time", "10m ago", "--url", f.URL)
	after := time.Now().Add(-10 * time.Minute).UnixMilli()
	if r.code != 0 || len(f.got()) != 1 {
		t.Fatalf("exit %d, requests %v, stderr %s", r.code, f.got(), r.stderr)
	}
	var ms int64
	if _, err := fmt.Sscanf(f.got()[0], "POST /admin/v2/persistent/public/default/t/subscription/s/resetcursor/%d", &ms); err != nil || ms < before || ms > after {
		t.Errorf("request %q: want a timestamp in [%d, %d]", f.got()[0], before, after)
	}
}

// TestAdminJSONOutput: -o json prints the server's JSON (indented), and
// the server's JSON for changes that return some.
func TestAdminJSONOutput(t *testing.T) {
	clearEnv(t)
	f := newFakeAdmin(t, map[string]fakeAnswer{
		"GET /admin/v2/tenants":                                ok(`["public","pulsar"]`),
		"GET /admin/v2/persistent/public/default/t/partitions": ok(`{"partitions":0}`),
		"GET /admin/v2/persistent/public/default/t/stats":      ok(`{"msgInCounter":3,"publishers":[]}`),
	})
	r := run(t, "admin", "tenants", "list", "-o", "json", "--url", f.URL)
	if r.code != 0 || r.stdout != "[\n  \"public\",\n  \"pulsar\"\n]\n" {
		t.Errorf("exit %d, stdout %q", r.code, r.stdout)
	}
	r = run(t, "admin", "-o", "json", "topics", "stats", "t", "--url", f.URL)
	var stats map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &stats) != nil || stats["msgInCounter"] != 3.0 {
		t.Errorf("exit %d, stdout %q", r.code, r.stdout)
	}
	// A change answered with 204 prints nothing in JSON.
	r = run(t, "admin", "topics", "create", "t", "-o", "json", "--url", f.URL)
	if r.code != 0 || r.stdout != "" {
		t.Errorf("exit %d, stdout %q", r.code, r.stdout)
	}
}

// TestAdminURLSources: the URL comes from --admin-url, --url, the
// environment, or a config file.
func TestAdminURLSources(t *testing.T) {
	f := newFakeAdmin(t, map[string]fakeAnswer{"GET /admin/v2/tenants": ok(`["from-fake"]`)})
	for _, flag := range []string{"--url", "--admin-url", "--web-service-url"} {
		t.Run(flag, func(t *testing.T) {
			clearEnv(t)
			if r := run(t, "admin", "tenants", "list", flag, f.URL); r.code != 0 || r.stdout != "from-fake\n" {
				t.Errorf("exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
			}
		})
	}
	t.Run("env", func(t *testing.T) {
		clearEnv(t)
		t.Setenv("MAGNETAR_WEB_SERVICE_URL", f.URL+"/")
		if r := run(t, "admin", "tenants", "list"); r.code != 0 || r.stdout != "from-fake\n" {
			t.Errorf("exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("config file", func(t *testing.T) {
		clearEnv(t)
		if r := run(t, "admin", "tenants", "list", "--config", writeFile(t, "m.yaml", "web-service-url: "+f.URL+"\n")); r.code != 0 || r.stdout != "from-fake\n" {
			t.Errorf("exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
		}
	})
}

// TestAdminServerErrors: the server's reason is shown with the status,
// and the exit code is 1.
func TestAdminServerErrors(t *testing.T) {
	f := newFakeAdmin(t, map[string]fakeAnswer{
		"GET /admin/v2/tenants/nope":                            {status: 404, body: `{"reason":"Tenant does not exist"}`},
		"PUT /admin/v2/tenants/public":                          {status: 409, body: `{"reason":"Tenant already exists"}`},
		"DELETE /admin/v2/namespaces/public/default":            {status: 409, body: `{"reason":"Cannot delete non empty namespace"}`},
		"GET /admin/v2/persistent/public/default/t/partitions":  ok(`{"partitions":0}`),
		"POST /admin/v2/persistent/public/default/t/partitions": {status: 412, body: `{"reason":"Topic is not partitioned"}`},
		"GET /admin/v2/persistent/public/default/t/stats":       {status: 500, body: "internal error", header: map[string]string{"Content-Type": "text/plain"}},
		"GET /admin/v2/clusters":                                {status: 503, body: ""},
	})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tenants", "get", "nope"}, "magnetar admin tenants get: Tenant does not exist (404 Not Found, GET /admin/v2/tenants/nope)"},
		{[]string{"tenants", "create", "public", "-c", "standalone"}, "Tenant already exists (409 Conflict, PUT /admin/v2/tenants/public)"},
		{[]string{"namespaces", "delete", "public/default"}, "Cannot delete non empty namespace (409 Conflict"},
		{[]string{"topics", "update-partitions", "t", "-p", "2"}, "Topic is not partitioned (412 Precondition Failed"},
		{[]string{"topics", "stats", "t"}, "internal error (500 Internal Server Error, GET /admin/v2/persistent/public/default/t/stats)"},
		{[]string{"clusters", "list"}, "(no reason given) (503 Service Unavailable"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			clearEnv(t)
			r := run(t, append(append([]string{"admin"}, tc.args...), "--url", f.URL)...)
			if r.code != exitRuntime {
				t.Errorf("exit %d, want %d", r.code, exitRuntime)
			}
			if !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "--help") {
				t.Errorf("stderr %q, want %q and no usage hint", r.stderr, tc.want)
			}
		})
	}
}

// TestAdminUnreachable: a refused connection says the broker cannot be
// reached at the URL, exits 1, and does not wait.
func TestAdminUnreachable(t *testing.T) {
	clearEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	start := time.Now()
	r := run(t, "admin", "tenants", "list", "--admin-url", "http://"+addr)
	if r.code != exitRuntime {
		t.Errorf("exit %d, want 1", r.code)
	}
	want := "magnetar admin tenants list: cannot reach the broker at http://" + addr + ": connection refused"
	if !strings.Contains(r.stderr, want) {
		t.Errorf("stderr %q lacks %q", r.stderr, want)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestAdminUsageErrors: mistakes exit 2 before any request is sent.
func TestAdminUsageErrors(t *testing.T) {
	f := newFakeAdmin(t, nil)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tenants", "get"}, "accepts 1 arg(s), received 0"},
		{[]string{"tenants", "get", "a/b"}, `invalid tenant name "a/b"`},
		{[]string{"tenants", "update", "acme"}, "nothing to change"},
		{[]string{"namespaces", "create", "default"}, `invalid namespace "default": want tenant/namespace`},
		{[]string{"namespaces", "create", "a/b/c"}, "want tenant/namespace"},
		{[]string{"namespaces", "set-retention", "public/default", "--time", "1h"}, "--time and --size are both required"},
		{[]string{"namespaces", "set-retention", "public/default", "--time", "soon", "--size", "1G"}, `invalid --time "soon"`},
		{[]string{"namespaces", "set-retention", "public/default", "--time", "1h", "--size", "lots"}, `invalid --size "lots"`},
		{[]string{"namespaces", "set-message-ttl", "public/default"}, "--ttl is required"},
		{[]string{"namespaces", "set-message-ttl", "public/default", "--ttl", "-5"}, `invalid --ttl "-5"`},
		{[]string{"namespaces", "set-backlog-quota", "public/default", "--limit-size", "1G"}, `invalid --policy ""`},
		{[]string{"namespaces", "set-backlog-quota", "public/default", "--policy", "producer_exception"}, "give --limit-size, --limit-time or both"},
		{[]string{"namespaces", "set-backlog-quota", "public/default", "--limit-time", "0", "--policy", "producer_exception"}, `invalid --limit-time "0"`},
		{[]string{"namespaces", "remove-backlog-quota", "public/default", "--type", "age"}, `invalid --type "age"`},
		{[]string{"namespaces", "set-deduplication", "public/default"}, "give one of --enable or --disable"},
		{[]string{"namespaces", "set-deduplication", "public/default", "--enable", "--disable"}, "give one of --enable or --disable"},
		{[]string{"namespaces", "set-auto-topic-creation", "public/default", "--enable", "--type", "partitioned"}, "needs --partitions 1 or more"},
		{[]string{"namespaces", "set-auto-topic-creation", "public/default", "--enable", "--type", "sharded"}, `invalid --type "sharded"`},
		{[]string{"topics", "create", "a/b"}, "invalid topic name"},
		{[]string{"topics", "create", "non-persistent://public/default/t"}, "non-persistent topics are not supported"},
		{[]string{"topics", "create-partitioned", "t"}, `required flag(s) "partitions" not set`},
		{[]string{"topics", "create-partitioned", "t", "-p", "0"}, "invalid --partitions 0"},
		{[]string{"topics", "update-partitions", "t", "-p", "-3"}, "invalid --partitions -3"},
		{[]string{"topics", "skip", "t", "-n", "3"}, `required flag(s) "subscription" not set`},
		{[]string{"topics", "skip", "t", "-s", "s", "-n", "0"}, "invalid --count 0"},
		{[]string{"topics", "peek", "t", "-s", "s", "-n", "0"}, "invalid --count 0"},
		{[]string{"topics", "reset-cursor", "t", "-s", "s"}, "give one of --time or --message-id"},
		{[]string{"topics", "reset-cursor", "t", "-s", "s", "--time", "1h", "--message-id", "1:2"}, "give one of --time or --message-id"},
		{[]string{"topics", "reset-cursor", "t", "-s", "s", "--message-id", "earliest"}, `invalid message id "earliest": want LEDGER:ENTRY`},
		{[]string{"topics", "create-subscription", "t", "-s", "s", "--message-id", "1:x"}, `invalid message id "1:x"`},
		{[]string{"topics", "get-message-by-id", "t", "--ledger", "1"}, `required flag(s) "entry" not set`},
		{[]string{"topics", "list", "public"}, "want tenant/namespace"},
		{[]string{"tenants", "list", "-o", "yaml"}, `invalid --output "yaml": want text or json`},
		{[]string{"tenants", "list", "--url", "localhost:8080"}, `invalid web-service-url "localhost:8080" (from flag --web-service-url): want http://host:port`},
		{[]string{"topics", "frobnicate"}, `unknown command "frobnicate"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			clearEnv(t)
			t.Setenv("MAGNETAR_WEB_SERVICE_URL", f.URL)
			r := run(t, append([]string{"admin"}, tc.args...)...)
			if r.code != exitUsage {
				t.Errorf("exit %d, want %d", r.code, exitUsage)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr %q lacks %q", r.stderr, tc.want)
			}
		})
	}
	if got := f.got(); len(got) != 0 {
		t.Errorf("requests sent: %v", got)
	}
}

// batchPayload encodes messages as a Pulsar batch payload.
func batchPayload(t *testing.T, msgs ...*msgpb.SingleMessageMetadata) []byte {
	var out []byte
	for _, md := range msgs {
		payload := []byte("payload-of-" + md.GetPartitionKey())
		md.PayloadSize = proto.Int32(int32(len(payload)))
		b, err := proto.Marshal(md)
		if err != nil {
			t.Fatal(err)
		}
		out = binary.BigEndian.AppendUint32(out, uint32(len(b)))
		out = append(append(out, b...), payload...)
	}
	return out
}

// TestAdminPeek: peek reads positions 1, 2, ... until it has -n messages,
// splits batches, and stops early at the end of the backlog (404).
func TestAdminPeek(t *testing.T) {
	const sub = "/admin/v2/persistent/public/default/t/subscription/s/position/"
	batch := batchPayload(t,
		&msgpb.SingleMessageMetadata{PartitionKey: proto.String("k0"), Properties: []*msgpb.KeyValue{{Key: proto.String("a"), Value: proto.String("1")}}},
		&msgpb.SingleMessageMetadata{PartitionKey: proto.String("k1")})
	f := newFakeAdmin(t, map[string]fakeAnswer{
		"GET " + sub + "1": {status: 200, body: "hello", header: map[string]string{
			"Content-Type": "application/octet-stream", "X-Pulsar-Message-ID": "5:0",
			"X-Pulsar-Publish-Time": "2026-01-02T15:04:05.123Z", "X-Pulsar-PROPERTY-color": "red", "X-Pulsar-Property": `{"color":"red"}`}},
		"GET " + sub + "2": {status: 200, body: string(batch), header: map[string]string{
			"Content-Type": "application/octet-stream", "X-Pulsar-Message-ID": "5:1", "X-Pulsar-num-batch-message": "2"}},
		"GET " + sub + "3": {status: 200, body: "\x00\x01\xff", header: map[string]string{
			"Content-Type": "application/octet-stream", "X-Pulsar-Message-ID": "5:2"}},
		"GET " + sub + "4": {status: 404, body: `{"reason":"Message not found"}`},
	})
	clearEnv(t)
	r := run(t, "admin", "topics", "peek", "t", "-s", "s", "-n", "2", "--url", f.URL)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, w := range []string{
		"----- message 1 -----\nid:           5:0:-1:-1\npublish time: 2026-01-02T15:04:05.123Z\nproperties:   color=red\npayload:      hello\n",
		"----- message 2 -----\nid:           5:1:-1:0\nkey:          k0\nproperties:   a=1\npayload:      payload-of-k0\n",
	} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("stdout lacks %q:\n%s", w, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "message 3") || len(f.got()) != 2 {
		t.Errorf("peeked too far: requests %v", f.got())
	}

	// More than there are: all of them, and the 404 ends it.
	r = run(t, "admin", "topics", "peek", "t", "-s", "s", "-n", "10", "-o", "json", "--url", f.URL)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 {
		t.Fatalf("got %d messages, want 4:\n%s", len(lines), r.stdout)
	}
	var last messageJSON
	if err := json.Unmarshal([]byte(lines[3]), &last); err != nil || last.ID != "5:2:-1:-1" || last.PayloadBase64 != "AAH/" || last.Payload != nil {
		t.Errorf("last message %s (%v)", lines[3], err)
	}
	if !strings.Contains(lines[2], `"id":"5:1:-1:1","key":"k1","payload":"payload-of-k1"`) {
		t.Errorf("batch message 1: %s", lines[2])
	}

	// An empty backlog: the first 404 is an error.
	f2 := newFakeAdmin(t, map[string]fakeAnswer{"GET " + sub + "1": {status: 404, body: `{"reason":"Message not found"}`}})
	r = run(t, "admin", "topics", "peek", "t", "-s", "s", "--admin-url", f2.URL)
	if r.code != exitRuntime || !strings.Contains(r.stderr, "Message not found (404") {
		t.Errorf("empty backlog: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestAdminGetMessageByID: the message at a ledger and entry, its payload
// hex-dumped when not printable.
func TestAdminGetMessageByID(t *testing.T) {
	clearEnv(t)
	f := newFakeAdmin(t, map[string]fakeAnswer{
		"GET /admin/v2/persistent/public/default/t/ledger/12/entry/3": {status: 200, body: "\x00\x01binary", header: map[string]string{
			"Content-Type": "application/octet-stream", "X-Pulsar-Message-ID": "12:3", "X-Pulsar-PROPERTY-x": "y"}},
	})
	r := run(t, "admin", "topics", "get-message-by-id", "t", "--ledger", "12", "--entry", "3", "--url", f.URL)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, w := range []string{"id:           12:3:-1:-1\n", "properties:   X=y\n", "payload:      (8 bytes, hex)\n00000000  00 01 62 69 6e 61 72 79"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("stdout lacks %q:\n%s", w, r.stdout)
		}
	}
}

// TestWriteText: the text form of JSON answers.
func TestWriteText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`["a","b"]`, "a\nb\n"},
		{`[]`, ""},
		{`42`, "42\n"},
		{`"x"`, "x\n"},
		{``, ""},
		{`not json`, "not json\n"},
		{`{"b":1,"a":{"y":[1,2],"x":null},"c":[],"d":{}}`, "a.x  null\na.y  1, 2\nb    1\nc    []\nd    {}\n"},
		{`[{"n":1},{"n":2}]`, "[0].n  1\n[1].n  2\n"},
		{`{"big":12345678901234567890}`, "big  12345678901234567890\n"},
	} {
		var b strings.Builder
		if err := writeText(&b, []byte(tc.in)); err != nil || b.String() != tc.want {
			t.Errorf("writeText(%s) = %q, %v; want %q", tc.in, b.String(), err, tc.want)
		}
	}
}

func TestParseSizeAndTime(t *testing.T) {
	sizes := map[string]int64{"0": 0, "100": 100, "1k": 1 << 10, "10M": 10 << 20, "2G": 2 << 30, "1T": 1 << 40, "5MB": 5 << 20, "3gb": 3 << 30}
	for s, want := range sizes {
		if got, err := parseSize(s); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "-1", "M", "1.5G", "1P", "99999999999T"} {
		if _, err := parseSize(s); err == nil {
			t.Errorf("parseSize(%q): no error", s)
		}
	}
	times := map[string]time.Duration{"0": 0, "90": 90 * time.Second, "30s": 30 * time.Second, "10m": 10 * time.Minute,
		"2h": 2 * time.Hour, "3d": 72 * time.Hour, "1w": 7 * 24 * time.Hour, "1y": 365 * 24 * time.Hour, "1h30m": 90 * time.Minute, "-1": -time.Second}
	for s, want := range times {
		if got, err := parseRelativeTime(s); err != nil || got != want {
			t.Errorf("parseRelativeTime(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "m", "soon", "1.5d", "99999999999999y"} {
		if _, err := parseRelativeTime(s); err == nil {
			t.Errorf("parseRelativeTime(%q): no error", s)
		}
	}
}

// TestAdminEndToEnd runs magnetar admin, as a script, against a real
// standalone: each step's exit code and what its output must hold.
func TestAdminEndToEnd(t *testing.T) {
	_, ready := startStandaloneProc(t)
	url := []string{"--url", "http://" + ready.HTTP}
	svc := []string{"--service-url", "pulsar://" + ready.PulsarAdvertised}
	const topic = "persistent://acme/orders/t1"
	steps := []struct {
		args   string // split on spaces
		code   int
		stdout string // substring; spaces runs in the output count as two
		stderr string
	}{
		{"admin clusters list", 0, "standalone\n", ""},
		{"admin clusters get standalone", 0, "brokerServiceUrl  pulsar://" + ready.PulsarAdvertised, ""},
		{"admin tenants create acme --admin-roles alice", 0, "created tenant acme\n", ""},
		{"admin tenants create acme", 1, "", "(409 Conflict, PUT /admin/v2/tenants/acme)"},
		{"admin tenants update acme --admin-roles carol,dave", 0, "updated tenant acme\n", ""},
		{"admin tenants get acme", 0, "adminRoles  carol, dave\nallowedClusters  standalone\n", ""},
		{"admin namespaces create acme/orders", 0, "created namespace acme/orders\n", ""},
		{"admin namespaces list acme", 0, "acme/orders\n", ""},
		{"admin namespaces set-retention acme/orders --time 3d --size 10G", 0, "", ""},
		{"admin namespaces get-retention acme/orders", 0, "retentionSizeInMB  10240\nretentionTimeInMinutes  4320\n", ""},
		{"admin namespaces remove-retention acme/orders", 0, "", ""},
		{"admin namespaces set-message-ttl acme/orders --ttl 1h", 0, "", ""},
		{"admin namespaces get-message-ttl acme/orders", 0, "3600\n", ""},
		{"admin namespaces set-backlog-quota acme/orders --limit-size 1G --limit-time 1d --policy producer_request_hold", 0, "", ""},
		{"admin namespaces get-backlog-quotas acme/orders", 0, "destination_storage.limitSize  1073741824\n", ""},
		{"admin namespaces remove-backlog-quota acme/orders --type message_age", 0, "", ""},
		{"admin namespaces set-deduplication acme/orders --enable", 0, "", ""},
		{"admin namespaces set-auto-topic-creation acme/orders --enable --type partitioned --partitions 3", 0, "", ""},
		{"admin namespaces policies acme/orders", 0, "autoTopicCreationOverride.defaultNumPartitions  3\n", ""},
		{"admin namespaces remove-auto-topic-creation acme/orders", 0, "", ""},
		{"admin topics create " + topic, 0, "created topic " + topic + "\n", ""},
		{"admin topics create-partitioned acme/orders/p1 -p 2", 0, "", ""},
		{"admin topics update-partitions acme/orders/p1 -p 3", 0, "", ""},
		{"admin topics get-partitions acme/orders/p1", 0, "partitions  3\n", ""},
		{"admin topics update-partitions acme/orders/p1 -p 1", 1, "", "POST /admin/v2/persistent/acme/orders/p1/partitions)"},
		{"admin topics list acme/orders", 0, "persistent://acme/orders/p1-partition-2\npersistent://acme/orders/t1\n", ""},
		{"admin namespaces topics acme/orders", 0, "persistent://acme/orders/t1\n", ""},
		{"admin topics create-subscription " + topic + " -s audit --message-id earliest", 0, "", ""},
		{"produce " + topic + " -m m1 -m m2 -m m3 -k k -p a=b", 0, "", "3 messages produced"},
		{"admin topics subscriptions " + topic, 0, "audit\n", ""},
		{"admin topics peek " + topic + " -s audit -n 2", 0, "key:  k\nproperties:  a=b\npayload:  m1\n", ""},
		{"admin topics skip " + topic + " -s audit -n 1", 0, "", ""},
		{"admin topics peek " + topic + " -s audit", 0, "payload:  m2\n", ""},
		{"admin topics reset-cursor " + topic + " -s audit --time 1h", 0, "", ""},
		{"admin topics peek " + topic + " -s audit", 0, "payload:  m1\n", ""},
		{"admin topics terminate " + topic, 0, "terminated topic " + topic + "; its last message is ", ""},
		{"produce " + topic + " -m late", 1, "", "TopicTerminated"}, // refused at producer creation, as Pulsar does
		{"admin topics skip-all " + topic + " -s audit", 0, "", ""},
		{"admin topics peek " + topic + " -s audit", 1, "", "(404 Not Found"},
		{"admin topics stats " + topic, 0, "msgInCounter  3\n", ""},
		{"admin topics stats acme/orders/p1 --per-partition", 0, "partitions.persistent://acme/orders/p1-partition-2.msgInCounter  0\n", ""},
		{"admin topics internal-stats " + topic, 0, "cursors.audit.markDeletePosition", ""},
		{"admin topics last-message-id " + topic, 0, "entryId  2\n", ""},
		{"admin topics lookup " + topic, 0, "brokerUrl  pulsar://" + ready.PulsarAdvertised, ""},
		{"admin topics delete-subscription " + topic + " -s audit", 0, "", ""},
		{"admin topics unload " + topic, 0, "", ""},
		{"admin topics delete " + topic, 0, "", ""},
		{"admin topics delete acme/orders/p1", 0, "", ""},
		{"admin namespaces delete acme/orders", 0, "", ""},
		{"admin tenants delete acme", 0, "", ""},
		{"admin tenants get acme", 1, "", "(404 Not Found, GET /admin/v2/tenants/acme)"},
		{"admin tenants list", 0, "public\n", ""},
	}
	spaces := regexp.MustCompile(` {2,}`)
	for _, s := range steps {
		args := strings.Fields(s.args)
		if args[0] == "admin" {
			args = append(args, url...)
		} else {
			args = append(args, svc...)
		}
		stdout, stderr, code := runBinary(t, "", args...)
		stdout = spaces.ReplaceAllString(stdout, "  ")
		if code != s.code || !strings.Contains(stdout, s.stdout) || !strings.Contains(stderr, s.stderr) {
			t.Fatalf("magnetar %s: exit %d (want %d)\nstdout (want %q):\n%s\nstderr (want %q):\n%s",
				s.args, code, s.code, s.stdout, stdout, s.stderr, stderr)
		}
	}
}

// TestClientCommandsHaveExamples: the --help of every admin, produce and
// consume command shows examples, and names the REST API's exit codes.
func TestClientCommandsHaveExamples(t *testing.T) {
	clearEnv(t)
	n := 0
	for _, path := range commandPaths() {
		if len(path) == 0 || (path[0] != "admin" && path[0] != "produce" && path[0] != "consume") {
			continue
		}
		n++
		r := run(t, append(path, "--help")...)
		if r.code != 0 || !strings.Contains(r.stdout, "\nExamples:\n  magnetar "+path[0]) {
			t.Errorf("magnetar %s --help: exit %d, no examples:\n%s", strings.Join(path, " "), r.code, r.stdout)
		}
	}
	if n < 50 {
		t.Errorf("%d admin, produce and consume commands; want every one of them", n)
	}
	// A group alone shows its help; with an unknown subcommand, a usage error.
	if r := run(t, "admin", "topics"); r.code != 0 || !strings.Contains(r.stdout, "reset-cursor") {
		t.Errorf("admin topics: exit %d\n%s", r.code, r.stdout)
	}
	if r := run(t, "admin", "nonsense"); r.code != exitUsage || !strings.Contains(r.stderr, `unknown command "nonsense" for "magnetar admin"`) {
		t.Errorf("admin nonsense: exit %d, stderr %q", r.code, r.stderr)
	}
}
