package admin

import (
	"encoding/json"
	"net/http"

	"github.com/magnetar-io/magnetar/broker"
)

// Namespaces and their policies (Pulsar's Namespaces v2), under
// /admin/v2/namespaces:
//
//	GET    /{tenant}                          200 ["tenant/ns", ...] | 404 tenant
//	PUT    /{tenant}/{ns}                     create, optional body Policies: 204 | 404 tenant | 409 exists | 412
//	GET    /{tenant}/{ns}                     200 Policies | 404
//	DELETE /{tenant}/{ns}[?force=true]        204 | 404 | 409 has topics (force deletes them)
//	GET    /{tenant}/{ns}/bundles             200 {"boundaries": [...], "numBundles": n}
//	GET    /{tenant}/{ns}/replication         200 [clusters]
//	POST   /{tenant}/{ns}/replication         body [clusters]: 204 | 412 unknown or not allowed
//	GET    /{tenant}/{ns}/retention           200 {"retentionTimeInMinutes", "retentionSizeInMB"} | 204 unset
//	POST   /{tenant}/{ns}/retention           body the same: 204 | 412 invalid or below the backlog quota
//	DELETE /{tenant}/{ns}/retention           204
//	GET    /{tenant}/{ns}/messageTTL          200 seconds | 204 unset
//	POST   /{tenant}/{ns}/messageTTL          body a number: 204 | 412 negative
//	DELETE /{tenant}/{ns}/messageTTL          204
//	GET    /{tenant}/{ns}/backlogQuotaMap     200 {"destination_storage": {"limitSize", "limitTime", "policy"}}
//	POST   /{tenant}/{ns}/backlogQuota[?backlogQuotaType=destination_storage|message_age]
//	                                          body {"limitSize", "limitTime", "policy"}: 204 | 400 | 412
//	DELETE /{tenant}/{ns}/backlogQuota[?backlogQuotaType=...]  204
//	GET    /{tenant}/{ns}/deduplication       200 true|false | 204 unset
//	POST   /{tenant}/{ns}/deduplication       body true|false: 204
//	DELETE /{tenant}/{ns}/deduplication       204
//	GET    /{tenant}/{ns}/autoTopicCreation   200 {"allowAutoTopicCreation", "topicType", "defaultNumPartitions"} | 204 unset
//	POST   /{tenant}/{ns}/autoTopicCreation   body the same: 204 | 412
//	DELETE /{tenant}/{ns}/autoTopicCreation   204
//	GET    /{tenant}/{ns}/persistence         200 {"bookkeeperEnsemble", "bookkeeperWriteQuorum", "bookkeeperAckQuorum", "managedLedgerMaxMarkDeleteRate"} | 204 unset
//	POST   /{tenant}/{ns}/persistence         body the same: 204 | 412 quorums out of order
//	DELETE /{tenant}/{ns}/persistence         204 (the broker's managed-ledger-* settings apply)
//
// As in Pulsar, an unset policy reads as 204 No Content, an invalid name
// is 412, a body that is not the expected JSON is 400, and a refused
// change changes nothing.

func init() { registrations = append(registrations, (*api).registerNamespaces) }

const nsPath = "/admin/v2/namespaces/{tenant}/{namespace}"

func nsOf(r *http.Request) (tenant, ns string) {
	return r.PathValue("tenant"), r.PathValue("namespace")
}

// writeOptional answers v as JSON, or 204 if it is nil (Pulsar answers
// an unset policy with no content).
func writeOptional[T any](w http.ResponseWriter, v *T) {
	if v == nil {
		noContent(w)
		return
	}
	writeJSON(w, http.StatusOK, *v)
}

// readOptional reads a required body that may be JSON null (nil).
func readOptional[T any](r *http.Request) (*T, error) {
	var raw json.RawMessage
	if err := readJSON(r, &raw, true); err != nil {
		return nil, err
	}
	var v *T
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, errStatus(http.StatusBadRequest, "invalid JSON body: %v", err)
	}
	return v, nil
}

func (a *api) registerNamespaces(s *Server) {
	a.handle(s, "GET /admin/v2/namespaces/{tenant}", func(w http.ResponseWriter, r *http.Request) error {
		nss, err := a.b.Namespaces(r.Context(), r.PathValue("tenant"))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, nss)
		return nil
	})
	a.handle(s, "PUT "+nsPath, func(w http.ResponseWriter, r *http.Request) error {
		var p *broker.Policies
		if err := readJSON(r, &p, false); err != nil {
			return err
		}
		tenant, ns := nsOf(r)
		if err := a.b.CreateNamespace(r.Context(), tenant, ns, p); err != nil {
			return err
		}
		noContent(w)
		return nil
	})
	a.handle(s, "GET "+nsPath, func(w http.ResponseWriter, r *http.Request) error {
		tenant, ns := nsOf(r)
		p, err := a.b.NamespacePolicies(r.Context(), tenant, ns)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, p)
		return nil
	})
	a.handle(s, "DELETE "+nsPath, func(w http.ResponseWriter, r *http.Request) error {
		force, err := boolQuery(r, "force")
		if err != nil {
			return err
		}
		tenant, ns := nsOf(r)
		if err := a.b.DeleteNamespace(r.Context(), tenant, ns, force); err != nil {
			return err
		}
		noContent(w)
		return nil
	})

	// Read-only views of the policies.
	policyGet := func(path string, answer func(w http.ResponseWriter, p broker.Policies)) {
		a.handle(s, "GET "+nsPath+path, func(w http.ResponseWriter, r *http.Request) error {
			tenant, ns := nsOf(r)
			p, err := a.b.NamespacePolicies(r.Context(), tenant, ns)
			if err != nil {
				return err
			}
			answer(w, p)
			return nil
		})
	}
	policyGet("/bundles", func(w http.ResponseWriter, p broker.Policies) { writeOptional(w, p.Bundles) })
	policyGet("/replication", func(w http.ResponseWriter, p broker.Policies) { writeJSON(w, http.StatusOK, p.ReplicationClusters) })
	policyGet("/retention", func(w http.ResponseWriter, p broker.Policies) { writeOptional(w, p.RetentionPolicies) })
	policyGet("/messageTTL", func(w http.ResponseWriter, p broker.Policies) { writeOptional(w, p.MessageTTLInSeconds) })
	policyGet("/backlogQuotaMap", func(w http.ResponseWriter, p broker.Policies) { writeJSON(w, http.StatusOK, p.BacklogQuotaMap) })
	policyGet("/deduplication", func(w http.ResponseWriter, p broker.Policies) { writeOptional(w, p.DeduplicationEnabled) })
	policyGet("/autoTopicCreation", func(w http.ResponseWriter, p broker.Policies) { writeOptional(w, p.AutoTopicCreationOverride) })
	policyGet("/persistence", func(w http.ResponseWriter, p broker.Policies) { writeOptional(w, p.Persistence) })

	// change registers a setter or remover answering 204.
	change := func(pattern string, f func(r *http.Request, tenant, ns string) error) {
		a.handle(s, pattern, func(w http.ResponseWriter, r *http.Request) error {
			tenant, ns := nsOf(r)
			if err := f(r, tenant, ns); err != nil {
				return err
			}
			noContent(w)
			return nil
		})
	}
	change("POST "+nsPath+"/replication", func(r *http.Request, tenant, ns string) error {
		var cs []string
		if err := readJSON(r, &cs, true); err != nil {
			return err
		}
		return a.b.SetReplicationClusters(r.Context(), tenant, ns, cs)
	})
	change("POST "+nsPath+"/retention", func(r *http.Request, tenant, ns string) error {
		v, err := readOptional[broker.RetentionPolicies](r)
		if err != nil {
			return err
		}
		return a.b.SetRetention(r.Context(), tenant, ns, v)
	})
	change("DELETE "+nsPath+"/retention", func(r *http.Request, tenant, ns string) error {
		return a.b.SetRetention(r.Context(), tenant, ns, nil)
	})
	change("POST "+nsPath+"/messageTTL", func(r *http.Request, tenant, ns string) error {
		v, err := readOptional[int](r)
		if err != nil {
			return err
		}
		return a.b.SetMessageTTL(r.Context(), tenant, ns, v)
	})
	change("DELETE "+nsPath+"/messageTTL", func(r *http.Request, tenant, ns string) error {
		return a.b.SetMessageTTL(r.Context(), tenant, ns, nil)
	})
	change("POST "+nsPath+"/backlogQuota", func(r *http.Request, tenant, ns string) error {
		var q struct {
			broker.BacklogQuota
			Limit *int64 `json:"limit"` // the old name of limitSize
		}
		if err := readJSON(r, &q, true); err != nil {
			return err
		}
		if q.Limit != nil && q.LimitSize == 0 {
			q.LimitSize = *q.Limit
		}
		return a.b.SetBacklogQuota(r.Context(), tenant, ns, r.URL.Query().Get("backlogQuotaType"), &q.BacklogQuota)
	})
	change("DELETE "+nsPath+"/backlogQuota", func(r *http.Request, tenant, ns string) error {
		return a.b.SetBacklogQuota(r.Context(), tenant, ns, r.URL.Query().Get("backlogQuotaType"), nil)
	})
	change("POST "+nsPath+"/deduplication", func(r *http.Request, tenant, ns string) error {
		v, err := readOptional[bool](r)
		if err != nil {
			return err
		}
		return a.b.SetDeduplication(r.Context(), tenant, ns, v)
	})
	change("DELETE "+nsPath+"/deduplication", func(r *http.Request, tenant, ns string) error {
		return a.b.SetDeduplication(r.Context(), tenant, ns, nil)
	})
	change("POST "+nsPath+"/autoTopicCreation", func(r *http.Request, tenant, ns string) error {
		var o broker.AutoTopicCreationOverride
		if err := readJSON(r, &o, true); err != nil {
			return err
		}
		return a.b.SetAutoTopicCreation(r.Context(), tenant, ns, &o)
	})
	change("DELETE "+nsPath+"/autoTopicCreation", func(r *http.Request, tenant, ns string) error {
		return a.b.SetAutoTopicCreation(r.Context(), tenant, ns, nil)
	})
	change("POST "+nsPath+"/persistence", func(r *http.Request, tenant, ns string) error {
		var pp broker.PersistencePolicies
		if err := readJSON(r, &pp, true); err != nil {
			return err
		}
		return a.b.SetPersistence(r.Context(), tenant, ns, &pp)
	})
	change("DELETE "+nsPath+"/persistence", func(r *http.Request, tenant, ns string) error {
		return a.b.SetPersistence(r.Context(), tenant, ns, nil)
	})
}
