package harness

import (
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
)

// Pulsar client timeouts: long enough for a loaded 2-core machine, short
// enough that a broken server fails a test in bounded time.
const (
	ClientOperationTimeout  = 30 * time.Second
	ClientConnectionTimeout = 5 * time.Second
)

// NewClient returns a pulsar-client-go client for url with the harness's
// timeouts, its log routed to tb's log (level from
// MAGNETAR_COMPAT_CLIENT_LOG: debug, info (default), warn, error). The
// client is closed at cleanup.
func NewClient(tb testing.TB, url string) pulsar.Client {
	tb.Helper()
	out := testSink(tb)
	// Registered first, so it runs after Close: the client's goroutines
	// may still log while closing; after that their lines are dropped.
	tb.Cleanup(out.close)
	c, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:               url,
		OperationTimeout:  ClientOperationTimeout,
		ConnectionTimeout: ClientConnectionTimeout,
		Logger:            clientLogger(out),
	})
	if err != nil {
		tb.Fatalf("pulsar.NewClient(%s): %v", url, err)
	}
	tb.Cleanup(c.Close)
	return c
}

// clientLogger adapts the sink to the client's log.Logger through its
// slog wrapper; one record is one Write of the text handler.
func clientLogger(out *sink) pulsarlog.Logger {
	w := out.writer("pulsar-client: ")
	h := slog.NewTextHandler(w, &slog.HandlerOptions{
		Level: clientLogLevel(),
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.String(slog.TimeKey, a.Value.Time().Format("15:04:05.000"))
			}
			return a
		},
	})
	return pulsarlog.NewLoggerWithSlog(slog.New(h))
}

func clientLogLevel() slog.Level {
	switch strings.ToLower(os.Getenv("MAGNETAR_COMPAT_CLIENT_LOG")) {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}
