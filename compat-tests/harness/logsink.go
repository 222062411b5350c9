package harness

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

// tailLines is how many of a process's last output lines are kept for
// error messages.
const tailLines = 40

// sink receives a server's output line by line: it forwards each line to
// emit (the test log or a file) and keeps the last lines for error
// messages. Once closed it drops lines, so nothing is logged to a test
// that has completed.
type sink struct {
	mu     sync.Mutex
	emit   func(line string)
	closed bool
	tail   []string
}

func (s *sink) line(l string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.tail) == tailLines {
		copy(s.tail, s.tail[1:])
		s.tail = s.tail[:tailLines-1]
	}
	s.tail = append(s.tail, l)
	if !s.closed {
		s.emit(l)
	}
}

// lastLines returns the kept lines, oldest first, one per line.
func (s *sink) lastLines() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.tail, "\n")
}

func (s *sink) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// writer returns an io.Writer that splits what it is given into lines,
// each passed to the sink with prefix. Give each process its own writer;
// flush it after the process has exited.
func (s *sink) writer(prefix string) *lineWriter {
	return &lineWriter{s: s, prefix: prefix}
}

type lineWriter struct {
	mu     sync.Mutex
	s      *sink
	prefix string
	buf    []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.s.line(w.prefix + string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}

// flush passes on a last line that had no newline.
func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.s.line(w.prefix + string(w.buf))
		w.buf = nil
	}
}

// testSink logs to tb until closed.
func testSink(tb testing.TB) *sink {
	return &sink{emit: func(l string) { tb.Log(l) }}
}
