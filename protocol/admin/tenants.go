package admin

import (
	"net/http"

	"github.com/magnetar-io/magnetar/broker"
)

// Tenants (Pulsar's TenantsBase):
//
//	GET    /admin/v2/tenants                200 ["public", ...]
//	GET    /admin/v2/tenants/{tenant}       200 TenantInfo | 404
//	PUT    /admin/v2/tenants/{tenant}       create: 204 | 409 exists | 412 bad name, no or unknown clusters
//	POST   /admin/v2/tenants/{tenant}       update: 204 | 404 | 412
//	DELETE /admin/v2/tenants/{tenant}       204 | 404 | 409 has namespaces
//	       ?force=true                      deletes its namespaces (and their topics) first
//
// TenantInfo: {"adminRoles": [...], "allowedClusters": [...]}.

func init() { registrations = append(registrations, (*api).registerTenants) }

func (a *api) registerTenants(s *Server) {
	a.handle(s, "GET /admin/v2/tenants", func(w http.ResponseWriter, r *http.Request) error {
		ts, err := a.b.Tenants(r.Context())
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, ts)
		return nil
	})
	a.handle(s, "GET /admin/v2/tenants/{tenant}", func(w http.ResponseWriter, r *http.Request) error {
		ti, err := a.b.Tenant(r.Context(), r.PathValue("tenant"))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, ti)
		return nil
	})
	a.handle(s, "PUT /admin/v2/tenants/{tenant}", func(w http.ResponseWriter, r *http.Request) error {
		var ti broker.TenantInfo
		if err := readJSON(r, &ti, false); err != nil {
			return err
		}
		if err := a.b.CreateTenant(r.Context(), r.PathValue("tenant"), ti); err != nil {
			return err
		}
		noContent(w)
		return nil
	})
	a.handle(s, "POST /admin/v2/tenants/{tenant}", func(w http.ResponseWriter, r *http.Request) error {
		var ti broker.TenantInfo
		if err := readJSON(r, &ti, true); err != nil {
			return err
		}
		if err := a.b.UpdateTenant(r.Context(), r.PathValue("tenant"), ti); err != nil {
			return err
		}
		noContent(w)
		return nil
	})
	a.handle(s, "DELETE /admin/v2/tenants/{tenant}", func(w http.ResponseWriter, r *http.Request) error {
		force, err := boolQuery(r, "force")
		if err != nil {
			return err
		}
		if err := a.b.DeleteTenant(r.Context(), r.PathValue("tenant"), force); err != nil {
			return err
		}
		noContent(w)
		return nil
	})
}
