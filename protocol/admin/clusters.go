package admin

import (
	"net/http"

	"github.com/magnetar-io/magnetar/broker"
)

// Clusters (Pulsar's ClustersBase):
//
//	GET    /admin/v2/clusters                   200 ["standalone", ...]
//	GET    /admin/v2/clusters/{cluster}         200 ClusterData | 404
//	PUT    /admin/v2/clusters/{cluster}         create: 204 | 409 exists | 412 bad name or URL
//	POST   /admin/v2/clusters/{cluster}         update: 204 | 404
//	DELETE /admin/v2/clusters/{cluster}         204 | 404 | 412 in use (by a tenant, or this broker's)
//	GET    /admin/v2/clusters/{cluster}/peers   200 [names]
//	POST   /admin/v2/clusters/{cluster}/peers   body [names] (existing clusters): 204 | 404 | 412
//
// ClusterData: {"serviceUrl", "serviceUrlTls", "brokerServiceUrl",
// "brokerServiceUrlTls", "peerClusterNames"}; other fields are ignored.

func init() { registrations = append(registrations, (*api).registerClusters) }

func (a *api) registerClusters(s *Server) {
	a.handle(s, "GET /admin/v2/clusters", func(w http.ResponseWriter, r *http.Request) error {
		cs, err := a.b.Clusters(r.Context())
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, cs)
		return nil
	})
	a.handle(s, "GET /admin/v2/clusters/{cluster}", func(w http.ResponseWriter, r *http.Request) error {
		c, err := a.b.Cluster(r.Context(), r.PathValue("cluster"))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, c)
		return nil
	})
	a.handle(s, "PUT /admin/v2/clusters/{cluster}", func(w http.ResponseWriter, r *http.Request) error {
		var c broker.ClusterData
		if err := readJSON(r, &c, false); err != nil {
			return err
		}
		if err := a.b.CreateCluster(r.Context(), r.PathValue("cluster"), c); err != nil {
			return err
		}
		noContent(w)
		return nil
	})
	a.handle(s, "POST /admin/v2/clusters/{cluster}", func(w http.ResponseWriter, r *http.Request) error {
		var c broker.ClusterData
		if err := readJSON(r, &c, true); err != nil {
			return err
		}
		if err := a.b.UpdateCluster(r.Context(), r.PathValue("cluster"), c); err != nil {
			return err
		}
		noContent(w)
		return nil
	})
	a.handle(s, "DELETE /admin/v2/clusters/{cluster}", func(w http.ResponseWriter, r *http.Request) error {
		if err := a.b.DeleteCluster(r.Context(), r.PathValue("cluster")); err != nil {
			return err
		}
		noContent(w)
		return nil
	})
	a.handle(s, "GET /admin/v2/clusters/{cluster}/peers", func(w http.ResponseWriter, r *http.Request) error {
		c, err := a.b.Cluster(r.Context(), r.PathValue("cluster"))
		if err != nil {
			return err
		}
		peers := c.PeerClusterNames
		if peers == nil {
			peers = []string{}
		}
		writeJSON(w, http.StatusOK, peers)
		return nil
	})
	a.handle(s, "POST /admin/v2/clusters/{cluster}/peers", func(w http.ResponseWriter, r *http.Request) error {
		var peers []string
		if err := readJSON(r, &peers, true); err != nil {
			return err
		}
		if err := a.b.SetPeerClusters(r.Context(), r.PathValue("cluster"), peers); err != nil {
			return err
		}
		noContent(w)
		return nil
	})
}
