package admin_test

import (
	"regexp"
	"slices"
	"testing"

	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// reasonRE matches Pulsar's error body.
var reasonRE = regexp.MustCompile(`^\{"reason":".+"\}\s*$`)

// newTenant creates a tenant named after t, allowed on standalone.
func newTenant(t *testing.T) string {
	t.Helper()
	tn := name(t)
	if err := adminClient(t).Tenants().Create(utils.TenantData{Name: tn, AllowedClusters: []string{"standalone"}}); err != nil {
		t.Fatalf("creating tenant %s: %v", tn, err)
	}
	return tn
}

func TestTenants(t *testing.T) {
	a := adminClient(t)
	ts, err := a.Tenants().List()
	if err != nil || !slices.Contains(ts, "public") {
		t.Fatalf("Tenants().List() = %v, %v; want public in it", ts, err)
	}
	pub, err := a.Tenants().Get("public")
	if err != nil || !slices.Equal(pub.AllowedClusters, []string{"standalone"}) {
		t.Fatalf("Get(public) = %+v, %v", pub, err)
	}

	tn := name(t)
	if err := a.Tenants().Create(utils.TenantData{Name: tn, AdminRoles: []string{"ops"}, AllowedClusters: []string{"standalone"}}); err != nil {
		t.Fatal(err)
	}
	got, err := a.Tenants().Get(tn)
	if err != nil || !slices.Equal(got.AdminRoles, []string{"ops"}) || !slices.Equal(got.AllowedClusters, []string{"standalone"}) {
		t.Fatalf("Get(%s) = %+v, %v", tn, got, err)
	}
	if ts, _ := a.Tenants().List(); !slices.Contains(ts, tn) {
		t.Fatalf("List() = %v, want %s in it", ts, tn)
	}
	if err := a.Tenants().Update(utils.TenantData{Name: tn, AdminRoles: []string{"ops", "dev"}, AllowedClusters: []string{"standalone"}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.Tenants().Get(tn); !slices.Equal(got.AdminRoles, []string{"ops", "dev"}) {
		t.Fatalf("after Update: %+v", got)
	}
	if err := a.Tenants().Delete(tn); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Tenants().Get(tn); adminCode(err) != 404 {
		t.Fatalf("Get after Delete = %v, want 404", err)
	}
	if ts, _ := a.Tenants().List(); slices.Contains(ts, tn) {
		t.Fatalf("deleted tenant still listed: %v", ts)
	}
}

func TestTenantBadInput(t *testing.T) {
	a := adminClient(t)
	tn := newTenant(t)
	if err := a.Namespaces().CreateNamespace(tn + "/ns"); err != nil {
		t.Fatal(err)
	}
	p := "/admin/v2/tenants/" + tn
	unchanged(t, []string{"/admin/v2/tenants", p, "/admin/v2/namespaces/" + tn}, func() {
		if err := a.Tenants().Create(utils.TenantData{Name: tn, AllowedClusters: []string{"standalone"}}); adminCode(err) != 409 {
			t.Errorf("duplicate Create = %v, want 409", err)
		}
		if err := a.Tenants().Create(utils.TenantData{Name: tn + "-x", AllowedClusters: []string{"nowhere"}}); adminCode(err) != 412 {
			t.Errorf("Create with an unknown cluster = %v, want 412", err)
		}
		if err := a.Tenants().Update(utils.TenantData{Name: tn + "-nope", AllowedClusters: []string{"standalone"}}); adminCode(err) != 404 {
			t.Errorf("Update of a missing tenant = %v, want 404", err)
		}
		if err := a.Tenants().Delete(tn); adminCode(err) != 409 {
			t.Errorf("Delete of a tenant with a namespace = %v, want 409", err)
		}
		expect(t, "GET", p+"-nope", "", 404)
		expect(t, "PUT", p+"-x", `{"allowedClusters":[]}`, 412)
		expect(t, "PUT", p+"-x", ``, 412)
		expect(t, "PUT", "/admin/v2/tenants/bad%21name", `{"allowedClusters":["standalone"]}`, 412)
		expect(t, "PUT", p+"-x", `{"allowedClusters":"standalone"}`, 400)
		expect(t, "POST", p, `{"allowedClusters":["nowhere"]}`, 412)
		expect(t, "POST", p, `{`, 400)
		expect(t, "DELETE", p+"?force=perhaps", "", 400)
		expect(t, "DELETE", p+"-nope", "", 404)
	})
	// Forced: the tenant goes with its namespaces.
	expect(t, "DELETE", p+"?force=true", "", 204)
	if _, err := a.Tenants().Get(tn); adminCode(err) != 404 {
		t.Fatalf("Get after forced Delete = %v, want 404", err)
	}
	if _, err := a.Namespaces().GetNamespaces(tn); adminCode(err) != 404 {
		t.Fatalf("GetNamespaces after forced Delete = %v, want 404", err)
	}
}
