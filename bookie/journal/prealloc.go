package journal

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// bulkRate: a writer going at least this fast (bytes per second) gets no
// zeros ahead (see below). A variable for tests, read when a filler starts.
// rateWindow: the writer's rate is taken over windows at least this long,
// since its groups come in bursts (a write, then the wait for its fsync).
var bulkRate float64 = 64 << 20

const rateWindow = 20 * time.Millisecond

// Zeros written ahead of the records. On ext4, and on other file systems
// that allocate blocks as they are written, an fdatasync after a write that
// extends a file must also write the file's new size and block map; after
// a write over blocks the file already has it flushes the data only.
// Measured on the benchmark machine, 4 KiB written and fdatasync'd: 0.32 ms
// (p50) and 0.19 ms of system CPU when appending, 0.21 ms and 0.12 ms over
// blocks written before (docs/BENCHMARKS.md). A reused file has its blocks
// already; a new one gets them from the zero filler, a goroutine that keeps
// Options.ZeroAhead to twice that many bytes of zeros written and synced
// past the writer's end while groups are small (written through the page cache).
// BookKeeper preallocates its journal files with zeros for the same reason,
// but on its journal thread. Groups of directMinGroup or more, written with
// O_DIRECT at the disk's bandwidth, do not call for zeros: they extend the
// file themselves, whose metadata is a small part of their fdatasync, and
// zeros would double the bytes the disk writes. Only on the operating
// system's file system, unless asked (Options.ZeroAhead).
//
// Nor do small groups in a fast stream: when the writer goes at bulkRate
// or faster, over the last rateWindow or more (large and small groups
// mixed, as a full 1 KiB load makes), zeros would be written over again
// by records within milliseconds, half again the bytes the disk takes (a
// full-load perf bookie at 1 KiB: 5.4 GB written for 1.8 GB of journal and
// 1.8 of entry log), while each fsync's share of the file's metadata is
// small beside its data. The filler skips those requests, and fills again
// once the writer is slower (a broker publishing 20,000 1 KiB messages a
// second writes about 21 MB/s).
//
// Zeros past the last record read as a zeroed record header, the end of
// the records; recovery tells them from damage by the zeros running to the
// end of the file (replay.go).
//
// The writer and the filler never write the same bytes: the filler starts
// at the writer's end (rounded up to a block) and writes ZeroAhead bytes,
// and the writer, before each write, waits for a fill in progress only if
// its bytes reach into that fill's range (claim), which the filler, being
// ahead, makes rare.

// zeroFiller writes zeros ahead of the writer in one journal file.
type zeroFiller struct {
	log   *slog.Logger
	path  string
	chunk int64
	fast  float64 // bulkRate when started
	zeros []byte
	write func(b []byte, off int64) error
	sync  func() error

	mu   sync.Mutex
	done sync.Cond // on mu: a fill ended
	// written: the writer's bytes end here (or before). zeroed: every byte
	// before it is in a block the file has, synced. [fillFrom, fillTo):
	// the fill in progress; empty when none.
	written, zeroed  int64
	fillFrom, fillTo int64
	failed           bool
	// The writer's rate: the window in progress began at windowAt, when
	// its bytes ended at windowWritten; wasFast: the last whole window's
	// rate was bulkRate or more.
	windowAt      time.Time
	windowWritten int64
	wasFast       bool

	kick    chan struct{} // cap 1
	stop    chan struct{}
	stopped chan struct{}
	fills   *atomic.Int64 // counts fills done
}

// newZeroFiller starts a filler for the file at path, of size bytes (all
// in blocks it has), whose records end at end. write writes zeros (aligned
// for O_DIRECT when it is a direct write), sync makes them durable.
// fills counts the fills done.
func newZeroFiller(log *slog.Logger, path string, size, end, chunk int64, write func([]byte, int64) error, sync func() error, fills *atomic.Int64) *zeroFiller {
	z := &zeroFiller{log: log, path: path, chunk: chunk, fast: bulkRate, zeros: alignedBuffer(int(chunk)), write: write, sync: sync,
		written: end, zeroed: size, fills: fills, windowAt: time.Now(), windowWritten: end,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	z.done.L = &z.mu
	go z.run()
	return z
}

// claim is called by the writer before it writes [from, to): it waits
// while a fill in progress reaches into that range, and notes that the
// writer's bytes now end at to.
func (z *zeroFiller) claim(from, to int64) {
	z.mu.Lock()
	for z.fillFrom < z.fillTo && from < z.fillTo && to > z.fillFrom {
		z.done.Wait()
	}
	z.written = max(z.written, to)
	z.mu.Unlock()
}

// ahead asks for more zeros when fewer than a chunk are left past the
// writer's end. The writer calls it after small groups.
func (z *zeroFiller) ahead() {
	z.mu.Lock()
	need := !z.failed && z.zeroed-z.written < z.chunk
	z.mu.Unlock()
	if need {
		select {
		case z.kick <- struct{}{}:
		default:
		}
	}
}

func (z *zeroFiller) run() {
	defer close(z.stopped)
	for {
		select {
		case <-z.kick:
		case <-z.stop:
			return
		}
		now := time.Now()
		z.mu.Lock()
		if z.failed || z.zeroed-z.written >= z.chunk || z.writerFast(now) {
			z.mu.Unlock()
			continue
		}
		// Block-aligned, for O_DIRECT: a reused file's size need not be.
		from := int64(alignUp(int(max(z.zeroed, z.written))))
		to := from + z.chunk
		z.fillFrom, z.fillTo = from, to
		z.mu.Unlock()

		err := z.write(z.zeros, from)
		if err == nil {
			err = z.sync()
		}

		z.mu.Lock()
		z.fillFrom, z.fillTo = 0, 0
		if err == nil {
			// The writer's bytes between the old zeroed and from are in
			// blocks it wrote (and synced); at most the rest of a block
			// after a reused file's old end is not, which costs one
			// slower fsync when the writer gets there.
			z.zeroed = to
		} else {
			z.failed = true
		}
		z.done.Broadcast()
		z.mu.Unlock()
		if err != nil {
			// Not fatal: the writer's own writes allocate the blocks, at
			// the cost of slower fsyncs. The zeros written may be partial;
			// they lie past the records.
			z.log.Warn("journal: writing zeros ahead of the records failed; not trying again in this file",
				"file", z.path, "offset", from, "err", err)
			return
		}
		z.fills.Add(1)
	}
}

// writerFast reports whether the writer goes at bulkRate or faster: over
// the last whole window, or already over the window in progress. mu held.
func (z *zeroFiller) writerFast(now time.Time) bool {
	elapsed, wrote := now.Sub(z.windowAt), float64(z.written-z.windowWritten)
	if elapsed >= rateWindow {
		z.wasFast = wrote >= z.fast*elapsed.Seconds()
		z.windowAt, z.windowWritten = now, z.written
		return z.wasFast
	}
	return z.wasFast || wrote >= z.fast*rateWindow.Seconds()
}

// close stops the filler, after the fill in progress if any.
func (z *zeroFiller) close() {
	close(z.stop)
	<-z.stopped
}
