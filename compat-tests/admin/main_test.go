// Package admin_test runs the admin client of Apache Pulsar's Go client
// (pulsaradmin), unmodified, and plain HTTP against the REST API of a real
// magnetar standalone. Tests share one server (started on first use); each
// uses its own tenants, namespaces and topics, named after the test.
package admin_test

import (
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/config"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

var shared = harness.NewShared()

func TestMain(m *testing.M) { os.Exit(shared.Run(m)) }

// adminClient returns a pulsaradmin client of the shared server.
func adminClient(t testing.TB) pulsaradmin.Client {
	t.Helper()
	srv := shared.Server(t)
	c, err := pulsaradmin.NewClient(&config.Config{WebServiceURL: srv.HTTPURL()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// name is a fresh name for a tenant, namespace or topic (letters, digits,
// dashes), unique to the test.
func name(t testing.TB) string { return harness.Name(t) }

// httpDo sends a request with an optional JSON body to the shared server
// and returns the status code and body.
func httpDo(t testing.TB, method, path, body string) (int, string) {
	t.Helper()
	srv := shared.Server(t)
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, srv.HTTPURL()+path, r)
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
