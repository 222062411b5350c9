package metatest

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/meta"
)

func testCreateGetSetDelete(t *testing.T, h Harness) {
	f := newFixture(t, h)
	p := f.path("node")

	if got := f.create(f.s, p, []byte("v0"), 0); got != p {
		t.Fatalf("Create(%q) returned path %q", p, got)
	}
	if v, st := f.get(f.s, p); string(v) != "v0" || st.Version != 0 {
		t.Fatalf("Get = %q version %d, want %q version 0", v, st.Version, "v0")
	}
	if st := f.mustExist(f.s, p); st.Version != 0 {
		t.Fatalf("Exists: version %d, want 0", st.Version)
	}
	if st := f.set(f.s, p, []byte("v1"), 0); st.Version != 1 {
		t.Fatalf("Set returned version %d, want 1", st.Version)
	}
	if v, st := f.get(f.s, p); string(v) != "v1" || st.Version != 1 {
		t.Fatalf("Get after Set = %q version %d, want %q version 1", v, st.Version, "v1")
	}
	f.delete(f.s, p, 1)
	f.mustNotExist(f.s, p)
	_, _, err := f.s.Get(f.ctx, p)
	checkErr(t, "Get after Delete", err, meta.ErrNotFound, p)
	// The name is free again, and the new node starts over at version 0.
	f.create(f.s, p, []byte("again"), 0)
	if v, st := f.get(f.s, p); string(v) != "again" || st.Version != 0 {
		t.Fatalf("Get of re-created node = %q version %d, want %q version 0", v, st.Version, "again")
	}
}

func testRoot(t *testing.T, h Harness) {
	f := newFixture(t, h)
	f.mustExist(f.s, "/")
	if names := f.children(f.s, "/"); !slices.Contains(names, meta.Base(suiteRoot)) {
		t.Fatalf("Children(/) = %s, want it to contain %q", quoteAll(names), meta.Base(suiteRoot))
	}
}

// plausibleTime catches zero times and unit mix-ups (seconds read as
// milliseconds and the like) without trusting the server's clock closely.
func plausibleTime(t testing.TB, what string, tm time.Time) {
	t.Helper()
	if d := time.Since(tm).Abs(); tm.IsZero() || d > 24*time.Hour {
		t.Errorf("%s = %v, want within a day of now", what, tm)
	}
}

func testStat(t *testing.T, h Harness) {
	f := newFixture(t, h)
	p := f.path("node")
	f.create(f.s, p, []byte("x"), 0)

	created := f.mustExist(f.s, p)
	if created.Version != 0 || created.Ephemeral || created.NumChildren != 0 {
		t.Fatalf("stat of a new node = %+v, want version 0, persistent, no children", created)
	}
	plausibleTime(t, "Created", created.Created)
	plausibleTime(t, "Modified", created.Modified)
	if created.Modified.Before(created.Created) {
		t.Errorf("Modified %v is before Created %v", created.Modified, created.Created)
	}

	f.create(f.s, meta.Join(p, "a"), nil, 0)
	f.create(f.s, meta.Join(p, "b"), nil, meta.Ephemeral)
	f.create(f.s, meta.Join(p, "a", "grandchild"), nil, 0) // not counted
	if st := f.mustExist(f.s, p); st.NumChildren != 2 {
		t.Errorf("Exists: NumChildren = %d after creating 2 children, want 2", st.NumChildren)
	}
	if _, st := f.get(f.s, p); st.NumChildren != 2 {
		t.Errorf("Get: NumChildren = %d after creating 2 children, want 2", st.NumChildren)
	}
	if st := f.mustExist(f.s, meta.Join(p, "b")); !st.Ephemeral || st.Version != 0 {
		t.Errorf("stat of an ephemeral node = %+v, want Ephemeral and version 0", st)
	}
	f.delete(f.s, meta.Join(p, "b"), meta.AnyVersion)
	if st := f.mustExist(f.s, p); st.NumChildren != 1 {
		t.Errorf("NumChildren = %d after deleting one of 2 children, want 1", st.NumChildren)
	}

	// Set until Modified moves: timestamps may be coarse (ZooKeeper's are
	// milliseconds), but a few Sets take longer than one tick.
	deadline := time.Now().Add(waitTimeout)
	prev := created
	for i := 1; ; i++ {
		st := f.set(f.s, p, fmt.Appendf(nil, "value %d", i), prev.Version)
		if st.Version != prev.Version+1 {
			t.Fatalf("Set %d returned version %d, want %d", i, st.Version, prev.Version+1)
		}
		if !st.Created.Equal(created.Created) {
			t.Fatalf("Set %d changed Created from %v to %v", i, created.Created, st.Created)
		}
		if st.Modified.Before(prev.Modified) {
			t.Fatalf("Set %d moved Modified back from %v to %v", i, prev.Modified, st.Modified)
		}
		if st.NumChildren != 1 || st.Ephemeral {
			t.Fatalf("Set %d returned %+v, want NumChildren 1 and persistent", i, st)
		}
		_, got := f.get(f.s, p)
		if got.Version != st.Version || !got.Modified.Equal(st.Modified) || !got.Created.Equal(st.Created) {
			t.Fatalf("Get after Set %d: stat %+v, Set returned %+v", i, got, st)
		}
		if st.Modified.After(created.Modified) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Modified still %v after %d Sets", st.Modified, i)
		}
		prev = st
	}
}

func testValueOwnership(t *testing.T, h Harness) {
	f := newFixture(t, h)
	p := f.path("node")

	// The store must not keep the caller's slice.
	in := []byte("created")
	f.create(f.s, p, in, 0)
	in[0] = 'X'
	if v, _ := f.get(f.s, p); string(v) != "created" {
		t.Fatalf("changing the slice passed to Create changed the node to %q", v)
	}
	in = []byte("set")
	f.set(f.s, p, in, meta.AnyVersion)
	in[0] = 'X'
	if v, _ := f.get(f.s, p); string(v) != "set" {
		t.Fatalf("changing the slice passed to Set changed the node to %q", v)
	}

	// What the store returns belongs to the caller.
	v, _ := f.get(f.s, p)
	v[0] = 'X'
	v2, _, _, err := f.s.GetW(f.ctx, p)
	if err != nil {
		t.Fatalf("GetW: %v", err)
	}
	if string(v2) != "set" {
		t.Fatalf("changing the value Get returned changed the node to %q", v2)
	}
	v2[0] = 'X'
	if v, _ := f.get(f.s, p); string(v) != "set" {
		t.Fatalf("changing the value GetW returned changed the node to %q", v)
	}

	f.create(f.s, meta.Join(p, "a"), nil, 0)
	f.create(f.s, meta.Join(p, "b"), nil, 0)
	names := f.children(f.s, p)
	names[0] = "X"
	if names := f.children(f.s, p); !slices.Equal(names, []string{"a", "b"}) {
		t.Fatalf("changing the slice Children returned changed it to %s", quoteAll(names))
	}
}

func testEmptyValues(t *testing.T, h Harness) {
	f := newFixture(t, h)
	checkEmpty := func(p, after string) {
		t.Helper()
		if v, _ := f.get(f.s, p); len(v) != 0 {
			t.Errorf("Get after %s = %q, want an empty value", after, v)
		}
	}
	nilNode, emptyNode := f.path("nil"), f.path("empty")
	f.create(f.s, nilNode, nil, 0)
	checkEmpty(nilNode, "Create with nil")
	f.create(f.s, emptyNode, []byte{}, 0)
	checkEmpty(emptyNode, "Create with []byte{}")

	f.set(f.s, nilNode, []byte("x"), 0)
	if st := f.set(f.s, nilNode, nil, 1); st.Version != 2 {
		t.Errorf("Set with nil returned version %d, want 2", st.Version)
	}
	checkEmpty(nilNode, "Set with nil")
	f.set(f.s, emptyNode, []byte("x"), 0)
	f.set(f.s, emptyNode, []byte{}, 1)
	checkEmpty(emptyNode, "Set with []byte{}")
}

func testMaxValueSize(t *testing.T, h Harness) {
	f := newFixture(t, h)
	largest := make([]byte, meta.MaxValueSize)
	for i := range largest {
		largest[i] = byte(i % 251) // catches truncation and reordering
	}
	tooLarge := append(slices.Clone(largest), 0)

	p := f.path("largest")
	f.create(f.s, p, largest, 0)
	if v, _ := f.get(f.s, p); !bytes.Equal(v, largest) {
		t.Fatalf("Get of a %d-byte value returned %d bytes, not the same", len(largest), len(v))
	}

	q := f.path("too-large")
	_, err := f.s.Create(f.ctx, q, tooLarge, 0)
	checkErr(t, "Create with MaxValueSize+1 bytes", err, meta.ErrTooLarge, q)
	f.mustNotExist(f.s, q)

	_, err = f.s.Set(f.ctx, p, tooLarge, meta.AnyVersion)
	checkErr(t, "Set with MaxValueSize+1 bytes", err, meta.ErrTooLarge, p)
	if v, st := f.get(f.s, p); st.Version != 0 || !bytes.Equal(v, largest) {
		t.Fatalf("failed Set changed the node: version %d, %d bytes", st.Version, len(v))
	}
	if st := f.set(f.s, p, largest[:10], 0); st.Version != 1 {
		t.Fatalf("Set returned version %d, want 1", st.Version)
	}
	if st := f.set(f.s, p, largest, 1); st.Version != 2 {
		t.Fatalf("Set of MaxValueSize bytes returned version %d, want 2", st.Version)
	}
}

func testCreateExisting(t *testing.T, h Harness) {
	f := newFixture(t, h)
	p := f.path("node")
	f.create(f.s, p, []byte("first"), 0)
	for _, flags := range []meta.CreateFlags{0, meta.Ephemeral} {
		_, err := f.s.Create(f.ctx, p, []byte("second"), flags)
		checkErr(t, fmt.Sprintf("second Create (flags %d)", flags), err, meta.ErrExists, p)
	}
	if v, st := f.get(f.s, p); string(v) != "first" || st.Version != 0 || st.Ephemeral {
		t.Fatalf("failed Create changed the node to %q, %+v", v, st)
	}
	// Another session gets the same answer.
	_, err := f.open().Create(f.ctx, p, nil, 0)
	checkErr(t, "Create from another session", err, meta.ErrExists, p)
}

func testCreateMissingParent(t *testing.T, h Harness) {
	f := newFixture(t, h)
	for _, flags := range []meta.CreateFlags{0, meta.Ephemeral, meta.Sequential} {
		p := f.path("missing", "child")
		_, err := f.s.Create(f.ctx, p, nil, flags)
		checkErr(t, fmt.Sprintf("Create under a missing parent (flags %d)", flags), err, meta.ErrNotFound, p)
	}
	f.mustNotExist(f.s, f.path("missing"))
}

func testCreateUnderEphemeral(t *testing.T, h Harness) {
	f := newFixture(t, h)
	e := f.path("ephemeral")
	f.create(f.s, e, nil, meta.Ephemeral)
	for _, flags := range []meta.CreateFlags{0, meta.Ephemeral, meta.Sequential} {
		p := meta.Join(e, "child")
		_, err := f.s.Create(f.ctx, p, nil, flags)
		checkErr(t, fmt.Sprintf("Create under an ephemeral node (flags %d)", flags), err, meta.ErrEphemeralParent, p)
	}
	if st := f.mustExist(f.s, e); st.NumChildren != 0 {
		t.Fatalf("ephemeral node has %d children", st.NumChildren)
	}
}

func testDeleteNotEmpty(t *testing.T, h Harness) {
	f := newFixture(t, h)
	p, c := f.path("parent"), f.path("parent", "child")
	f.create(f.s, p, nil, 0)
	f.create(f.s, c, nil, meta.Ephemeral) // an ephemeral child counts too
	for _, v := range []meta.Version{meta.AnyVersion, 0} {
		err := f.s.Delete(f.ctx, p, v)
		checkErr(t, fmt.Sprintf("Delete of a node with a child (version %d)", v), err, meta.ErrNotEmpty, p)
	}
	f.mustExist(f.s, p)
	f.delete(f.s, c, 0)
	f.delete(f.s, p, 0)
	f.mustNotExist(f.s, p)
}

func testMissingNode(t *testing.T, h Harness) {
	f := newFixture(t, h)
	p := f.path("missing")
	_, _, err := f.s.Get(f.ctx, p)
	checkErr(t, "Get", err, meta.ErrNotFound, p)
	_, err = f.s.Children(f.ctx, p)
	checkErr(t, "Children", err, meta.ErrNotFound, p)
	_, ch, err := f.s.ChildrenW(f.ctx, p)
	checkErr(t, "ChildrenW", err, meta.ErrNotFound, p)
	if ch != nil {
		t.Errorf("ChildrenW of a missing node returned a watch channel")
	}
	for _, v := range []meta.Version{meta.AnyVersion, 0} {
		_, err = f.s.Set(f.ctx, p, nil, v)
		checkErr(t, fmt.Sprintf("Set (version %d)", v), err, meta.ErrNotFound, p)
		err = f.s.Delete(f.ctx, p, v)
		checkErr(t, fmt.Sprintf("Delete (version %d)", v), err, meta.ErrNotFound, p)
	}
	st, ok, err := f.s.Exists(f.ctx, p)
	if err != nil || ok || st != (meta.Stat{}) {
		t.Errorf("Exists = %+v, %v, %v; want a zero Stat, false, nil", st, ok, err)
	}
	f.mustNotExist(f.s, p) // the failed Set did not create it
}

func testBadVersion(t *testing.T, h Harness) {
	f := newFixture(t, h)
	p := f.path("node")
	f.create(f.s, p, []byte("v0"), 0)

	for _, v := range []meta.Version{1, 5} {
		_, err := f.s.Set(f.ctx, p, []byte("bad"), v)
		checkErr(t, fmt.Sprintf("Set with version %d of a node at 0", v), err, meta.ErrBadVersion, p)
		err = f.s.Delete(f.ctx, p, v)
		checkErr(t, fmt.Sprintf("Delete with version %d of a node at 0", v), err, meta.ErrBadVersion, p)
	}
	if v, st := f.get(f.s, p); string(v) != "v0" || st.Version != 0 {
		t.Fatalf("after failed Sets: %q version %d, want %q version 0", v, st.Version, "v0")
	}

	f.set(f.s, p, []byte("v1"), 0)
	_, err := f.s.Set(f.ctx, p, []byte("stale"), 0)
	checkErr(t, "Set with a stale version", err, meta.ErrBadVersion, p)
	err = f.s.Delete(f.ctx, p, 0)
	checkErr(t, "Delete with a stale version", err, meta.ErrBadVersion, p)
	if v, st := f.get(f.s, p); string(v) != "v1" || st.Version != 1 {
		t.Fatalf("after stale Set: %q version %d, want %q version 1", v, st.Version, "v1")
	}
	f.delete(f.s, p, 1)
	f.mustNotExist(f.s, p)
}

func testAnyVersion(t *testing.T, h Harness) {
	f := newFixture(t, h)
	p := f.path("node")
	f.create(f.s, p, nil, 0)
	for want := meta.Version(1); want <= 3; want++ {
		if st := f.set(f.s, p, fmt.Appendf(nil, "%d", want), meta.AnyVersion); st.Version != want {
			t.Fatalf("unconditional Set returned version %d, want %d", st.Version, want)
		}
	}
	if v, st := f.get(f.s, p); string(v) != "3" || st.Version != 3 {
		t.Fatalf("Get = %q version %d, want %q version 3", v, st.Version, "3")
	}
	f.delete(f.s, p, meta.AnyVersion)
	f.mustNotExist(f.s, p)
}

func testInvalidPaths(t *testing.T, h Harness) {
	f := newFixture(t, h)
	// Malformed paths that could otherwise reach a real node are built under
	// the test root, so a store that accepts them only touches its own tree.
	r := f.root
	invalid := []string{
		"",
		"a",
		r[1:] + "/a", // relative
		r + "/",
		r + "/a/",
		r + "//a",
		r + "/a//b",
		r + "/.",
		r + "/a/./b",
		r + "/..",
		r + "/a/../b",
		r + "/a\x00b",
		r + "/a\x01",
		r + "/a\x1f",
		r + "/a\x7f",
		r + "/a\u0085",     // C1 control
		r + "/a\ue000",     // private use
		r + "/a\ufff0",     // specials
		r + "/a\U0001F680", // ZooKeeper refuses code points beyond U+FFFF
		r + "/a\xff",       // not UTF-8
		r + "/" + strings.Repeat("x", meta.MaxPathLength-len(r)),
	}
	for _, p := range invalid {
		if err := meta.ValidatePath(p); err == nil {
			t.Fatalf("meta.ValidatePath(%q) accepts it; the suite expects it invalid", p)
		}
		for _, c := range pathCalls {
			checkErr(t, fmt.Sprintf("%s(%q)", c.name, p), c.do(f.ctx, f.s, p), meta.ErrInvalidPath, p)
		}
	}
	// Nothing was created by accident: the root is still empty.
	if names := f.children(f.s, r); len(names) != 0 {
		t.Fatalf("invalid paths created %s", quoteAll(names))
	}
}

func testUnusualPaths(t *testing.T, h Harness) {
	f := newFixture(t, h)
	names := []string{"a b", "x:y", "persistent%3A", "主题", "zookeeper", "...", ".hidden", "-", "a.b"}
	for _, name := range names {
		p := f.path(name)
		f.create(f.s, p, []byte(name), 0)
		if v, _ := f.get(f.s, p); string(v) != name {
			t.Errorf("Get(%q) = %q", p, v)
		}
		f.set(f.s, p, []byte("set"), 0)
	}
	nested := f.path("persistent%3A", "t")
	f.create(f.s, nested, nil, 0)
	if got := f.children(f.s, f.path("persistent%3A")); !slices.Equal(got, []string{"t"}) {
		t.Errorf("Children(%q) = %s, want [\"t\"]", f.path("persistent%3A"), quoteAll(got))
	}
	if got, want := f.children(f.s, f.root), sortedCopy(names); !slices.Equal(got, want) {
		t.Errorf("Children of the root = %s, want %s", quoteAll(got), quoteAll(want))
	}
	f.delete(f.s, nested, 0)
	for _, name := range names {
		f.delete(f.s, f.path(name), 1)
	}
	if got := f.children(f.s, f.root); len(got) != 0 {
		t.Errorf("Children after deleting all = %s", quoteAll(got))
	}
}

func testMaxPathLength(t *testing.T, h Harness) {
	f := newFixture(t, h)
	name := strings.Repeat("m", meta.MaxPathLength-len(f.root)-1)
	p := f.path(name)
	if len(p) != meta.MaxPathLength {
		t.Fatalf("built a %d-byte path, want %d", len(p), meta.MaxPathLength)
	}
	f.create(f.s, p, []byte("long"), 0)
	if v, _ := f.get(f.s, p); string(v) != "long" {
		t.Fatalf("Get of the longest path = %q", v)
	}
	if got := f.children(f.s, f.root); !slices.Equal(got, []string{name}) {
		t.Fatalf("Children of the root = %s, want the %d-byte name", quoteAll(got), len(name))
	}
	f.delete(f.s, p, 0)
	f.mustNotExist(f.s, p)
}
