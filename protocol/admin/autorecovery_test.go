package admin

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/broker/brokertest"
	"github.com/magnetar-io/magnetar/meta"
)

// GET /admin/v2/autorecovery/under-replicated lists the auditor's marks in
// ledger id order, with the lock holder and its progress where a worker
// holds one; without marks the list is empty, and without a metadata
// store the endpoint answers 503.
func TestUnderReplicatedEndpoint(t *testing.T) {
	stack := brokertest.Start(t, brokertest.Options{Bootstrap: true})
	ctx := context.Background()
	serve := func(store meta.Store) *restBroker {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base := "http://" + ln.Addr().String()
		s, err := New(Config{Listener: ln, Gatherer: prometheus.NewRegistry(), Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if err := RegisterAPI(s, APIConfig{Broker: stack.Broker, Cluster: "standalone", BrokerServiceURL: "pulsar://127.0.0.1:6650",
			WebServiceURL: base, Meta: store, Logger: quietLogger()}); err != nil {
			t.Fatal(err)
		}
		go s.Serve()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s.Shutdown(ctx)
		})
		return &restBroker{b: stack.Broker, base: base}
	}
	rb := serve(stack.Meta)
	const path = "/admin/v2/autorecovery/under-replicated"
	rb.run(t, []step{{method: "GET", path: path, code: http.StatusOK, want: "[]"}})

	for _, p := range []string{meta.UnderReplicatedLedgersRoot, meta.ReplicationLocksRoot} {
		if err := meta.EnsurePath(ctx, stack.Meta, p); err != nil {
			t.Fatal(err)
		}
	}
	create := func(p, v string, flags meta.CreateFlags) {
		if _, err := stack.Meta.Create(ctx, p, []byte(v), flags); err != nil {
			t.Fatal(err)
		}
	}
	create(meta.UnderReplicatedLedgersRoot+"/100", `{"missingBookies":["10.0.0.2:3181"],"markedAt":1700000000100}`, 0)
	create(meta.UnderReplicatedLedgersRoot+"/12", `{"missingBookies":["10.0.0.2:3181","10.0.0.4:3181"],"markedAt":1700000000012}`, 0)
	create(meta.UnderReplicatedLedgersRoot+"/7", `{"missingBookies":["10.0.0.4:3181"],"markedAt":1700000000007}`, 0)
	create(meta.ReplicationLocksRoot+"/12", `{"bookie":"10.0.0.3:3181","startedAt":1700000000500,"entriesCopied":1200}`, meta.Ephemeral)

	code, body := rb.do(t, "GET", path, "")
	if code != http.StatusOK {
		t.Fatalf("GET %s = %d %s", path, code, body)
	}
	var got []map[string]any
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	want := []map[string]any{
		{"ledgerId": 7.0, "missingBookies": []any{"10.0.0.4:3181"}, "markedAt": 1700000000007.0, "entriesCopied": 0.0},
		{"ledgerId": 12.0, "missingBookies": []any{"10.0.0.2:3181", "10.0.0.4:3181"}, "markedAt": 1700000000012.0,
			"replicatingBy": "10.0.0.3:3181", "entriesCopied": 1200.0},
		{"ledgerId": 100.0, "missingBookies": []any{"10.0.0.2:3181"}, "markedAt": 1700000000100.0, "entriesCopied": 0.0},
	}
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("GET %s:\n got  %s\n want %s", path, gotJSON, wantJSON)
	}

	serve(nil).run(t, []step{{method: "GET", path: path, code: http.StatusServiceUnavailable, want: "metadata store"}})
}
