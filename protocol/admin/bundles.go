package admin

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/broker"
)

// Bundles, ownership and brokers (Pulsar's paths where Pulsar has them):
//
//	PUT /admin/v2/namespaces/{tenant}/{ns}/{bundle}/unload   204: the owner gives the bundle up; another broker takes it
//	PUT /admin/v2/namespaces/{tenant}/{ns}/{bundle}/split    204: the owner splits it in two equal halves
//	PUT /admin/v2/namespaces/{tenant}/{ns}/unload            204: every bundle of the namespace is unloaded
//	GET /admin/v2/namespaces/{tenant}/{ns}/ownership         200 [{"bundle", "owner", "webServiceUrl", ...}] (Magnetar)
//	GET /admin/v2/brokers/{cluster}                          200 ["host:port", ...] the live brokers' HTTP addresses
//	GET /admin/v2/brokers/{cluster}/loads                    200 [{"id", "pulsarServiceUrl", ..., "load": {...}}] (Magnetar)
//
// A request about a bundle or topic another broker owns is redirected to
// it (307, as Pulsar redirects admin calls to the owner); one about a
// bundle nobody owns unloads nothing. {bundle} is "0x00000000_0x40000000".

func init() { registrations = append(registrations, (*api).registerBundles) }

func (a *api) registerBundles(s *Server) {
	bundleOf := func(r *http.Request) (broker.Bundle, error) {
		tenant, ns := nsOf(r)
		return broker.ParseBundle(tenant, ns, r.PathValue("bundle"))
	}
	a.handle(s, "PUT "+nsPath+"/{bundle}/unload", func(w http.ResponseWriter, r *http.Request) error {
		bd, err := bundleOf(r)
		if err != nil {
			return err
		}
		if err := a.b.UnloadBundle(r.Context(), bd); err != nil {
			return err
		}
		noContent(w)
		return nil
	})
	a.handle(s, "PUT "+nsPath+"/{bundle}/split", func(w http.ResponseWriter, r *http.Request) error {
		bd, err := bundleOf(r)
		if err != nil {
			return err
		}
		if alg := r.URL.Query().Get("splitAlgorithmName"); alg != "" && alg != "range_equally_divide" {
			return errStatus(http.StatusPreconditionFailed, "split algorithm %q is not supported: only range_equally_divide", alg)
		}
		if err := a.b.SplitBundle(r.Context(), bd); err != nil {
			return err
		}
		noContent(w)
		return nil
	})
	a.handle(s, "PUT "+nsPath+"/unload", func(w http.ResponseWriter, r *http.Request) error {
		tenant, ns := nsOf(r)
		bundles, err := a.b.Bundles(r.Context(), tenant, ns)
		if err != nil {
			return err
		}
		for _, bd := range bundles {
			err := a.b.UnloadBundle(r.Context(), bd)
			if owner, ok := notOwner(err); ok {
				err = a.forward(r.Context(), owner, http.MethodPut, "/admin/v2/namespaces/"+bd.String()+"/unload")
			}
			if err != nil {
				return err
			}
		}
		noContent(w)
		return nil
	})
	a.handle(s, "GET "+nsPath+"/ownership", func(w http.ResponseWriter, r *http.Request) error {
		tenant, ns := nsOf(r)
		bundles, err := a.b.Bundles(r.Context(), tenant, ns)
		if err != nil {
			return err
		}
		type owned struct {
			Bundle        string `json:"bundle"`
			Owner         string `json:"owner,omitempty"`
			WebServiceURL string `json:"webServiceUrl,omitempty"`
			PulsarURL     string `json:"brokerServiceUrl,omitempty"`
		}
		out := []owned{}
		for _, bd := range bundles {
			o := owned{Bundle: bd.Range()}
			bi, ok, err := a.b.BundleOwner(r.Context(), bd)
			if err != nil {
				return err
			}
			if ok {
				o.Owner, o.WebServiceURL, o.PulsarURL = bi.ID, bi.WebURL, bi.PulsarURL
			}
			out = append(out, o)
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
	liveBrokers := func(r *http.Request) ([]broker.LiveBroker, error) {
		if c := r.PathValue("cluster"); c != a.cfg.Cluster {
			if _, err := a.b.Cluster(r.Context(), c); err != nil {
				return nil, err
			}
			return nil, nil // a cluster whose brokers are elsewhere
		}
		return a.b.LiveBrokers(r.Context())
	}
	a.handle(s, "GET /admin/v2/brokers/{cluster}", func(w http.ResponseWriter, r *http.Request) error {
		list, err := liveBrokers(r)
		if err != nil {
			return err
		}
		out := []string{}
		for _, lb := range list {
			out = append(out, strings.TrimPrefix(strings.TrimPrefix(lb.Info.WebURL, "http://"), "https://"))
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
	a.handle(s, "GET /admin/v2/brokers/{cluster}/loads", func(w http.ResponseWriter, r *http.Request) error {
		list, err := liveBrokers(r)
		if err != nil {
			return err
		}
		type brokerLoad struct {
			broker.BrokerInfo
			StartedAtMs int64             `json:"startedAtMs"`
			Load        broker.LoadReport `json:"load"`
		}
		out := []brokerLoad{}
		for _, lb := range list {
			out = append(out, brokerLoad{BrokerInfo: lb.Info, StartedAtMs: lb.StartedAtMs, Load: lb.Load})
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}

// notOwner returns the owner named by a *broker.NotOwnerError.
func notOwner(err error) (broker.BrokerInfo, bool) {
	if ne, ok := err.(*broker.NotOwnerError); ok && ne.Owner.WebURL != "" {
		return ne.Owner, true
	}
	return broker.BrokerInfo{}, false
}

// forward makes a bodiless request of another broker's REST API, as the
// admin client would; a status of 300 or more is an error.
func (a *api) forward(ctx context.Context, to broker.BrokerInfo, method, path string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(to.WebURL, "/")+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("asking broker %s: %w", to.ID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return errStatus(resp.StatusCode, "broker %s answered %s to %s %s", to.ID, resp.Status, method, path)
	}
	return nil
}
