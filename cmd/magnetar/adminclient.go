package main

// A small client of the Pulsar admin REST API (/admin/v2, /lookup/v2) for
// `magnetar admin`: plain net/http, Pulsar's paths and JSON. Responses
// are returned as the server sent them; the commands decide how to show
// them.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
)

const (
	adminDialTimeout    = 5 * time.Second
	adminRequestTimeout = 60 * time.Second
	maxAdminResponse    = 64 << 20
)

// adminClient sends requests to the REST API at base (http://host:port).
type adminClient struct {
	base string
	http *http.Client
}

func newAdminClient(base string) *adminClient {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: adminDialTimeout}).DialContext,
		TLSHandshakeTimeout: adminDialTimeout,
	}
	return &adminClient{base: strings.TrimSuffix(base, "/"), http: &http.Client{Transport: tr, Timeout: adminRequestTimeout}}
}

// apiError is an answer of the server with a status of 400 or above. Reason
// is its JSON {"reason": ...}, or the body's text if it has none.
type apiError struct {
	Method, Path string
	Status       int
	Reason       string
}

func (e *apiError) Error() string {
	reason := e.Reason
	if reason == "" {
		reason = "(no reason given)"
	}
	return fmt.Sprintf("%s (%d %s, %s %s)", reason, e.Status, http.StatusText(e.Status), e.Method, e.Path)
}

// errUnreachable marks a request that never reached the server.
var errUnreachable = errors.New("cannot reach the broker")

// adminResponse is a successful answer.
type adminResponse struct {
	Status int
	Header http.Header
	Body   []byte
}

// do sends a request; body, unless nil, is sent as JSON. An answer of 400
// or above is an *apiError; a failure to connect wraps errUnreachable.
func (c *adminClient) do(ctx context.Context, method, path string, query url.Values, body any) (*adminResponse, error) {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		if isConnectError(err) {
			return nil, fmt.Errorf("%w at %s: %v", errUnreachable, c.base, connectCause(err))
		}
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminResponse))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		return nil, &apiError{Method: method, Path: path, Status: resp.StatusCode, Reason: reasonOf(data)}
	}
	return &adminResponse{Status: resp.StatusCode, Header: resp.Header, Body: data}, nil
}

// reasonOf returns the reason of a Pulsar error body {"reason": "..."}, or
// the body itself, trimmed, if it is not one.
func reasonOf(body []byte) string {
	var e struct {
		Reason *string `json:"reason"`
	}
	if json.Unmarshal(body, &e) == nil && e.Reason != nil {
		return *e.Reason
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 500 {
		s = s[:500] + "..."
	}
	return s
}

// isConnectError tells whether err is a failure to open the connection
// (refused, no route, unknown host, dial timeout), as opposed to a failure
// of a request the server received.
func isConnectError(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns) || errors.Is(err, syscall.ECONNREFUSED)
}

// connectCause is the innermost useful text of a connection error
// ("connection refused", "i/o timeout", "no such host").
func connectCause(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		var dns *net.DNSError
		if errors.As(op.Err, &dns) {
			return dns.Error()
		}
		var se interface{ Unwrap() error }
		if errors.As(op.Err, &se) && se.Unwrap() != nil {
			return se.Unwrap().Error()
		}
		return op.Err.Error()
	}
	return err.Error()
}
