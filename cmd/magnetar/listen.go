package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// parseListen checks a listen address "host:port": the host is empty, an
// IP address or a host name; the port is a number (0 picks a free one).
func parseListen(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			err = errors.New(ae.Err)
		}
		return "", fmt.Errorf("want host:port, e.g. 0.0.0.0:8080: %w", err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	if host != "" && net.ParseIP(host) == nil && !validHostname(host) {
		return "", fmt.Errorf("host %q is not an IP address or host name", host)
	}
	return addr, nil
}

// parseAdvertisedHost checks an --advertised-host: empty (derive it per
// listener), a host name, or an IP address (IPv6 with or without
// brackets). It returns the host without brackets.
func parseAdvertisedHost(h string) (string, error) {
	if h == "" {
		return "", nil
	}
	bare := strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if ip := net.ParseIP(bare); ip != nil {
		if ip.IsUnspecified() {
			return "", fmt.Errorf("%s is not an address clients can connect to", h)
		}
		return bare, nil
	}
	if strings.Contains(h, ":") {
		return "", errors.New("want a host name or IP address, without a port")
	}
	if !validHostname(h) {
		return "", errors.New("not a valid host name or IP address")
	}
	return h, nil
}

// validHostname reports whether h is a DNS name: dot-separated labels of
// letters, digits, '-' and '_', each 1 to 63 bytes and not starting or
// ending with '-'.
func validHostname(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range []byte(label) {
			ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
			if !ok {
				return false
			}
		}
	}
	return true
}

// advertisedHost returns the host that clients are told to connect to for
// a listener on listen (a checked "host:port"): configured when set,
// otherwise the listen address's host when it names one, otherwise (empty,
// 0.0.0.0 or ::) this machine's host name.
func advertisedHost(configured, listen string, hostname func() (string, error)) (string, error) {
	if configured != "" {
		return configured, nil
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return host, nil
	}
	name, err := hostname()
	if err != nil {
		return "", fmt.Errorf("listen address %s names no host and the machine's host name is unknown (%w); set --advertised-host", listen, err)
	}
	if name == "" {
		return "", fmt.Errorf("listen address %s names no host and the machine's host name is empty; set --advertised-host", listen)
	}
	return name, nil
}

// advertisedAddr is host:port of what clients are told for a listener.
func advertisedAddr(host, listen string) string {
	_, port, _ := net.SplitHostPort(listen)
	return net.JoinHostPort(host, port)
}

// boundAddr is the configured listen address with the port the listener
// got (which differs when the configured port is 0). Unlike the
// listener's own address it keeps the configured host: 0.0.0.0 stays
// 0.0.0.0 rather than becoming [::].
func boundAddr(configured string, bound net.Addr) string {
	host, _, err := net.SplitHostPort(configured)
	if err != nil {
		return bound.String()
	}
	_, port, err := net.SplitHostPort(bound.String())
	if err != nil {
		return bound.String()
	}
	return net.JoinHostPort(host, port)
}

// listen opens a TCP listener for the named protocol. Its errors read
// "http listener 0.0.0.0:8080: address already in use".
func listen(name, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listener %s: %w", name, addr, listenCause(err))
	}
	return ln, nil
}

// listenCause strips the "listen tcp ADDR: bind:" wrapping off a listen
// error, leaving the cause (which errors.Is still matches).
func listenCause(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		err = oe.Err
	}
	var se *os.SyscallError
	if errors.As(err, &se) && se.Err != nil {
		err = se.Err
	}
	return err
}

// parseHostPort checks an address to connect to: host:port with a host
// and a port from 1.
func parseHostPort(addr string) (string, error) {
	if _, err := parseListen(addr); err != nil {
		return "", err
	}
	host, port, _ := net.SplitHostPort(addr)
	if host == "" || port == "0" {
		return "", errors.New("want host:port with a host and a port, e.g. localhost:9092")
	}
	return addr, nil
}
