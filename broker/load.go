package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/meta"
)

// Load reports and shedding. Every Config.LoadReportInterval a broker
// writes its load (bundles, loaded topics, message rates in and out, CPU)
// into its registration, where lookups choosing a broker for a new bundle
// read it (ownership.go). Every Config.LoadShedInterval it compares
// itself with the cluster: a broker holding more than LoadShedThreshold
// times the average number of bundles (and at least two more than the
// average), or carrying more than LoadShedThreshold times the average
// message rate (and at least minShedRate), unloads one bundle — the
// busiest that carries at most half its traffic, so that the hot spot
// does not just move. The others take it on its next lookup. Each broker
// sheds itself: there is no leader to elect, and one bundle per interval
// keeps brokers from shedding back and forth.

// minShedRate: below this many messages per second nothing is shed for
// traffic.
const minShedRate = 1000

// topicTraffic are a topic's message counters at the last report.
type topicTraffic struct{ in, out int64 }

func (t *Topic) traffic() topicTraffic {
	tt := topicTraffic{in: t.in.msgs.Load(), out: t.kafkaOut.msgs.Load()}
	t.mu.Lock()
	for _, s := range t.subs {
		tt.out += s.out.msgs.Load()
	}
	t.mu.Unlock()
	return tt
}

type cpuSample struct {
	at    time.Time
	ticks int64
}

// ProcessCPU is the CPU time (user and system) process pid has used, from
// /proc/<pid>/stat (Linux; an error elsewhere). The broker reports its
// own in its load; perf all reads a child broker's.
func ProcessCPU(pid int) (time.Duration, error) {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// the fields counted are those after its last ')'. utime and stime
	// are fields 14 and 15, so the 12th and 13th after it.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("%s: %q: not a process's stat", path, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("%s: %q: not a process's stat", path, b)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: utime or stime %q: %w", path, s, err)
		}
		ticks += n
	}
	// In clock ticks of USER_HZ: 100 per second on every Linux
	// architecture, whatever the kernel's own HZ.
	return time.Duration(ticks) * (time.Second / 100), nil
}

// load measures the broker's load since the previous call.
func (o *ownership) load() LoadReport {
	now := time.Now()
	topics := o.b.loadedTopics()
	o.mu.Lock()
	bundles := len(o.owned)
	o.mu.Unlock()
	r := LoadReport{Bundles: bundles, Topics: len(topics), AtMs: now.UnixMilli()}
	o.loadMu.Lock()
	defer o.loadMu.Unlock()
	secs := now.Sub(o.lastReport).Seconds()
	next := make(map[*Topic]topicTraffic, len(topics))
	for _, t := range topics {
		cur := t.traffic()
		next[t] = cur
		if prev, ok := o.traffic[t]; ok && secs > 0 {
			r.MsgRateIn += float64(max(cur.in-prev.in, 0)) / secs
			r.MsgRateOut += float64(max(cur.out-prev.out, 0)) / secs
		}
	}
	o.traffic = next
	cpu, _ := ProcessCPU(os.Getpid()) // 0 where unknown: no CPU figure the next time either
	if secs > 0 && o.lastCPU > 0 && cpu > 0 {
		r.CPU = (cpu - o.lastCPU).Seconds() / secs / float64(runtime.NumCPU()) * 100
	}
	o.lastCPU, o.lastReport = cpu, now
	return r
}

// bundleRates returns the message rate of each held bundle over the last
// report interval.
func (o *ownership) bundleRates() map[Bundle]float64 {
	o.loadMu.Lock()
	defer o.loadMu.Unlock()
	o.mu.Lock()
	held := make([]Bundle, 0, len(o.owned))
	for _, ob := range o.owned {
		if !ob.releasing {
			held = append(held, ob.b)
		}
	}
	o.mu.Unlock()
	out := make(map[Bundle]float64, len(held))
	for _, bd := range held {
		out[bd] = 0
	}
	for t := range o.traffic {
		h := TopicHash(t.name)
		for _, bd := range held {
			if bd.Tenant == t.name.Tenant && bd.Namespace == t.name.Namespace && bd.Contains(h) {
				cur := t.traffic()
				prev := o.traffic[t]
				out[bd] += float64(max(cur.in-prev.in, 0) + max(cur.out-prev.out, 0))
			}
		}
	}
	return out
}

// reportLoop writes load reports and sheds load until stop.
func (o *ownership) reportLoop() {
	report := time.NewTicker(o.reportEvery)
	defer report.Stop()
	var shed <-chan time.Time
	if o.shedEvery > 0 {
		t := time.NewTicker(o.shedEvery)
		defer t.Stop()
		shed = t.C
	}
	for {
		select {
		case <-o.stop:
			return
		case <-report.C:
			o.report()
		case <-shed:
			o.shed()
		}
	}
}

// report writes the current load into the registration.
func (o *ownership) report() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, _ := json.Marshal(o.record())
	_, err := o.store.Set(ctx, o.registrationPath(), v, meta.AnyVersion)
	if err != nil && !errors.Is(err, meta.ErrNotFound) {
		o.log.Warn("writing the load report", "err", err)
		return
	}
}

// shed unloads one bundle if this broker is far above the average.
func (o *ownership) shed() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := o.liveBrokers(ctx, true)
	if err != nil || len(list) < 2 {
		return
	}
	var self *LiveBroker
	var sumBundles, sumRate float64
	for i := range list {
		sumBundles += float64(list[i].Load.Bundles)
		sumRate += list[i].Load.msgRate()
		if list[i].Info.ID == o.self.ID {
			self = &list[i]
		}
	}
	if self == nil {
		return
	}
	n := float64(len(list))
	avgBundles, avgRate := sumBundles/n, sumRate/n
	th := o.shedThreshold
	rates := o.bundleRates()
	if len(rates) < 2 {
		return
	}
	var victim Bundle
	found := false
	switch {
	case float64(self.Load.Bundles) > th*avgBundles && float64(self.Load.Bundles) >= avgBundles+2:
		// The least busy bundle: fewest clients disturbed.
		for bd, r := range rates {
			if !found || r < rates[victim] {
				victim, found = bd, true
			}
		}
	case self.Load.msgRate() > th*avgRate && self.Load.msgRate() >= minShedRate:
		var total float64
		for _, r := range rates {
			total += r
		}
		for bd, r := range rates {
			if r <= total/2 && (!found || r > rates[victim]) {
				victim, found = bd, true
			}
		}
	}
	if !found {
		return
	}
	o.log.Info("shedding load: unloading a bundle", "bundle", victim.String(), "bundles", self.Load.Bundles,
		"cluster-average-bundles", avgBundles, "msg-rate", self.Load.msgRate(), "cluster-average-msg-rate", avgRate)
	if err := o.release(ctx, victim, true); err != nil {
		o.log.Warn("shedding load", "bundle", victim.String(), "err", err)
	}
}
