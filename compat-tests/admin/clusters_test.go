package admin_test

import (
	"errors"
	"net/http"
	"slices"
	"testing"

	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/rest"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// adminCode is the HTTP status of a pulsaradmin error (0 if it is not one).
func adminCode(err error) int {
	var re rest.Error
	if errors.As(err, &re) {
		return re.Code
	}
	return 0
}

// unchanged reads paths before and after refused requests and fails t if
// any answer differs: a refused request must change nothing.
func unchanged(t *testing.T, paths []string, refused func()) {
	t.Helper()
	read := func() []string {
		var out []string
		for _, p := range paths {
			code, body := httpDo(t, "GET", p, "")
			out = append(out, p+" "+http.StatusText(code)+" "+body)
		}
		return out
	}
	before := read()
	refused()
	if after := read(); !slices.Equal(before, after) {
		t.Fatalf("refused requests changed state:\nbefore %q\nafter  %q", before, after)
	}
}

// expect sends a request with httpDo and checks its status; error answers
// must carry a JSON reason.
func expect(t *testing.T, method, path, body string, code int) {
	t.Helper()
	got, resp := httpDo(t, method, path, body)
	if got != code {
		t.Errorf("%s %s %s = %d %s, want %d", method, path, body, got, resp, code)
		return
	}
	if code >= 400 && !reasonRE.MatchString(resp) {
		t.Errorf("%s %s = %d with body %q: want a JSON reason", method, path, got, resp)
	}
}

func TestClusters(t *testing.T) {
	a := adminClient(t)
	srv := shared.Server(t)
	cs, err := a.Clusters().List()
	if err != nil || !slices.Contains(cs, "standalone") {
		t.Fatalf("Clusters().List() = %v, %v; want standalone in it", cs, err)
	}
	sa, err := a.Clusters().Get("standalone")
	if err != nil {
		t.Fatal(err)
	}
	if sa.ServiceURL != srv.HTTPURL() || sa.BrokerServiceURL != srv.PulsarURL() {
		t.Fatalf("standalone cluster = %+v; want serviceUrl %s, brokerServiceUrl %s", sa, srv.HTTPURL(), srv.PulsarURL())
	}

	c := name(t)
	if err := a.Clusters().Create(utils.ClusterData{Name: c, ServiceURL: "http://east:8080", BrokerServiceURL: "pulsar://east:6650"}); err != nil {
		t.Fatal(err)
	}
	got, err := a.Clusters().Get(c)
	if err != nil || got.ServiceURL != "http://east:8080" || got.BrokerServiceURL != "pulsar://east:6650" {
		t.Fatalf("Get(%s) = %+v, %v", c, got, err)
	}
	if err := a.Clusters().Update(utils.ClusterData{Name: c, ServiceURL: "http://east:9090"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.Clusters().Get(c); got.ServiceURL != "http://east:9090" || got.BrokerServiceURL != "" {
		t.Fatalf("after Update: %+v", got)
	}
	if err := a.Clusters().UpdatePeerClusters(c, []string{"standalone"}); err != nil {
		t.Fatal(err)
	}
	if peers, err := a.Clusters().GetPeerClusters(c); err != nil || !slices.Equal(peers, []string{"standalone"}) {
		t.Fatalf("GetPeerClusters = %v, %v", peers, err)
	}

	base := "/admin/v2/clusters/"
	unchanged(t, []string{"/admin/v2/clusters", base + c, base + "standalone"}, func() {
		if err := a.Clusters().Create(utils.ClusterData{Name: c}); adminCode(err) != 409 {
			t.Errorf("duplicate Create = %v, want 409", err)
		}
		if _, err := a.Clusters().Get(c + "-nope"); adminCode(err) != 404 {
			t.Errorf("Get of a missing cluster = %v, want 404", err)
		}
		expect(t, "PUT", base+"bad%20name", `{}`, 412)
		expect(t, "PUT", base+c+"-x", `{"serviceUrl":"no url"}`, 412)
		expect(t, "PUT", base+c+"-x", `{"serviceUrl":`, 400)
		expect(t, "POST", base+c, `{"serviceUrl":[1]}`, 400)
		expect(t, "POST", base+c+"-nope", `{}`, 404)
		expect(t, "DELETE", base+"standalone", "", 412)
		expect(t, "DELETE", base+c+"-nope", "", 404)
		expect(t, "POST", base+c+"/peers", `["`+c+`-nope"]`, 412)
	})

	if err := a.Clusters().Delete(c); err != nil {
		t.Fatal(err)
	}
	if cs, _ := a.Clusters().List(); slices.Contains(cs, c) {
		t.Fatalf("deleted cluster still listed: %v", cs)
	}
}
