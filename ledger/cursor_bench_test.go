package ledger

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchCursor appends n small entries (pipelined; ledgers of 5,000) and
// opens a durable cursor at the start. It returns the entries' positions.
func benchCursor(b *testing.B, n int) (*ManagedLedger, *Cursor, []Position) {
	b.Helper()
	env := newBenchCluster(b, 1).factory(func(c *Config) { c.MaxEntriesPerLedger = 5000 })
	ml := env.open(b, "bench/cursor")
	c, err := ml.OpenCursor(testCtx(b), "sub", StartEarliest)
	if err != nil {
		b.Fatal(err)
	}
	pos := make([]Position, n)
	done := make(chan error, 1)
	window := make(chan struct{}, 256)
	payload := make([]byte, 100)
	for i := range n {
		window <- struct{}{}
		ml.Append(payload, FormatKafka, 1, func(p Position, _ int64, err error) {
			pos[i] = p
			<-window
			if err != nil || i == n-1 {
				done <- err
			}
		})
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	waitRolled(b, ml)
	return ml, c, pos
}

// holes acknowledges entries 1, 3, …, 2h-1 after resetting c to the start:
// h ranges, and the mark-delete position before entry 0.
func holes(b *testing.B, c *Cursor, pos []Position, h int) {
	b.Helper()
	if err := c.ResetTo(testCtx(b), pos[0]); err != nil {
		b.Fatal(err)
	}
	for k := range h {
		if err := c.Delete(pos[2*k+1]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCursorDelete: individual acknowledgements with h ranges
// already there, in order ("append": each adds a range after the others,
// the usual pattern) or filling random holes ("fill": each merges two
// ranges in the middle).
func BenchmarkCursorDelete(b *testing.B) {
	for _, h := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("append/holes=%d", h), func(b *testing.B) {
			const extra = 2000
			_, c, pos := benchCursor(b, 2*h+2*extra)
			holes(b, c, pos, h)
			i := 0
			for b.Loop() {
				if i == extra {
					b.StopTimer()
					holes(b, c, pos, h)
					i = 0
					b.StartTimer()
				}
				if err := c.Delete(pos[2*h+2*i+1]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run(fmt.Sprintf("fill/holes=%d", h), func(b *testing.B) {
			_, c, pos := benchCursor(b, 2*h+1)
			rng := rand.New(rand.NewPCG(1, 1))
			var order []int
			for b.Loop() {
				if len(order) == 0 {
					b.StopTimer()
					holes(b, c, pos, h)
					order = rng.Perm(h - 1)
					b.StartTimer()
				}
				if err := c.Delete(pos[2*order[0]+2]); err != nil {
					b.Fatal(err)
				}
				order = order[1:]
			}
		})
	}
}

// BenchmarkCursorMarkDelete: cumulative acknowledgements moving over h
// ranges, one range per call.
func BenchmarkCursorMarkDelete(b *testing.B) {
	for _, h := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("holes=%d", h), func(b *testing.B) {
			_, c, pos := benchCursor(b, 2*h+1)
			k := h
			for b.Loop() {
				if k == h {
					b.StopTimer()
					holes(b, c, pos, h)
					k = 0
					b.StartTimer()
				}
				if err := c.MarkDelete(pos[2*k], nil); err != nil {
					b.Fatal(err)
				}
				k++
			}
		})
	}
}

// BenchmarkCursorBacklog: Backlog with h ranges, offsets known.
func BenchmarkCursorBacklog(b *testing.B) {
	for _, h := range []int{0, 100, 10_000} {
		b.Run(fmt.Sprintf("holes=%d", h), func(b *testing.B) {
			_, c, pos := benchCursor(b, 2*h+1000)
			holes(b, c, pos, h)
			ctx := testCtx(b)
			if _, err := c.Backlog(ctx); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := c.Backlog(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
