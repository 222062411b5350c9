package main

// `magnetar produce` and `magnetar consume`: messages from and to the
// terminal over the Pulsar protocol (pulsar-client-go), in the manner of
// Pulsar's pulsar-client produce/consume.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/broker"
)

// clientSettings are the settings of `magnetar produce` and `magnetar consume`.
var clientSettings = []setting{
	{"service-url", "pulsar://localhost:6650", "url", "Pulsar service URL of the broker (pulsar://host:port)"},
	{"kafka-bootstrap", "localhost:9092", "host:port", "the broker's Kafka listener, for --kafka"},
}

const (
	clientConnectTimeout   = 5 * time.Second
	clientOperationTimeout = 10 * time.Second
)

const clientHelp = `
Topics may be given in full (persistent://tenant/ns/topic), as tenant/ns/topic,
or by local name alone (my-topic is persistent://public/default/my-topic).

If the broker cannot be reached the command fails within about 10 seconds
with "cannot reach the broker at ..." and exit code 1.
`

type produceOptions struct {
	Topic      string // fully qualified
	Messages   [][]byte
	FromStdin  bool // one message per line of stdin, after Messages
	Key        string
	Properties map[string]string
	Repeat     int
}

func newProduceCommand(a *app) *cobra.Command {
	var msgs, files, props []string
	var key string
	var repeat int
	var kafka bool
	cmd := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Publish messages to a topic",
		Long: `Publish messages to a topic: each -m is a message, each -f file is one
message (its whole content); with neither, each line of stdin is a message.
All get the key -k and the properties -p. With -n N the messages are sent N
times over. Prints the id of each message as the broker acknowledges it.
` + clientHelp + configHelp,
		Example: `  magnetar produce my-topic -m hello -m world
  magnetar produce my-topic -m hello -k user-1 -p source=cli -p trace=abc -n 10
  magnetar produce persistent://acme/orders/eu -f order.json
  seq 1 100 | magnetar produce my-topic`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := produceArgs(args[0], msgs, files, props, key, repeat)
			if err != nil {
				return err
			}
			if kafka {
				addr, err := check(a.vals, clientSettings[1], parseHostPort)
				if err != nil {
					return err
				}
				opts.Topic = args[0] // as given: the broker maps Kafka names
				return runtimeError(a.produceKafka(addr, opts, cmd.InOrStdin()))
			}
			serviceURL, err := check(a.vals, clientSettings[0], parseServiceURL)
			if err != nil {
				return err
			}
			return runtimeError(a.produce(serviceURL, opts, cmd.InOrStdin()))
		},
	}
	a.addSettings(cmd, clientSettings)
	f := cmd.Flags()
	f.StringArrayVarP(&msgs, "messages", "m", nil, "a message; repeat for more")
	f.StringArrayVarP(&files, "files", "f", nil, "a file whose content is one message; repeat for more")
	f.StringVarP(&key, "key", "k", "", "message key (partitioned topics route by it)")
	f.StringArrayVarP(&props, "properties", "p", nil, "a property key=value; repeat for more")
	f.IntVarP(&repeat, "num-produce", "n", 1, "send the messages this many times over")
	f.BoolVar(&kafka, "kafka", false, "use the Kafka protocol (franz-go, against --kafka-bootstrap); prints partition:offset of each record")
	return cmd
}

// produceArgs checks produce's arguments and reads its files.
func produceArgs(topic string, msgs, files, props []string, key string, repeat int) (produceOptions, error) {
	t, err := parsePerfTopic(topic)
	if err != nil {
		return produceOptions{}, err
	}
	if repeat < 1 {
		return produceOptions{}, fmt.Errorf("invalid --num-produce %d: want 1 or more", repeat)
	}
	opts := produceOptions{Topic: t, Key: key, Repeat: repeat}
	for _, m := range msgs {
		opts.Messages = append(opts.Messages, []byte(m))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return produceOptions{}, fmt.Errorf("--files: %w", err)
		}
		opts.Messages = append(opts.Messages, b)
	}
	opts.FromStdin = len(msgs) == 0 && len(files) == 0
	if opts.Properties, err = parseProperties(props); err != nil {
		return produceOptions{}, err
	}
	return opts, nil
}

func parseProperties(props []string) (map[string]string, error) {
	if len(props) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(props))
	for _, p := range props {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("invalid property %q: want key=value", p)
		}
		m[k] = v
	}
	return m, nil
}

// checkReachable dials the broker of serviceURL, so that an unreachable
// broker fails at once with a clear message rather than after the
// client's retries.
func checkReachable(serviceURL string) error {
	u, err := url.Parse(serviceURL)
	if err != nil {
		return err
	}
	// pulsar://h1:6650,h2:6650 lists a cluster's brokers: one answering is
	// enough (the client tries them in turn).
	var last error
	for _, host := range strings.Split(u.Host, ",") {
		if _, _, err := net.SplitHostPort(host); err != nil {
			host = net.JoinHostPort(host, "6650")
		}
		c, err := net.DialTimeout("tcp", host, clientConnectTimeout)
		if err == nil {
			c.Close()
			return nil
		}
		last = err
	}
	return fmt.Errorf("cannot reach the broker at %s: %v", serviceURL, connectCause(last))
}

// newCLIClient returns a Pulsar client with short timeouts, for a
// command a person waits on.
func (a *app) newCLIClient(serviceURL string) (pulsar.Client, error) {
	if err := checkReachable(serviceURL); err != nil {
		return nil, err
	}
	return a.newPulsarClientWith(pulsar.ClientOptions{
		URL:               serviceURL,
		ConnectionTimeout: clientConnectTimeout,
		OperationTimeout:  clientOperationTimeout,
	})
}

// clientError words a failure of the Pulsar client once the broker was
// reached.
func clientError(what, serviceURL string, err error) error {
	if strings.Contains(err.Error(), "connection refused") {
		return fmt.Errorf("%s: cannot reach the broker at %s: %w", what, serviceURL, err)
	}
	if errors.Is(err, pulsar.ErrSendTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w (no answer from the broker within %s)", what, err, clientOperationTimeout)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// produce sends the messages of opts, then the lines of stdin as they
// come, and prints each message's id once the broker has acknowledged it,
// in order. It stops at the first failure.
func (a *app) produce(serviceURL string, opts produceOptions, stdin io.Reader) error {
	client, err := a.newCLIClient(serviceURL)
	if err != nil {
		return err
	}
	defer client.Close()
	parts, err := client.TopicPartitions(opts.Topic)
	if err != nil {
		return clientError("topic "+opts.Topic, serviceURL, err)
	}
	partitioned := len(parts) != 1 || parts[0] != opts.Topic
	// No batching, as pulsar-client produce: each message is an entry of
	// its own, which peek, skip and reset-cursor count one by one. Sends
	// are pipelined all the same.
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: opts.Topic, SendTimeout: clientOperationTimeout, DisableBatching: true})
	if err != nil {
		return clientError("topic "+opts.Topic+": create producer", serviceURL, err)
	}
	defer p.Close()
	// SIGINT and SIGTERM keep their default effect: what was acknowledged
	// has been printed.
	ctx := context.Background()

	// A producer calls back in the order of its sends, one at a time.
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		acked    int
		firstErr error
	)
	sent := 0
	send := func(payload []byte) error {
		mu.Lock()
		err := firstErr
		mu.Unlock()
		if err != nil {
			return err
		}
		sent++
		n := sent
		wg.Add(1)
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload, Key: opts.Key, Properties: opts.Properties},
			func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				defer wg.Done()
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if firstErr == nil {
						firstErr = clientError(fmt.Sprintf("send message %d", n), serviceURL, err)
					}
					return
				}
				acked++
				fmt.Fprintf(a.stdout, "%s\n", formatMessageID(id, partitioned))
			})
		return nil
	}
	err = feedMessages(opts, stdin, send)
	if ferr := p.FlushWithCtx(context.Background()); ferr != nil && err == nil {
		err = clientError("flush", serviceURL, ferr)
	}
	wg.Wait()
	if firstErr != nil && (err == nil || err.Error() != firstErr.Error()) {
		err = firstErr
	}
	fmt.Fprintf(a.stderr, "%d messages produced to %s\n", acked, opts.Topic)
	return err
}

// feedMessages passes to send the messages of opts, Repeat times over,
// then (FromStdin) each line of stdin as it is read, and those lines
// Repeat-1 times more. It stops at the first error of send or of stdin.
func feedMessages(opts produceOptions, stdin io.Reader, send func([]byte) error) error {
	for range opts.Repeat {
		for _, m := range opts.Messages {
			if err := send(m); err != nil {
				return err
			}
		}
	}
	if !opts.FromStdin {
		return nil
	}
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 64<<10), maxPerfMessageSize)
	var lines [][]byte
	for sc.Scan() {
		line := append([]byte(nil), sc.Bytes()...)
		if opts.Repeat > 1 {
			lines = append(lines, line)
		}
		if err := send(line); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading stdin: %w", err)
	}
	for range opts.Repeat - 1 {
		for _, l := range lines {
			if err := send(l); err != nil {
				return err
			}
		}
	}
	return nil
}

// formatMessageID is ledger:entry:partition:batch, as Pulsar prints ids,
// with -1 for a partition or batch index that does not apply (the Go
// client says partition 0 for non-partitioned topics).
func formatMessageID(id pulsar.MessageID, partitioned bool) string {
	part := id.PartitionIdx()
	if !partitioned {
		part = -1
	}
	return fmt.Sprintf("%d:%d:%d:%d", id.LedgerID(), id.EntryID(), part, id.BatchIdx())
}

// isPartition tells whether topic (as a message gives it) is a partition.
func isPartition(topic string) bool {
	t, err := broker.ParseTopicName(topic)
	return err == nil && t.IsPartition()
}

type consumeOptions struct {
	Topic        string
	Subscription string
	Type         string // a key of subscriptionTypes
	Position     string // a key of subscriptionPositions
	Count        int    // 0: until interrupted
	JSON         bool
}

func newConsumeCommand(a *app) *cobra.Command {
	var opts consumeOptions
	var format string
	var kafka bool
	cmd := &cobra.Command{
		Use:   "consume TOPIC",
		Short: "Receive messages from a topic and print them",
		Long: `Receive messages from a topic through subscription -s, print them and
acknowledge them: -n of them, or until SIGINT (Ctrl-C) with -n 0. Each
message is printed with its id, publish time, key, properties and payload
(as text if it is printable UTF-8, else as a hex dump); --format json
prints one JSON object a line instead (payload as text, or payloadBase64).
A new subscription starts at -p: latest (only messages published from now)
or earliest (everything the topic holds).
` + clientHelp + configHelp,
		Example: `  magnetar consume my-topic -s cli -n 10 -p earliest
  magnetar consume my-topic -s workers -t shared -n 0
  magnetar consume my-topic -s cli --format json | jq .payload`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if opts.Topic, err = parsePerfTopic(args[0]); err != nil {
				return err
			}
			if opts.Count < 0 {
				return fmt.Errorf("invalid --num-messages %d: want 0 (until interrupted) or more", opts.Count)
			}
			switch format {
			case "text", "json":
				opts.JSON = format == "json"
			default:
				return fmt.Errorf("invalid --format %q: want text or json", format)
			}
			if opts.Position, err = parseChoice(subscriptionPositions)(opts.Position); err != nil {
				return fmt.Errorf("invalid --subscription-position: %w", err)
			}
			if kafka {
				if opts.Subscription != "" {
					if _, err := parseSubscriptionName(opts.Subscription); err != nil {
						return fmt.Errorf("invalid --subscription %q: %w", opts.Subscription, err)
					}
				}
				addr, err := check(a.vals, clientSettings[1], parseHostPort)
				if err != nil {
					return err
				}
				opts.Topic = args[0]
				return runtimeError(a.consumeKafka(addr, opts))
			}
			if opts.Subscription == "" {
				return errors.New(`required flag(s) "subscription" not set`)
			}
			serviceURL, err := check(a.vals, clientSettings[0], parseServiceURL)
			if err != nil {
				return err
			}
			if _, err := parseSubscriptionName(opts.Subscription); err != nil {
				return fmt.Errorf("invalid --subscription %q: %w", opts.Subscription, err)
			}
			if opts.Type, err = parseChoice(subscriptionTypes)(opts.Type); err != nil {
				return fmt.Errorf("invalid --subscription-type: %w", err)
			}
			return runtimeError(a.consume(serviceURL, opts))
		},
	}
	a.addSettings(cmd, clientSettings)
	f := cmd.Flags()
	f.StringVarP(&opts.Subscription, "subscription", "s", "", "subscription name (required, except with --kafka)")
	f.StringVarP(&opts.Type, "subscription-type", "t", "exclusive", "exclusive, shared, failover or key_shared")
	f.StringVarP(&opts.Position, "subscription-position", "p", "latest", "where a new subscription starts: latest or earliest")
	f.IntVarP(&opts.Count, "num-messages", "n", 1, "messages to receive; 0: until interrupted")
	f.StringVar(&format, "format", "text", "output: text or json (one object a line)")
	f.BoolVar(&kafka, "kafka", false, "use the Kafka protocol (franz-go, against --kafka-bootstrap): with -s, as consumer group -s (the subscription of that name), committing what it prints; without, reading every partition from -p directly; ids are partition:offset")
	return cmd
}

// consume receives, prints and acknowledges opts.Count messages (or
// until a signal).
func (a *app) consume(serviceURL string, opts consumeOptions) error {
	client, err := a.newCLIClient(serviceURL)
	if err != nil {
		return err
	}
	defer client.Close()
	c, err := client.Subscribe(pulsar.ConsumerOptions{
		Topic:                       opts.Topic,
		SubscriptionName:            opts.Subscription,
		Type:                        subscriptionTypes[opts.Type],
		SubscriptionInitialPosition: subscriptionPositions[opts.Position],
	})
	if err != nil {
		return clientError(fmt.Sprintf("topic %s: subscribe %q", opts.Topic, opts.Subscription), serviceURL, err)
	}
	defer c.Close()
	ctx, stop := a.perfSignals()
	defer stop()
	for n := 1; opts.Count == 0 || n <= opts.Count; n++ {
		msg, err := c.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted
			}
			return fmt.Errorf("receive: %w", err)
		}
		m := shownMessage{
			ID:          formatMessageID(msg.ID(), isPartition(msg.Topic())),
			Topic:       msg.Topic(),
			PublishTime: msg.PublishTime(),
			Key:         msg.Key(),
			Properties:  msg.Properties(),
			Payload:     msg.Payload(),
		}
		if len(m.Properties) == 0 {
			m.Properties = nil
		}
		if opts.JSON {
			if err := writeMessageJSON(a.stdout, m); err != nil {
				return err
			}
		} else {
			writeMessageText(a.stdout, n, m)
		}
		if err := c.Ack(msg); err != nil {
			return fmt.Errorf("acknowledge %s: %w", m.ID, err)
		}
	}
	return nil
}

// newPulsarClientWith is newPulsarClient with opts: the client logs to the
// app's logger at warn level and above and registers its metrics nowhere
// global.
func (a *app) newPulsarClientWith(opts pulsar.ClientOptions) (pulsar.Client, error) {
	log := slog.New(minLevelHandler{Handler: a.logger.Handler(), min: slog.LevelWarn}).With("component", "pulsar-client")
	logrus.SetOutput(io.Discard)
	logrus.SetLevel(logrus.WarnLevel)
	logrus.StandardLogger().ReplaceHooks(logrus.LevelHooks{})
	logrus.AddHook(logrusToSlog{log})
	opts.Logger = pulsarlog.NewLoggerWithSlog(log)
	opts.MetricsRegisterer = prometheus.NewRegistry()
	c, err := pulsar.NewClient(opts)
	if err != nil {
		return nil, fmt.Errorf("pulsar client: %w", err)
	}
	return c, nil
}
