package main

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
)

func TestParseListen(t *testing.T) {
	for _, tc := range []struct {
		in      string
		wantErr string // "" means valid
	}{
		{"0.0.0.0:6650", ""},
		{"127.0.0.1:0", ""},
		{":9092", ""},
		{"[::]:8080", ""},
		{"[::1]:8080", ""},
		{"localhost:8080", ""},
		{"broker-1.example.com:9092", ""},
		{"localhost", "missing port"},
		{"", "missing port"},
		{"::1:8080", "too many colons"},
		{"host:http", `port "http" is not a number`},
		{"host:65536", `port "65536"`},
		{"host:-1", `port "-1"`},
		{"bad_host!:1", "not an IP address or host name"},
		{"-host:1", "not an IP address or host name"},
	} {
		_, err := parseListen(tc.in)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("parseListen(%q) = %v, want ok", tc.in, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("parseListen(%q) = %v, want error containing %q", tc.in, err, tc.wantErr)
		}
	}
}

func TestParseAdvertisedHost(t *testing.T) {
	for _, tc := range []struct {
		in, want, wantErr string
	}{
		{"", "", ""},
		{"broker-1", "broker-1", ""},
		{"broker-1.example.com", "broker-1.example.com", ""},
		{"10.0.0.5", "10.0.0.5", ""},
		{"::1", "::1", ""},
		{"[fd00::5]", "fd00::5", ""},
		{"0.0.0.0", "", "not an address clients can connect to"},
		{"::", "", "not an address clients can connect to"},
		{"host:6650", "", "without a port"},
		{"two words", "", "not a valid host name"},
	} {
		got, err := parseAdvertisedHost(tc.in)
		switch {
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("parseAdvertisedHost(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("parseAdvertisedHost(%q) = %q, %v; want error containing %q", tc.in, got, err, tc.wantErr)
		}
	}
}

// TestAdvertisedHost is the rule of the issue: the configured host if set,
// else the listen address's host if it names one, else the hostname.
func TestAdvertisedHost(t *testing.T) {
	hostname := func() (string, error) { return "machine-7", nil }
	noHostname := func() (string, error) { return "", errors.New("uname failed") }
	for _, tc := range []struct {
		configured, listen string
		hostname           func() (string, error)
		want, wantErr      string
	}{
		{"", "127.0.0.1:19092", hostname, "127.0.0.1", ""},
		{"", "0.0.0.0:9092", hostname, "machine-7", ""},
		{"", ":9092", hostname, "machine-7", ""},
		{"", "[::]:9092", hostname, "machine-7", ""},
		{"", "[::1]:9092", hostname, "::1", ""},
		{"", "broker-1.example.com:6650", hostname, "broker-1.example.com", ""},
		{"public.example.com", "0.0.0.0:9092", hostname, "public.example.com", ""},
		{"public.example.com", "127.0.0.1:9092", hostname, "public.example.com", ""},
		{"", "127.0.0.1:9092", noHostname, "127.0.0.1", ""}, // hostname not needed
		{"", "0.0.0.0:9092", noHostname, "", "set --advertised-host"},
		{"", "0.0.0.0:9092", func() (string, error) { return "", nil }, "", "set --advertised-host"},
	} {
		got, err := advertisedHost(tc.configured, tc.listen, tc.hostname)
		switch {
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("advertisedHost(%q, %q) = %q, %v; want %q", tc.configured, tc.listen, got, err, tc.want)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("advertisedHost(%q, %q) = %q, %v; want error containing %q", tc.configured, tc.listen, got, err, tc.wantErr)
		}
	}
}

func TestAdvertisedAddr(t *testing.T) {
	for _, tc := range []struct{ host, listen, want string }{
		{"machine-7", "0.0.0.0:9092", "machine-7:9092"},
		{"::1", "[::1]:6650", "[::1]:6650"},
	} {
		if got := advertisedAddr(tc.host, tc.listen); got != tc.want {
			t.Errorf("advertisedAddr(%q, %q) = %q, want %q", tc.host, tc.listen, got, tc.want)
		}
	}
}

func TestListenErrorMessage(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	_, err = listen("http", addr)
	if err == nil {
		t.Fatal("listen on a busy port succeeded")
	}
	if want := "http listener " + addr + ": address already in use"; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("error %v does not match EADDRINUSE", err)
	}
}

func TestBoundAddr(t *testing.T) {
	for _, tc := range []struct{ configured, bound, want string }{
		{"0.0.0.0:8080", "[::]:8080", "0.0.0.0:8080"},
		{"127.0.0.1:0", "127.0.0.1:41234", "127.0.0.1:41234"},
		{":0", "[::]:41234", ":41234"},
		{"[::1]:0", "[::1]:41234", "[::1]:41234"},
	} {
		bound, err := net.ResolveTCPAddr("tcp", tc.bound)
		if err != nil {
			t.Fatal(err)
		}
		if got := boundAddr(tc.configured, bound); got != tc.want {
			t.Errorf("boundAddr(%q, %v) = %q, want %q", tc.configured, tc.bound, got, tc.want)
		}
	}
}
