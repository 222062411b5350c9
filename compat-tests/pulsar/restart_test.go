package pulsar_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

// ackLog records, in callback order, what a continuously sending producer
// was told.
type ackLog struct {
	mu     sync.Mutex
	sent   int          // SendAsync calls made
	done   int          // callbacks run
	acked  map[int]bool // sequence number -> reported stored
	nacked int          // callbacks with an error
	last   error
}

func (l *ackLog) callback(seq int) func(pulsar.MessageID, *pulsar.ProducerMessage, error) {
	return func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.done++
		if err != nil {
			l.nacked++
			l.last = err
			return
		}
		l.acked[seq] = true
	}
}

func (l *ackLog) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// TestBrokerRestart: a producer sends continuously while the broker is
// stopped with SIGTERM and restarted, then killed with SIGKILL and
// restarted, each time on the same data dir and ports. The client
// reconnects by itself, and afterwards every message whose send was
// reported successful is consumed from a durable subscription, in the
// order it was sent.
func TestBrokerRestart(t *testing.T) {
	srv := harness.Start(t)
	c := newClient(t, srv)
	topic := topicName(t)
	const sub = "sub"
	// The subscription exists before the first message, so it retains
	// everything.
	subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub}).Close()

	p := createProducer(t, c, pulsar.ProducerOptions{Topic: topic})
	log := &ackLog{acked: map[int]bool{}}
	stop := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(2 * time.Millisecond) // about 500 messages a second
		defer tick.Stop()
		for seq := 0; seq < 100_000; seq++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			log.mu.Lock()
			log.sent++
			log.mu.Unlock()
			p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(strconv.Itoa(seq))}, log.callback(seq))
		}
	}()
	stopProducing := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-stopped
	}
	t.Cleanup(stopProducing)

	progress := func(what string) {
		t.Helper()
		from := log.ackedCount()
		harness.WaitFor(t, 60*time.Second, func() bool { return log.ackedCount() >= from+200 }, "200 more messages acknowledged "+what)
	}
	progress("before the first restart")

	srv.Stop(t)
	t.Logf("stopped with SIGTERM after %d acknowledged", log.ackedCount())
	srv.Restart(t)
	progress("after a SIGTERM restart")

	srv.Kill(t)
	t.Logf("killed with SIGKILL after %d acknowledged", log.ackedCount())
	srv.Restart(t)
	progress("after a SIGKILL restart")

	stopProducing()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := p.FlushWithCtx(ctx); err != nil {
		t.Logf("final flush: %v", err)
	}
	harness.WaitFor(t, 60*time.Second, func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		return log.done == log.sent
	}, "every send callback")
	log.mu.Lock()
	acked, sent, failed, lastErr := len(log.acked), log.sent, log.nacked, log.last
	log.mu.Unlock()
	t.Logf("sent %d, acknowledged %d, failed %d (last error: %v)", sent, acked, failed, lastErr)

	// Consume everything: each acknowledged message at least once, first
	// occurrences in send order.
	cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub})
	seen := map[int]bool{}
	last, dups, unacked := -1, 0, 0
	for missing := acked; missing > 0; {
		rctx, rcancel := context.WithTimeout(context.Background(), receiveTimeout)
		msg, err := cons.Receive(rctx)
		rcancel()
		if err != nil {
			t.Fatalf("%d acknowledged messages never consumed (first: %s): %v", missing, firstMissing(log.acked, seen), err)
		}
		seq, err := strconv.Atoi(string(msg.Payload()))
		if err != nil {
			t.Fatalf("unexpected payload %q", msg.Payload())
		}
		ackMsg(t, cons, msg)
		if seen[seq] {
			dups++
			continue
		}
		if seq < last {
			t.Fatalf("message %d consumed after %d: out of send order", seq, last)
		}
		seen[seq], last = true, seq
		if log.acked[seq] {
			missing--
		} else {
			unacked++
		}
	}
	t.Logf("consumed all %d acknowledged messages; %d duplicates, %d stored whose send reported failure", acked, dups, unacked)
}

func firstMissing(acked, seen map[int]bool) string {
	first := -1
	for seq := range acked {
		if !seen[seq] && (first < 0 || seq < first) {
			first = seq
		}
	}
	if first < 0 {
		return "none"
	}
	return fmt.Sprint(first)
}
