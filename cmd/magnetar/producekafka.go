package main

// `magnetar produce --kafka` and `magnetar consume --kafka`: the same
// commands over the Kafka protocol (franz-go), against --kafka-bootstrap.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// checkKafkaReachable dials the bootstrap address so that a broker that is
// not there fails at once with a clear message.
func checkKafkaReachable(addr string) error {
	c, err := net.DialTimeout("tcp", addr, clientConnectTimeout)
	if err != nil {
		return fmt.Errorf("cannot reach the broker's Kafka listener at %s: %v", addr, connectCause(err))
	}
	c.Close()
	return nil
}

func (a *app) newKafkaCLIClient(addr string, opts ...kgo.Opt) (*kgo.Client, error) {
	if err := checkKafkaReachable(addr); err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.DialTimeout(clientConnectTimeout),
		kgo.RequestTimeoutOverhead(clientOperationTimeout), kgo.RecordDeliveryTimeout(clientOperationTimeout),
		kgo.RetryTimeout(clientOperationTimeout)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return cl, nil
}

// kafkaError words a Kafka client failure.
func kafkaError(what string, err error) error {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return fmt.Errorf("%s: %s: %s", what, ke.Message, ke.Description)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w (no answer from the broker within %s)", what, err, clientOperationTimeout)
	}
	if errors.Is(err, kgo.ErrRecordTimeout) {
		return fmt.Errorf("%s: %w (the broker did not acknowledge it within %s; its log says why)", what, err, clientOperationTimeout)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// produceKafka is produce over the Kafka protocol: the key is the record
// key, the properties its headers; each record's partition and offset is
// printed (partition:offset) once acknowledged (acks=all), in order.
func (a *app) produceKafka(addr string, opts produceOptions, stdin io.Reader) error {
	cl, err := a.newKafkaCLIClient(addr, kgo.DefaultProduceTopic(opts.Topic), kgo.AllowAutoTopicCreation(),
		kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1000))
	if err != nil {
		return err
	}
	defer cl.Close()
	var headers []kgo.RecordHeader
	keys := make([]string, 0, len(opts.Properties))
	for k := range opts.Properties {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		headers = append(headers, kgo.RecordHeader{Key: k, Value: []byte(opts.Properties[k])})
	}
	var key []byte
	if opts.Key != "" {
		key = []byte(opts.Key)
	}
	ctx := context.Background()
	// Sends are pipelined; each record is printed as it is acknowledged
	// (in order within a partition).
	var (
		mu       sync.Mutex
		acked    int
		firstErr error
		sent     int
	)
	send := func(v []byte) error {
		mu.Lock()
		err := firstErr
		mu.Unlock()
		if err != nil {
			return err
		}
		sent++
		n := sent
		cl.Produce(ctx, &kgo.Record{Key: key, Value: v, Headers: headers}, func(r *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = kafkaError(fmt.Sprintf("send record %d", n), err)
				}
				return
			}
			acked++
			fmt.Fprintf(a.stdout, "%d:%d\n", r.Partition, r.Offset)
		})
		return nil
	}
	err = feedMessages(opts, stdin, send)
	if ferr := cl.Flush(ctx); ferr != nil && err == nil {
		err = kafkaError("flush", ferr)
	}
	mu.Lock()
	if firstErr != nil && (err == nil || err.Error() != firstErr.Error()) {
		err = firstErr
	}
	fmt.Fprintf(a.stderr, "%d records produced to %s\n", acked, opts.Topic)
	mu.Unlock()
	return err
}

// consumeKafka is consume over the Kafka protocol: in consumer group -s
// (committing what it printed, so the group — the subscription of that
// name — goes on from there), or without -s reading every partition
// directly. -p is where a group without offsets, or the direct read,
// starts.
func (a *app) consumeKafka(addr string, opts consumeOptions) error {
	start := kgo.NewOffset().AtEnd()
	if opts.Position == "earliest" {
		start = kgo.NewOffset().AtStart()
	}
	kopts := []kgo.Opt{kgo.ConsumeTopics(opts.Topic), kgo.ConsumeResetOffset(start)}
	if opts.Subscription != "" {
		kopts = append(kopts, kgo.ConsumerGroup(opts.Subscription), kgo.AutoCommitMarks(),
			kgo.BlockRebalanceOnPoll())
	}
	cl, err := a.newKafkaCLIClient(addr, kopts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if opts.Subscription != "" {
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), clientOperationTimeout)
			defer cancel()
			if err := cl.CommitMarkedOffsets(ctx); err != nil {
				fmt.Fprintf(a.stderr, "magnetar consume: committing the group's offsets: %v\n", err)
			}
		}()
	}
	ctx, stop := a.perfSignals()
	defer stop()
	n := 0
	for opts.Count == 0 || n < opts.Count {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil // interrupted
		}
		var ferr error
		fs.EachError(func(topic string, p int32, err error) {
			if ferr == nil && !errors.Is(err, context.Canceled) {
				ferr = kafkaError(fmt.Sprintf("fetch %s partition %d", topic, p), err)
			}
		})
		if ferr != nil {
			return ferr
		}
		it := fs.RecordIter()
		for !it.Done() && (opts.Count == 0 || n < opts.Count) {
			r := it.Next()
			n++
			m := shownMessage{ID: fmt.Sprintf("%d:%d", r.Partition, r.Offset), Topic: r.Topic, PublishTime: r.Timestamp,
				Key: string(r.Key), Payload: r.Value}
			for _, h := range r.Headers {
				if m.Properties == nil {
					m.Properties = map[string]string{}
				}
				m.Properties[h.Key] = string(h.Value)
			}
			if opts.JSON {
				if err := writeMessageJSON(a.stdout, m); err != nil {
					return err
				}
			} else {
				writeMessageText(a.stdout, n, m)
			}
			cl.MarkCommitRecords(r)
		}
		cl.AllowRebalance()
	}
	return nil
}
