package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scrapeValue returns the value of the series `name{labels}` in a
// Prometheus text page (labels as the page writes them: sorted by name).
func scrapeValue(page, series string) (float64, bool) {
	for _, line := range strings.Split(page, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// TestStandaloneTopicMetrics: messages produced with `magnetar produce`
// show on /metrics, per topic up to --metrics-max-topics and beyond it
// under topic="_other"; each of its SENDs (batching off) in the publish
// latency histogram; the Kafka request latency histogram is there, with
// no Kafka request made.
func TestStandaloneTopicMetrics(t *testing.T) {
	_, ready := startStandaloneProc(t, "--metrics-max-topics", "1")
	svc := []string{"--service-url", "pulsar://" + ready.PulsarAdvertised}
	for _, c := range []struct {
		topic string
		n     int
	}{{"metrics-a", 4}, {"metrics-b", 2}} {
		args := append([]string{"produce", c.topic, "-m", "hello", "-n", strconv.Itoa(c.n)}, svc...)
		if out, errOut, code := runBinary(t, "", args...); code != 0 {
			t.Fatalf("produce to %s: exit %d\nstdout:\n%s\nstderr:\n%s", c.topic, code, out, errOut)
		}
	}
	series := func(metric, topic string) string {
		return fmt.Sprintf(`%s{namespace="public/default",tenant="public",topic="%s"}`, metric, topic)
	}
	want := map[string]float64{
		series("magnetar_topic_in_messages_total", "persistent://public/default/metrics-a"): 4,
		series("magnetar_topic_in_messages_total", "_other"):                                2,
		series("magnetar_topic_producers_count", "persistent://public/default/metrics-a"):   0,
		"magnetar_topics_loaded":                         2,
		publishLatencyMetric + "_count":                  6,
		kafkaLatencyMetric + `_count{request="Produce"}`: 0,
	}
	eventually(t, 10*time.Second, func() error {
		code, page, err := httpGet("http://" + ready.HTTP + "/metrics")
		if err != nil || code != 200 {
			return fmt.Errorf("GET /metrics: %d %v", code, err)
		}
		for s, v := range want {
			got, ok := scrapeValue(page, s)
			if !ok || got != v {
				return fmt.Errorf("%s = %v (found %v), want %v; page:\n%s", s, got, ok, v, page)
			}
		}
		if strings.Contains(page, "metrics-b") {
			return fmt.Errorf("metrics-b, beyond --metrics-max-topics 1, has series of its own:\n%s", page)
		}
		return nil
	})
}
