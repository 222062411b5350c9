package admin

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/brokertest"
	"github.com/magnetar-io/magnetar/ledger"
)

// restBroker is a bootstrapped broker over a meta/local store and one
// in-process bookie, with the REST API served on a loopback port.
type restBroker struct {
	b    *broker.Broker
	base string // http://127.0.0.1:port
}

func startRESTBroker(t *testing.T) *restBroker {
	t.Helper()
	log := quietLogger()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	b := brokertest.Start(t, brokertest.Options{Bootstrap: true, Ledger: func(c *ledger.Config) {
		c.RetentionTime, c.RetentionSize = 0, 0 // the broker's default: keep nothing consumed
	}, Broker: func(c *broker.Config) {
		c.ServiceURL, c.BrokerServiceURL = base, "pulsar://127.0.0.1:6650"
	}}).Broker
	s, err := New(Config{Listener: ln, Gatherer: prometheus.NewRegistry(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := RegisterAPI(s, APIConfig{Broker: b, Cluster: "standalone", BrokerServiceURL: "pulsar://127.0.0.1:6650",
		WebServiceURL: base, Logger: log}); err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return &restBroker{b: b, base: base}
}

// do sends a request and returns the status and body.
func (rb *restBroker) do(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, rb.base+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// step is one request of a scripted REST test and what it must answer:
// the status and, if set, a substring of the body. Error answers must
// carry a JSON reason.
type step struct {
	method, path, body string
	code               int
	want               string
}

func (rb *restBroker) run(t *testing.T, steps []step) {
	t.Helper()
	for _, s := range steps {
		code, body := rb.do(t, s.method, s.path, s.body)
		if code != s.code || !strings.Contains(body, s.want) {
			t.Errorf("%s %s %s = %d %s; want %d containing %q", s.method, s.path, s.body, code, body, s.code, s.want)
			continue
		}
		if code >= 400 {
			var e struct{ Reason string }
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Reason == "" {
				t.Errorf("%s %s: error body %q has no reason", s.method, s.path, body)
			}
		}
	}
}

// snapshot reads the given paths (GET) and returns their answers, to show
// that refused requests changed nothing.
func (rb *restBroker) snapshot(t *testing.T, paths ...string) string {
	t.Helper()
	var sb strings.Builder
	for _, p := range paths {
		code, body := rb.do(t, "GET", p, "")
		sb.WriteString(p + " " + http.StatusText(code) + " " + body + "\n")
	}
	return sb.String()
}

func TestRESTClusters(t *testing.T) {
	rb := startRESTBroker(t)
	watch := []string{"/admin/v2/clusters", "/admin/v2/clusters/standalone", "/admin/v2/clusters/east"}
	rb.run(t, []step{
		{"GET", "/admin/v2/clusters", "", 200, `["standalone"]`},
		{"GET", "/admin/v2/clusters/standalone", "", 200, `"serviceUrl":"` + rb.base + `"`},
		{"GET", "/admin/v2/clusters/standalone", "", 200, `"brokerServiceUrl":"pulsar://127.0.0.1:6650"`},
		{"PUT", "/admin/v2/clusters/east", `{"serviceUrl":"http://east:8080","brokerServiceUrl":"pulsar://east:6650"}`, 204, ""},
	})
	before := rb.snapshot(t, watch...)
	rb.run(t, []step{
		{"GET", "/admin/v2/clusters/nope", "", 404, "cluster"},
		{"PUT", "/admin/v2/clusters/east", `{}`, 409, "already exists"},
		{"PUT", "/admin/v2/clusters/bad%20name", `{}`, 412, "not valid"},
		{"PUT", "/admin/v2/clusters/west", `{"serviceUrl":"not a url"}`, 412, "serviceUrl"},
		{"PUT", "/admin/v2/clusters/west", `{"serviceUrl":`, 400, "invalid JSON"},
		{"POST", "/admin/v2/clusters/east", `{"serviceUrl":5}`, 400, "invalid JSON"},
		{"POST", "/admin/v2/clusters/nope", `{}`, 404, "cluster"},
		{"DELETE", "/admin/v2/clusters/standalone", "", 412, "this broker's cluster"},
		{"DELETE", "/admin/v2/clusters/nope", "", 404, ""},
		{"POST", "/admin/v2/clusters/east/peers", `["nope"]`, 412, "does not exist"},
	})
	if after := rb.snapshot(t, watch...); after != before {
		t.Fatalf("refused requests changed clusters:\n%s\nwas\n%s", after, before)
	}
	rb.run(t, []step{
		{"POST", "/admin/v2/clusters/east", `{"serviceUrl":"http://east:9090"}`, 204, ""},
		{"GET", "/admin/v2/clusters/east", "", 200, `"serviceUrl":"http://east:9090"`},
		{"POST", "/admin/v2/clusters/east/peers", `["standalone"]`, 204, ""},
		{"GET", "/admin/v2/clusters/east/peers", "", 200, `["standalone"]`},
		{"GET", "/admin/v2/clusters", "", 200, `["east","standalone"]`},
		{"PUT", "/admin/v2/tenants/uses-east", `{"allowedClusters":["east"]}`, 204, ""},
		{"DELETE", "/admin/v2/clusters/east", "", 412, "used by tenant"},
		{"DELETE", "/admin/v2/tenants/uses-east", "", 204, ""},
		{"DELETE", "/admin/v2/clusters/east", "", 204, ""},
		{"GET", "/admin/v2/clusters", "", 200, `["standalone"]`},
	})
}

func TestRESTTenants(t *testing.T) {
	rb := startRESTBroker(t)
	watch := []string{"/admin/v2/tenants", "/admin/v2/tenants/acme", "/admin/v2/namespaces/acme"}
	rb.run(t, []step{
		{"GET", "/admin/v2/tenants", "", 200, `["public"]`},
		{"GET", "/admin/v2/tenants/public", "", 200, `{"adminRoles":[],"allowedClusters":["standalone"]}`},
		{"PUT", "/admin/v2/tenants/acme", `{"adminRoles":["ops"],"allowedClusters":["standalone"]}`, 204, ""},
		{"GET", "/admin/v2/tenants/acme", "", 200, `{"adminRoles":["ops"],"allowedClusters":["standalone"]}`},
		{"PUT", "/admin/v2/namespaces/acme/ns1", "", 204, ""},
	})
	before := rb.snapshot(t, watch...)
	rb.run(t, []step{
		{"GET", "/admin/v2/tenants/ghost", "", 404, "tenant"},
		{"PUT", "/admin/v2/tenants/acme", `{"allowedClusters":["standalone"]}`, 409, "already exists"},
		{"PUT", "/admin/v2/tenants/new", `{"allowedClusters":["nowhere"]}`, 412, "do not exist"},
		{"PUT", "/admin/v2/tenants/new", `{"allowedClusters":[]}`, 412, "can not be empty"},
		{"PUT", "/admin/v2/tenants/new", "", 412, "can not be empty"},
		{"PUT", "/admin/v2/tenants/bad%24name", `{"allowedClusters":["standalone"]}`, 412, "not valid"},
		{"PUT", "/admin/v2/tenants/new", `{"allowedClusters":"standalone"}`, 400, "invalid JSON"},
		{"POST", "/admin/v2/tenants/ghost", `{"allowedClusters":["standalone"]}`, 404, "tenant"},
		{"POST", "/admin/v2/tenants/acme", `{"allowedClusters":["nowhere"]}`, 412, "do not exist"},
		{"POST", "/admin/v2/tenants/acme", `[`, 400, "invalid JSON"},
		{"DELETE", "/admin/v2/tenants/acme", "", 409, "namespaces"},
		{"DELETE", "/admin/v2/tenants/acme?force=maybe", "", 400, "force"},
		{"DELETE", "/admin/v2/tenants/ghost", "", 404, ""},
	})
	if after := rb.snapshot(t, watch...); after != before {
		t.Fatalf("refused requests changed tenants:\n%s\nwas\n%s", after, before)
	}
	rb.run(t, []step{
		{"POST", "/admin/v2/tenants/acme", `{"adminRoles":[],"allowedClusters":["standalone"]}`, 204, ""},
		{"GET", "/admin/v2/tenants/acme", "", 200, `"adminRoles":[]`},
		{"DELETE", "/admin/v2/tenants/acme?force=true", "", 204, ""},
		{"GET", "/admin/v2/tenants/acme", "", 404, ""},
		{"GET", "/admin/v2/namespaces/acme", "", 404, ""},
		{"GET", "/admin/v2/tenants", "", 200, `["public"]`},
	})
}

func TestRESTNamespaces(t *testing.T) {
	rb := startRESTBroker(t)
	const ns = "/admin/v2/namespaces/acme/ns"
	rb.run(t, []step{
		{"GET", "/admin/v2/namespaces/public", "", 200, `["public/default"]`},
		{"GET", "/admin/v2/namespaces/public/default", "", 200, `"bundles":{"boundaries":["0x00000000","0x40000000","0x80000000","0xc0000000","0xffffffff"],"numBundles":4}`},
		{"PUT", "/admin/v2/namespaces/ghost/ns", "", 404, "tenant"},
		{"PUT", "/admin/v2/tenants/acme", `{"allowedClusters":["standalone"]}`, 204, ""},
		{"PUT", ns, `{"bundles":{"numBundles":2},"message_ttl_in_seconds":10}`, 204, ""},
		{"GET", ns, "", 200, `"numBundles":2`},
		{"GET", ns + "/bundles", "", 200, `{"boundaries":["0x00000000","0x80000000","0xffffffff"],"numBundles":2}`},
		{"GET", ns + "/messageTTL", "", 200, "10"},
		{"GET", ns + "/replication", "", 200, `["standalone"]`},
		{"GET", ns + "/retention", "", 204, ""},
		{"GET", ns + "/deduplication", "", 204, ""},
		{"GET", ns + "/autoTopicCreation", "", 204, ""},
		{"GET", ns + "/backlogQuotaMap", "", 200, `{}`},
	})
	watch := []string{"/admin/v2/namespaces/acme", ns}
	before := rb.snapshot(t, watch...)
	rb.run(t, []step{
		{"PUT", ns, "", 409, "already exists"},
		{"PUT", "/admin/v2/namespaces/acme/bad%20ns", "", 412, "not valid"},
		{"PUT", "/admin/v2/namespaces/acme/other", `{"bundles":{"numBundles":0,"boundaries":["0x1"]}}`, 412, "boundaries"},
		{"PUT", "/admin/v2/namespaces/acme/other", `{"bundles":{"numBundles":-3}}`, 412, "bundles"},
		{"PUT", "/admin/v2/namespaces/acme/other", `{"replication_clusters":["nowhere"]}`, 412, "does not exist"},
		{"PUT", "/admin/v2/namespaces/acme/other", `{"bundles":`, 400, "invalid JSON"},
		{"GET", "/admin/v2/namespaces/acme/nope", "", 404, "namespace"},
		{"GET", "/admin/v2/namespaces/ghost", "", 404, "tenant"},
		{"POST", ns + "/messageTTL", "-1", 412, "message TTL"},
		{"POST", ns + "/messageTTL", `"ten"`, 400, "invalid JSON"},
		{"POST", ns + "/messageTTL", "", 400, "body required"},
		{"POST", "/admin/v2/namespaces/acme/nope/messageTTL", "5", 404, "namespace"},
		{"POST", ns + "/retention", `{"retentionTimeInMinutes":-2,"retentionSizeInMB":5}`, 412, "retention"},
		{"POST", ns + "/retention", `{"retentionTimeInMinutes":0,"retentionSizeInMB":5}`, 412, "retention"},
		{"POST", ns + "/retention", `{"retentionTimeInMinutes":"x"}`, 400, "invalid JSON"},
		{"POST", ns + "/backlogQuota", `{"limitSize":100,"policy":"nope"}`, 400, "policy"},
		{"POST", ns + "/backlogQuota?backlogQuotaType=elsewhere", `{"limitSize":100,"policy":"producer_exception"}`, 400, "type"},
		{"POST", ns + "/deduplication", `"yes"`, 400, "invalid JSON"},
		{"POST", ns + "/autoTopicCreation", `{"allowAutoTopicCreation":true,"topicType":"partitioned","defaultNumPartitions":0}`, 412, "defaultNumPartitions"},
		{"POST", ns + "/autoTopicCreation", `{"allowAutoTopicCreation":true,"topicType":"fancy"}`, 412, "topicType"},
		{"POST", ns + "/replication", `["nowhere"]`, 412, "does not exist"},
		{"POST", ns + "/replication", `[]`, 412, "empty"},
		{"DELETE", "/admin/v2/namespaces/acme/nope", "", 404, ""},
	})
	if after := rb.snapshot(t, watch...); after != before {
		t.Fatalf("refused requests changed namespaces:\n%s\nwas\n%s", after, before)
	}

	rb.run(t, []step{
		{"POST", ns + "/retention", `{"retentionTimeInMinutes":60,"retentionSizeInMB":100}`, 204, ""},
		{"GET", ns + "/retention", "", 200, `{"retentionTimeInMinutes":60,"retentionSizeInMB":100}`},
		{"POST", ns + "/messageTTL", "30", 204, ""},
		{"GET", ns + "/messageTTL", "", 200, "30"},
		{"POST", ns + "/backlogQuota", `{"limitSize":1048576,"limitTime":-1,"policy":"producer_request_hold"}`, 204, ""},
		{"POST", ns + "/backlogQuota?backlogQuotaType=message_age", `{"limitTime":300,"policy":"consumer_backlog_eviction"}`, 204, ""},
		{"GET", ns + "/backlogQuotaMap", "", 200, `"destination_storage":{"limitSize":1048576,"limitTime":-1,"policy":"producer_request_hold"}`},
		{"GET", ns + "/backlogQuotaMap", "", 200, `"message_age":{"limitSize":0,"limitTime":300,"policy":"consumer_backlog_eviction"}`},
		{"POST", ns + "/backlogQuota", `{"limitSize":1073741824,"policy":"producer_exception"}`, 412, "retention"},
		{"POST", ns + "/retention", `{"retentionTimeInMinutes":60,"retentionSizeInMB":1}`, 412, "backlog quota"},
		{"POST", ns + "/deduplication", "true", 204, ""},
		{"GET", ns + "/deduplication", "", 200, "true"},
		{"POST", ns + "/autoTopicCreation", `{"allowAutoTopicCreation":true,"topicType":"partitioned","defaultNumPartitions":2}`, 204, ""},
		{"GET", ns + "/autoTopicCreation", "", 200, `{"allowAutoTopicCreation":true,"topicType":"partitioned","defaultNumPartitions":2}`},
		{"GET", ns, "", 200, `"retention_policies":{"retentionTimeInMinutes":60,"retentionSizeInMB":100}`},
		{"GET", ns, "", 200, `"message_ttl_in_seconds":30`},
		{"GET", ns, "", 200, `"deduplicationEnabled":true`},
		{"GET", ns, "", 200, `"autoTopicCreationOverride":{"allowAutoTopicCreation":true`},
		{"GET", ns, "", 200, `"replication_clusters":["standalone"]`},
		{"GET", ns, "", 200, `"schema_compatibility_strategy":"UNDEFINED"`},

		{"DELETE", ns + "/backlogQuota", "", 204, ""},
		{"DELETE", ns + "/backlogQuota?backlogQuotaType=message_age", "", 204, ""},
		{"GET", ns + "/backlogQuotaMap", "", 200, `{}`},
		{"DELETE", ns + "/retention", "", 204, ""},
		{"GET", ns + "/retention", "", 204, ""},
		{"DELETE", ns + "/messageTTL", "", 204, ""},
		{"GET", ns + "/messageTTL", "", 204, ""},
		{"DELETE", ns + "/deduplication", "", 204, ""},
		{"GET", ns + "/deduplication", "", 204, ""},
		{"DELETE", ns + "/autoTopicCreation", "", 204, ""},
		{"GET", ns + "/autoTopicCreation", "", 204, ""},
	})

	// A namespace with a topic is not deleted.
	tn, err := broker.ParseTopicName("acme/ns/t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rb.b.Topic(context.Background(), tn, true); err != nil {
		t.Fatal(err)
	}
	before = rb.snapshot(t, watch...)
	rb.run(t, []step{{"DELETE", ns, "", 409, "non empty"}})
	if after := rb.snapshot(t, watch...); after != before {
		t.Fatalf("refused delete changed the namespace:\n%s\nwas\n%s", after, before)
	}
	rb.run(t, []step{
		{"PUT", "/admin/v2/namespaces/acme/empty", "", 204, ""},
		{"GET", "/admin/v2/namespaces/acme", "", 200, `["acme/empty","acme/ns"]`},
		{"DELETE", "/admin/v2/namespaces/acme/empty", "", 204, ""},
		{"GET", "/admin/v2/namespaces/acme", "", 200, `["acme/ns"]`},
		{"DELETE", ns + "?force=true", "", 204, ""},
		{"GET", "/admin/v2/namespaces/acme", "", 200, `[]`},
		{"GET", ns, "", 404, "namespace"},
	})
	if ts, err := rb.b.TopicsOfNamespace(context.Background(), "acme", "ns"); err != nil || len(ts) != 0 {
		t.Fatalf("topics after a forced delete = %v, %v", ts, err)
	}
}
