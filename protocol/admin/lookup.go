package admin

// Lookup: Pulsar's HTTP topic lookup, answered with Pulsar's LookupData.
//
//	GET /lookup/v2/topic/persistent/{tenant}/{namespace}/{topic}
//	→ {"brokerUrl": "pulsar://host:6650", "brokerUrlTls": "",
//	   "httpUrl": "http://host:8080", "httpUrlTls": "", "nativeUrl": "pulsar://host:6650"}
//
// One broker serves every topic today, so the answer is this broker's
// advertised URLs (APIConfig); the topic name is checked, not looked up
// (clients create topics on first use, as auto-creation allows).

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
	if _, err := topicOf(r); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, lookupData{BrokerURL: a.cfg.BrokerServiceURL, HTTPURL: a.cfg.WebServiceURL,
		NativeURL: a.cfg.BrokerServiceURL})
	return nil
}
