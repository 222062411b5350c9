package admin

// Lookup: Pulsar's HTTP topic lookup, answered with Pulsar's LookupData.
//
//	GET /lookup/v2/topic/persistent/{tenant}/{namespace}/{topic}
//	→ {"brokerUrl": "pulsar://host:6650", "brokerUrlTls": "",
//	   "httpUrl": "http://host:8080", "httpUrlTls": "", "nativeUrl": "pulsar://host:6650"}
//
// The answer names the broker that owns the topic's bundle, or the one
// chosen to take it if nobody owns it (broker ownership.go);
// ?authoritative=true makes this broker take an unowned bundle itself.
// The topic need not exist (clients create topics on first use, as
// auto-creation allows). 503 while the bundle is being handed over.

import "net/http"

func init() { registrations = append(registrations, registerLookup) }

func registerLookup(a *api, s *Server) {
	a.handle(s, "GET /lookup/v2/topic/persistent/{tenant}/{namespace}/{topic}", a.lookupTopic)
}

// lookupData is Pulsar's LookupData.
type lookupData struct {
	BrokerURL    string `json:"brokerUrl"`
	BrokerURLTLS string `json:"brokerUrlTls"`
	HTTPURL      string `json:"httpUrl"`
	HTTPURLTLS   string `json:"httpUrlTls"`
	NativeURL    string `json:"nativeUrl"`
}

func (a *api) lookupTopic(w http.ResponseWriter, r *http.Request) error {
	t, err := topicOf(r)
	if err != nil {
		return err
	}
	auth, err := boolQuery(r, "authoritative")
	if err != nil {
		return err
	}
	l, err := a.b.LookupTopic(r.Context(), t, auth)
	if err != nil {
		return err
	}
	d := lookupData{BrokerURL: a.cfg.BrokerServiceURL, HTTPURL: a.cfg.WebServiceURL, NativeURL: a.cfg.BrokerServiceURL}
	if !l.Self {
		d = lookupData{BrokerURL: l.Owner.PulsarURL, HTTPURL: l.Owner.WebURL, NativeURL: l.Owner.PulsarURL}
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}
