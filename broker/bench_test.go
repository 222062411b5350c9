package broker

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/ledger"
)

// BenchmarkIdlePartitionMemory loads topics with one durable subscription
// each and no traffic, and reports what each costs: heap (live objects
// after a GC) and goroutine stacks. Issue 10's goal: at most 20 KiB of
// heap per idle partition with one subscription.
func BenchmarkIdlePartitionMemory(b *testing.B) {
	const topics = 1000
	st := newTestBroker(b)
	ctx := testCtx(b)
	if err := st.b.Bootstrap(ctx); err != nil {
		b.Fatal(err)
	}
	measure := func() (heap, stack uint64) {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc, ms.StackInuse
	}
	round := 0
	for b.Loop() {
		round++
		heap0, stack0 := measure()
		var loaded []*Topic
		for i := range topics {
			tn, _ := ParseTopicName(fmt.Sprintf("persistent://public/default/idle-%d-%d", round, i))
			if err := st.b.CreateTopic(ctx, tn); err != nil {
				b.Fatal(err)
			}
			if err := st.b.CreateSubscription(ctx, tn, "sub", MessageID{Position: ledger.Position{Ledger: -1, Entry: -1}}); err != nil {
				b.Fatal(err)
			}
			tp, err := st.b.Topic(ctx, tn, false)
			if err != nil {
				b.Fatal(err)
			}
			loaded = append(loaded, tp)
		}
		time.Sleep(100 * time.Millisecond) // let loads settle (cursor flushes, timers)
		heap1, stack1 := measure()
		b.ReportMetric(float64(heap1-heap0)/topics/1024, "heap-KiB/partition")
		b.ReportMetric(float64(stack1-stack0)/topics/1024, "stack-KiB/partition")
		for _, tp := range loaded {
			if err := tp.Close(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
}
