package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/meta"
)

// The Pulsar admin (/admin/v2/...) and lookup (/lookup/v2/...) REST APIs,
// with Pulsar's paths, JSON shapes and status codes, so that Pulsar's
// tooling (pulsar-admin, pulsar-client-go's pulsaradmin) works unmodified.
// Each API area has its own file (clusters.go, tenants.go, namespaces.go,
// topics.go, lookup.go) that registers its routes in register*.
//
// Errors are answered as Pulsar answers them: a status code and a JSON
// body {"reason": "..."}: 400 bad input, 404 not found, 409 conflict (it
// exists already, or is not empty), 412 precondition failed, 500
// otherwise (logged).

// maxBody bounds request bodies.
const maxBody = 1 << 20

// APIConfig configures the REST API.
type APIConfig struct {
	// Broker serves the topics and holds tenants and namespaces. Required.
	Broker *broker.Broker
	// Cluster is the name of the cluster this broker belongs to
	// ("standalone" for magnetar standalone). Required.
	Cluster string
	// BrokerServiceURL ("pulsar://host:port") and WebServiceURL
	// ("http://host:port") are what lookups answer. Required.
	BrokerServiceURL string
	WebServiceURL    string
	// Meta is the metadata store, read by the auto-recovery endpoint;
	// without it that endpoint answers 503.
	Meta   meta.Store
	Logger *slog.Logger
}

// api holds what every handler needs.
type api struct {
	cfg APIConfig
	b   *broker.Broker
	log *slog.Logger
}

// RegisterAPI adds the admin and lookup REST APIs to s. Call it before
// Serve.
func RegisterAPI(s *Server, cfg APIConfig) error {
	switch {
	case cfg.Broker == nil:
		return errors.New("admin: APIConfig.Broker is required")
	case cfg.Cluster == "":
		return errors.New("admin: APIConfig.Cluster is required")
	case cfg.BrokerServiceURL == "" || cfg.WebServiceURL == "":
		return errors.New("admin: APIConfig.BrokerServiceURL and WebServiceURL are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &api{cfg: cfg, b: cfg.Broker, log: cfg.Logger}
	for _, register := range registrations {
		register(a, s)
	}
	return nil
}

// registrations are the API areas' route registrations (each file adds
// its own in an init function).
var registrations []func(a *api, s *Server)

// handle registers a handler that returns an error: a nil error means
// the handler wrote its answer.
func (a *api) handle(s *Server, pattern string, h func(w http.ResponseWriter, r *http.Request) error) {
	s.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			a.writeError(w, r, err)
		}
	}))
}

// httpError is an error with the status code to answer.
type httpError struct {
	status int
	reason string
}

func (e *httpError) Error() string { return e.reason }

// errStatus returns an error answered with status and reason.
func errStatus(status int, format string, args ...any) error {
	return &httpError{status: status, reason: fmt.Sprintf(format, args...)}
}

// statusOf maps broker errors to HTTP status codes.
func statusOf(err error) int {
	var he *httpError
	switch {
	case errors.As(err, &he):
		return he.status
	case errors.Is(err, broker.ErrTopicNotFound), errors.Is(err, broker.ErrTenantNotFound),
		errors.Is(err, broker.ErrNamespaceNotFound), errors.Is(err, broker.ErrClusterNotFound),
		errors.Is(err, broker.ErrSubscriptionNotFound), errors.Is(err, broker.ErrSchemaNotFound):
		return http.StatusNotFound
	case errors.Is(err, broker.ErrAlreadyExists), errors.Is(err, broker.ErrNotEmpty),
		errors.Is(err, broker.ErrSubscriptionBusy), errors.Is(err, broker.ErrProducerBusy),
		errors.Is(err, broker.ErrConsumerBusy):
		return http.StatusConflict
	case errors.Is(err, broker.ErrPreconditionFailed), errors.Is(err, broker.ErrIncompatibleSchema):
		return http.StatusPreconditionFailed
	case errors.Is(err, broker.ErrInvalidRequest), errors.Is(err, broker.ErrInvalidTopicName),
		errors.Is(err, broker.ErrInvalidSchema), errors.Is(err, broker.ErrInvalidGroup):
		return http.StatusBadRequest
	case errors.Is(err, broker.ErrBundleNotFound):
		return http.StatusNotFound
	case errors.Is(err, broker.ErrTopicClosed), errors.Is(err, broker.ErrBrokerClosed),
		errors.Is(err, broker.ErrBundleUnloading), errors.Is(err, broker.ErrNotOwner):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func (a *api) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if owner, ok := notOwner(err); ok {
		// As Pulsar does: the owner answers (clients follow 307 with the
		// same method and body).
		u := strings.TrimSuffix(owner.WebURL, "/") + r.URL.RequestURI()
		a.log.Info("admin: redirected to the owner", "method", r.Method, "path", r.URL.Path, "owner", owner.ID)
		http.Redirect(w, r, u, http.StatusTemporaryRedirect)
		return
	}
	status := statusOf(err)
	if status >= 500 {
		a.log.Error("admin: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	} else {
		a.log.Info("admin: request refused", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	writeJSON(w, status, map[string]string{"reason": err.Error()})
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if v != nil {
		_ = json.NewEncoder(w).Encode(v)
	}
}

// noContent answers 204, as Pulsar does for successful changes.
func noContent(w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) }

// readJSON decodes the request body into v (at most maxBody bytes).
// Unknown fields are ignored, as Pulsar ignores them. An empty body is an
// error only if required.
func readJSON(r *http.Request, v any, required bool) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return errStatus(http.StatusBadRequest, "reading the request body: %v", err)
	}
	if len(body) > maxBody {
		return errStatus(http.StatusRequestEntityTooLarge, "request body over %d bytes", maxBody)
	}
	if len(body) == 0 {
		if required {
			return errStatus(http.StatusBadRequest, "request body required")
		}
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		return errStatus(http.StatusBadRequest, "invalid JSON body: %v", err)
	}
	return nil
}
