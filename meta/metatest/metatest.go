// Package metatest is the conformance suite every meta.Store implementation
// runs from its own tests:
//
//	func TestConformance(t *testing.T) {
//		metatest.Run(t, metatest.Harness{Name: "local", Open: open, Expire: expire})
//	}
//
//	func BenchmarkStore(b *testing.B) { metatest.RunBenchmarks(b, harness) }
//
// The backend is shared by every subtest and may be reused across runs (a
// ZooKeeper server outlives `make test`), so each subtest works under a root
// of its own, /metatest/<test name>-<random hex>, and removes it when done.
//
// Nothing here sleeps: what must happen is awaited on a channel with a
// deadline, and what must not happen is checked only where the contract
// orders it, by following the operation that must not fire a watch with one
// that must and checking which event arrives first.
//
// Checks that read with one session what another session just wrote assume
// such reads are up to date. That holds for the embedded store and for a
// single ZooKeeper server; clients of a ZooKeeper ensemble may read from a
// lagging follower.
package metatest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/meta"
)

// Harness opens sessions on one shared backend (one ZooKeeper ensemble, or
// one embedded store).
type Harness struct {
	// Name of the implementation, for messages ("local", "zk").
	Name string
	// Open returns a new session on the shared backend. Each call is a
	// distinct session: its ephemeral nodes are invisible-once-closed to the
	// others, its watches are its own. The harness closes it at test cleanup
	// if the test has not (closing twice must be harmless for the suite:
	// Close after Close returns nil or ErrClosed).
	Open func(t testing.TB) meta.Store
	// Expire ends s's session the way the server would on a timeout: its
	// ephemeral nodes are deleted, s's subscribers receive a SessionExpired
	// event, s's pending watches receive EventWatchLost with Err wrapping
	// meta.ErrSessionExpired, and s then continues with a new session (later
	// calls work again).
	Expire func(t testing.TB, s meta.Store)
}

const (
	// suiteRoot holds every subtest's private root.
	suiteRoot = "/metatest"
	// waitTimeout bounds the wait for an event that must arrive.
	waitTimeout = 10 * time.Second
	// callTimeout bounds every store call of a subtest, so that a hung store
	// fails the test instead of hanging it.
	callTimeout = 2 * time.Minute
	// workers bounds the goroutines that create or delete many nodes.
	workers = 16
)

type subtest struct {
	name string
	fn   func(t *testing.T, h Harness)
}

// suite lists every conformance test, grouped as they are reported.
var suite = []struct {
	group string
	tests []subtest
}{
	{"Nodes", []subtest{
		{"CreateGetSetDelete", testCreateGetSetDelete},
		{"Root", testRoot},
		{"Stat", testStat},
		{"ValueOwnership", testValueOwnership},
		{"EmptyValues", testEmptyValues},
		{"MaxValueSize", testMaxValueSize},
	}},
	{"Errors", []subtest{
		{"CreateExisting", testCreateExisting},
		{"CreateMissingParent", testCreateMissingParent},
		{"CreateUnderEphemeral", testCreateUnderEphemeral},
		{"DeleteNotEmpty", testDeleteNotEmpty},
		{"MissingNode", testMissingNode},
		{"BadVersion", testBadVersion},
		{"AnyVersion", testAnyVersion},
	}},
	{"Paths", []subtest{
		{"Invalid", testInvalidPaths},
		{"Unusual", testUnusualPaths},
		{"MaxLength", testMaxPathLength},
	}},
	{"Sequential", []subtest{
		{"Names", testSequentialNames},
		{"SharedCounter", testSequentialSharedCounter},
		{"AfterDelete", testSequentialAfterDelete},
		{"Concurrent", testSequentialConcurrent},
		{"Ephemeral", testSequentialEphemeral},
	}},
	{"Children", []subtest{
		{"Sorted", testChildrenSorted},
		{"LeafAndMissing", testChildrenLeafAndMissing},
		{"TenThousand", testChildrenTenThousand},
	}},
	{"Concurrency", []subtest{
		{"CASRace", testCASRace},
		{"IDGenerator", testIDGenerator},
	}},
	{"Watch", []subtest{
		{"GetW", testGetW},
		{"GetWMissing", testGetWMissing},
		{"ExistsWCreated", testExistsWCreated},
		{"ExistsWExisting", testExistsWExisting},
		{"ChildrenW", testChildrenW},
		{"ChildrenWDeleted", testChildrenWDeleted},
		{"OtherSession", testWatchOtherSession},
		{"OnlyOwnPath", testWatchOnlyOwnPath},
		{"IgnoresUnrelatedChanges", testWatchIgnoresUnrelatedChanges},
		{"Multiple", testWatchMultiple},
	}},
	{"Ephemeral", []subtest{
		{"VisibleToOthers", testEphemeralVisible},
		{"DeletedOnClose", testEphemeralDeletedOnClose},
		{"DeletedOnExpire", testEphemeralDeletedOnExpire},
	}},
	{"Close", []subtest{
		{"OperationsFail", testCloseOperationsFail},
		{"WatchesLost", testCloseWatchesLost},
		{"SessionEvents", testCloseSessionEvents},
		{"OtherSessionsUnaffected", testCloseOtherSessions},
	}},
	{"Session", []subtest{
		{"CancelSubscription", testSessionCancel},
	}},
	{"Context", []subtest{
		{"Canceled", testContextCanceled},
		{"DeadlineExceeded", testContextDeadline},
	}},
	{"Helpers", []subtest{
		{"EnsurePath", testEnsurePath},
	}},
}

// Run runs every conformance test as subtests of t.
func Run(t *testing.T, h Harness) {
	if h.Open == nil || h.Expire == nil {
		t.Fatalf("metatest: Harness %q needs both Open and Expire", h.Name)
	}
	for _, g := range suite {
		t.Run(g.group, func(t *testing.T) {
			for _, st := range g.tests {
				t.Run(st.name, func(t *testing.T) { st.fn(t, h) })
			}
		})
	}
}

// fixture is one subtest's view of the backend: a session, a context for
// its calls and a private root that is removed at cleanup.
type fixture struct {
	t    testing.TB
	h    Harness
	ctx  context.Context
	s    meta.Store
	root string
}

func newFixture(t testing.TB, h Harness) *fixture {
	t.Helper()
	ctx := t.Context()
	if _, bench := t.(*testing.B); !bench { // a benchmark's length is the user's to choose
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, callTimeout)
		t.Cleanup(cancel)
	}
	s := h.Open(t)
	root := meta.Join(suiteRoot, uniqueName(t.Name()))
	if err := meta.EnsurePath(ctx, s, root); err != nil {
		t.Fatalf("%s: EnsurePath(%q): %v", h.Name, root, err)
	}
	// Registered after Open, so it runs before the harness closes s; and
	// after any session the test opens later has been closed.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		if err := removeAll(ctx, s, root); err != nil {
			t.Errorf("%s: removing test root: %v", h.Name, err)
		}
	})
	return &fixture{t: t, h: h, ctx: ctx, s: s, root: root}
}

// uniqueName turns a test name into a node name that no other run uses.
func uniqueName(testName string) string {
	name := []byte(testName)
	for i, c := range name {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			name[i] = '_'
		}
	}
	if len(name) > 100 {
		name = name[len(name)-100:]
	}
	return fmt.Sprintf("%s-%016x", name, rand.Uint64())
}

// path returns a path under the fixture's root.
func (f *fixture) path(elems ...string) string { return meta.Join(f.root, elems...) }

// open opens another session, closed at cleanup.
func (f *fixture) open() meta.Store { return f.h.Open(f.t) }

func (f *fixture) create(s meta.Store, p string, value []byte, flags meta.CreateFlags) string {
	f.t.Helper()
	got, err := s.Create(f.ctx, p, value, flags)
	if err != nil {
		f.t.Fatalf("Create(%q, flags %d): %v", p, flags, err)
	}
	return got
}

func (f *fixture) get(s meta.Store, p string) ([]byte, meta.Stat) {
	f.t.Helper()
	v, st, err := s.Get(f.ctx, p)
	if err != nil {
		f.t.Fatalf("Get(%q): %v", p, err)
	}
	return v, st
}

func (f *fixture) exists(s meta.Store, p string) (meta.Stat, bool) {
	f.t.Helper()
	st, ok, err := s.Exists(f.ctx, p)
	if err != nil {
		f.t.Fatalf("Exists(%q): %v", p, err)
	}
	return st, ok
}

func (f *fixture) set(s meta.Store, p string, value []byte, expected meta.Version) meta.Stat {
	f.t.Helper()
	st, err := s.Set(f.ctx, p, value, expected)
	if err != nil {
		f.t.Fatalf("Set(%q, version %d): %v", p, expected, err)
	}
	return st
}

func (f *fixture) delete(s meta.Store, p string, expected meta.Version) {
	f.t.Helper()
	if err := s.Delete(f.ctx, p, expected); err != nil {
		f.t.Fatalf("Delete(%q, version %d): %v", p, expected, err)
	}
}

func (f *fixture) children(s meta.Store, p string) []string {
	f.t.Helper()
	names, err := s.Children(f.ctx, p)
	if err != nil {
		f.t.Fatalf("Children(%q): %v", p, err)
	}
	return names
}

// mustExist and mustNotExist check a node's presence as s sees it.
func (f *fixture) mustExist(s meta.Store, p string) meta.Stat {
	f.t.Helper()
	st, ok := f.exists(s, p)
	if !ok {
		f.t.Fatalf("%s does not exist, want it to", p)
	}
	return st
}

func (f *fixture) mustNotExist(s meta.Store, p string) {
	f.t.Helper()
	if _, ok := f.exists(s, p); ok {
		f.t.Fatalf("%s exists, want it gone", p)
	}
}

func (f *fixture) getW(s meta.Store, p string) <-chan meta.Event {
	f.t.Helper()
	_, _, ch, err := s.GetW(f.ctx, p)
	if err != nil {
		f.t.Fatalf("GetW(%q): %v", p, err)
	}
	return ch
}

func (f *fixture) existsW(s meta.Store, p string) <-chan meta.Event {
	f.t.Helper()
	_, _, ch, err := s.ExistsW(f.ctx, p)
	if err != nil {
		f.t.Fatalf("ExistsW(%q): %v", p, err)
	}
	return ch
}

func (f *fixture) childrenW(s meta.Store, p string) <-chan meta.Event {
	f.t.Helper()
	_, ch, err := s.ChildrenW(f.ctx, p)
	if err != nil {
		f.t.Fatalf("ChildrenW(%q): %v", p, err)
	}
	return ch
}

// pathOps are the documented PathError.Op values.
var pathOps = map[string]bool{"get": true, "create": true, "set": true, "delete": true, "children": true, "exists": true}

// checkErr reports an error unless err wraps want and is a *meta.PathError
// naming path. call describes the call for messages.
func checkErr(t testing.TB, call string, err, want error, path string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: error %v, want %v", call, err, want)
		return
	}
	var pe *meta.PathError
	if !errors.As(err, &pe) {
		t.Errorf("%s: error %q is a %T, want a *meta.PathError", call, err, err)
		return
	}
	if pe.Path != path {
		t.Errorf("%s: PathError.Path = %q, want %q", call, pe.Path, path)
	}
	if !pathOps[pe.Op] {
		t.Errorf("%s: PathError.Op = %q, want one of get, create, set, delete, children, exists", call, pe.Op)
	}
}

// pathCall is one Store method applied to a path, for checks every method
// must pass (invalid paths, closed store, ended context).
type pathCall struct {
	name string
	do   func(ctx context.Context, s meta.Store, p string) error
}

var pathCalls = []pathCall{
	{"Get", func(ctx context.Context, s meta.Store, p string) error {
		_, _, err := s.Get(ctx, p)
		return err
	}},
	{"GetW", func(ctx context.Context, s meta.Store, p string) error {
		_, _, _, err := s.GetW(ctx, p)
		return err
	}},
	{"Exists", func(ctx context.Context, s meta.Store, p string) error {
		_, _, err := s.Exists(ctx, p)
		return err
	}},
	{"ExistsW", func(ctx context.Context, s meta.Store, p string) error {
		_, _, _, err := s.ExistsW(ctx, p)
		return err
	}},
	{"Children", func(ctx context.Context, s meta.Store, p string) error {
		_, err := s.Children(ctx, p)
		return err
	}},
	{"ChildrenW", func(ctx context.Context, s meta.Store, p string) error {
		_, _, err := s.ChildrenW(ctx, p)
		return err
	}},
	{"Create", func(ctx context.Context, s meta.Store, p string) error {
		_, err := s.Create(ctx, p, []byte("v"), 0)
		return err
	}},
	{"CreateSequential", func(ctx context.Context, s meta.Store, p string) error {
		_, err := s.Create(ctx, p, []byte("v"), meta.Sequential)
		return err
	}},
	{"Set", func(ctx context.Context, s meta.Store, p string) error {
		_, err := s.Set(ctx, p, []byte("v"), meta.AnyVersion)
		return err
	}},
	{"Delete", func(ctx context.Context, s meta.Store, p string) error {
		return s.Delete(ctx, p, meta.AnyVersion)
	}},
}

// waitEvent returns the next event on a watch channel, failing t if none
// arrives within waitTimeout or the channel is closed without one.
func waitEvent(t testing.TB, ch <-chan meta.Event) meta.Event {
	t.Helper()
	if ch == nil {
		t.Fatal("watch channel is nil")
	}
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed without an event")
		}
		return ev
	case <-time.After(waitTimeout):
		t.Fatalf("no watch event within %v", waitTimeout)
	}
	panic("unreachable")
}

// expectEvent waits for the watch's one event, checks it, and checks that
// the channel is then closed.
func expectEvent(t testing.TB, ch <-chan meta.Event, typ meta.EventType, path string) {
	t.Helper()
	ev := waitEvent(t, ch)
	if ev.Type != typ || ev.Path != path || ev.Err != nil {
		t.Fatalf("watch event %v %q (err %v), want %v %q", ev.Type, ev.Path, ev.Err, typ, path)
	}
	expectClosed(t, ch)
}

// expectLost waits for an EventWatchLost whose Err wraps cause, and checks
// that the channel is then closed.
func expectLost(t testing.TB, ch <-chan meta.Event, path string, cause error) {
	t.Helper()
	ev := waitEvent(t, ch)
	if ev.Type != meta.EventWatchLost || ev.Path != path || !errors.Is(ev.Err, cause) {
		t.Fatalf("watch event %v %q (err %v), want %v %q with %v", ev.Type, ev.Path, ev.Err, meta.EventWatchLost, path, cause)
	}
	expectClosed(t, ch)
}

// expectClosed waits for a watch channel to be closed: a watch fires once.
func expectClosed(t testing.TB, ch <-chan meta.Event) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if ok {
			t.Fatalf("second event on a one-shot watch: %v %q", ev.Type, ev.Path)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("watch channel not closed within %v of its event", waitTimeout)
	}
}

// waitSession waits for state on a SessionEvents channel. Connection
// changes may come at any time and are skipped; any other state fails t.
func waitSession(t testing.TB, ch <-chan meta.SessionEvent, want meta.SessionState) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case ev, ok := <-ch:
			switch {
			case !ok:
				t.Fatalf("session events closed while waiting for %v", want)
			case ev.State == want:
				return
			case ev.State != meta.SessionConnected && ev.State != meta.SessionDisconnected:
				t.Fatalf("session event %v while waiting for %v", ev.State, want)
			}
		case <-deadline:
			t.Fatalf("no %v session event within %v", want, waitTimeout)
		}
	}
}

// drainSession waits for a SessionEvents channel to be closed and returns
// the states it delivered on the way.
func drainSession(t testing.TB, ch <-chan meta.SessionEvent) []meta.SessionState {
	t.Helper()
	var states []meta.SessionState
	deadline := time.After(waitTimeout)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return states
			}
			states = append(states, ev.State)
		case <-deadline:
			t.Fatalf("session events not closed within %v (got %v)", waitTimeout, states)
		}
	}
}

// parallel calls fn(0), …, fn(n-1) from at most workers goroutines and
// returns the first error; after an error no new calls start.
func parallel(n, workers int, fn func(i int) error) error {
	var (
		next   atomic.Int64
		failed atomic.Bool
		once   sync.Once
		first  error
		wg     sync.WaitGroup
	)
	for range min(n, workers) {
		wg.Go(func() {
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
					failed.Store(true)
				}
			}
		})
	}
	wg.Wait()
	return first
}

// removeAll deletes p and everything under it.
func removeAll(ctx context.Context, s meta.Store, p string) error {
	names, err := s.Children(ctx, p)
	if errors.Is(err, meta.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	err = parallel(len(names), workers, func(i int) error {
		return removeAll(ctx, s, meta.Join(p, names[i]))
	})
	if err != nil {
		return err
	}
	if err := s.Delete(ctx, p, meta.AnyVersion); err != nil && !errors.Is(err, meta.ErrNotFound) {
		return err
	}
	return nil
}

// sortedCopy returns names sorted, leaving names as it is.
func sortedCopy(names []string) []string {
	s := slices.Clone(names)
	slices.Sort(s)
	return s
}

// quoteAll formats names for messages, eliding long lists.
func quoteAll(names []string) string {
	const most = 20
	var b strings.Builder
	b.WriteByte('[')
	for i, n := range names {
		if i == most {
			fmt.Fprintf(&b, " … (%d in all)", len(names))
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%q", n)
	}
	b.WriteByte(']')
	return b.String()
}
