package memnet

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

func pair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	l := Listen("bookie-1")
	t.Cleanup(func() { l.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	c, err := l.Dial()
	if err != nil {
		t.Fatal(err)
	}
	return c, <-accepted
}

func TestStreamBothWaysWithBackpressure(t *testing.T) {
	c, s := pair(t)
	if s.LocalAddr().String() != "bookie-1" || c.RemoteAddr().Network() != "memnet" {
		t.Fatalf("addresses %v %v", s.LocalAddr(), c.RemoteAddr())
	}
	data := make([]byte, 3*maxBuffered+12345) // more than fits: writes wait for reads
	rand.Read(data)
	go func() {
		if _, err := c.Write(data); err != nil {
			t.Error(err)
		}
		c.Close()
	}()
	got, err := io.ReadAll(s)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes (%v), want the %d written", len(got), err, len(data))
	}
	if _, err := s.Write([]byte("x")); err == nil {
		t.Fatal("a write to a closed peer succeeded")
	}
}

func TestReadDeadline(t *testing.T) {
	c, s := pair(t)
	done := make(chan error, 1)
	go func() {
		_, err := s.Read(make([]byte, 1))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	s.SetReadDeadline(time.Now()) // wakes the waiting read
	var ne net.Error
	if err := <-done; !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	s.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	start := time.Now()
	if _, err := s.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("read with a future deadline: %v after %v", err, time.Since(start))
	}
	s.SetReadDeadline(time.Time{})
	c.Write([]byte("ok"))
	b := make([]byte, 2)
	if _, err := io.ReadFull(s, b); err != nil || string(b) != "ok" {
		t.Fatalf("read after clearing the deadline: %q %v", b, err)
	}
}

func TestClosedListener(t *testing.T) {
	l := Listen("b")
	l.Close()
	if _, err := l.Dial(); !errors.Is(err, ErrRefused) {
		t.Fatalf("dial of a closed listener: %v", err)
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("accept on a closed listener: %v", err)
	}
}
