package metatest

import (
	"slices"
	"testing"

	"github.com/magnetar-io/magnetar/meta"
)

// Watches that must not fire are checked by following the operations that
// must not fire them with one that must and a different event type: the
// first event a watch delivers then says which operation fired it. A
// non-blocking look at the channel right after an operation would prove
// nothing, since implementations may deliver events asynchronously.

func testGetW(t *testing.T, h Harness) {
	f := newFixture(t, h)
	p := f.path("node")
	f.create(f.s, p, []byte("v0"), 0)

	v, st, ch, err := f.s.GetW(f.ctx, p)
	if err != nil || string(v) != "v0" || st.Version != 0 {
		t.Fatalf("GetW = %q, version %d, %v; want %q, version 0", v, st.Version, err, "v0")
	}
	f.set(f.s, p, []byte("v1"), 0)
	expectEvent(t, ch, meta.EventDataChanged, p)

	// Re-arm: the read sees the change, the new watch the next one.
	v, st, ch, err = f.s.GetW(f.ctx, p)
	if err != nil || string(v) != "v1" || st.Version != 1 {
		t.Fatalf("GetW after Set = %q, version %d, %v; want %q, version 1", v, st.Version, err, "v1")
	}
	f.delete(f.s, p, 1)
	expectEvent(t, ch, meta.EventDeleted, p)
}

func testGetWMissing(t *testing.T, h Harness) {
	f := newFixture(t, h)
	p := f.path("missing")
	_, _, ch, err := f.s.GetW(f.ctx, p)
	checkErr(t, "GetW of a missing node", err, meta.ErrNotFound, p)
	if ch != nil {
		t.Errorf("GetW of a missing node returned a watch channel")
	}
}

func testExistsWCreated(t *testing.T, h Harness) {
	f := newFixture(t, h)
	p := f.path("node")
	st, ok, ch, err := f.s.ExistsW(f.ctx, p)
	if err != nil || ok || ch == nil {
		t.Fatalf("ExistsW of a missing node = %+v, %v, channel %v, %v; want false with a watch", st, ok, ch, err)
	}
	f.create(f.s, p, nil, 0)
	expectEvent(t, ch, meta.EventCreated, p)

	// The same for a node created ephemeral.
	e := f.path("ephemeral")
	ch = f.existsW(f.s, e)
	f.create(f.s, e, nil, meta.Ephemeral)
	expectEvent(t, ch, meta.EventCreated, e)
}

func testExistsWExisting(t *testing.T, h Harness) {
	f := newFixture(t, h)
	p := f.path("node")
	f.create(f.s, p, []byte("v0"), 0)

	st, ok, ch, err := f.s.ExistsW(f.ctx, p)
	if err != nil || !ok || st.Version != 0 {
		t.Fatalf("ExistsW of an existing node = %+v, %v, %v; want version 0, true", st, ok, err)
	}
	f.set(f.s, p, []byte("v1"), 0)
	expectEvent(t, ch, meta.EventDataChanged, p)

	st, ok, ch, err = f.s.ExistsW(f.ctx, p)
	if err != nil || !ok || st.Version != 1 {
		t.Fatalf("ExistsW after Set = %+v, %v, %v; want version 1, true", st, ok, err)
	}
	f.delete(f.s, p, 1)
	expectEvent(t, ch, meta.EventDeleted, p)
}

func testChildrenW(t *testing.T, h Harness) {
	f := newFixture(t, h)
	p := f.path("parent")
	f.create(f.s, p, nil, 0)

	names, ch, err := f.s.ChildrenW(f.ctx, p)
	if err != nil || len(names) != 0 {
		t.Fatalf("ChildrenW = %s, %v; want none", quoteAll(names), err)
	}
	f.create(f.s, meta.Join(p, "a"), nil, 0)
	expectEvent(t, ch, meta.EventChildrenChanged, p)

	names, ch, err = f.s.ChildrenW(f.ctx, p)
	if err != nil || !slices.Equal(names, []string{"a"}) {
		t.Fatalf("ChildrenW after a create = %s, %v; want [\"a\"]", quoteAll(names), err)
	}
	f.create(f.s, meta.Join(p, "s-"), nil, meta.Sequential|meta.Ephemeral)
	expectEvent(t, ch, meta.EventChildrenChanged, p)

	ch = f.childrenW(f.s, p)
	f.delete(f.s, meta.Join(p, "a"), 0)
	expectEvent(t, ch, meta.EventChildrenChanged, p)

	names, _, err = f.s.ChildrenW(f.ctx, p)
	if err != nil || len(names) != 1 {
		t.Fatalf("ChildrenW after a delete = %s, %v; want one sequential child", quoteAll(names), err)
	}
}

func testChildrenWDeleted(t *testing.T, h Harness) {
	f := newFixture(t, h)
	p := f.path("leaf")
	f.create(f.s, p, nil, 0)
	ch := f.childrenW(f.s, p)
	// A change of the node's own value is not a change of its children.
	f.set(f.s, p, []byte("changed"), 0)
	f.delete(f.s, p, 1)
	expectEvent(t, ch, meta.EventDeleted, p)
}

func testWatchOtherSession(t *testing.T, h Harness) {
	f := newFixture(t, h)
	writer := f.open()
	data, parent, missing := f.path("data"), f.path("parent"), f.path("missing")
	f.create(writer, data, nil, 0)
	f.create(writer, parent, nil, 0)

	dataW := f.getW(f.s, data)
	existsW := f.existsW(f.s, missing)
	childrenW := f.childrenW(f.s, parent)
	f.set(writer, data, []byte("x"), 0)
	f.create(writer, missing, nil, 0)
	f.create(writer, meta.Join(parent, "child"), nil, meta.Ephemeral)
	expectEvent(t, dataW, meta.EventDataChanged, data)
	expectEvent(t, existsW, meta.EventCreated, missing)
	expectEvent(t, childrenW, meta.EventChildrenChanged, parent)

	// What the watcher reads next includes the writer's change.
	if v, st := f.get(f.s, data); string(v) != "x" || st.Version != 1 {
		t.Fatalf("Get after the event = %q version %d, want %q version 1", v, st.Version, "x")
	}
}

func testWatchOnlyOwnPath(t *testing.T, h Harness) {
	f := newFixture(t, h)
	n, m := f.path("n"), f.path("m")
	f.create(f.s, n, nil, 0)
	dataW, existsW, childrenW := f.getW(f.s, n), f.existsW(f.s, n), f.childrenW(f.s, n)
	createdW := f.existsW(f.s, m)

	// Siblings, including ones whose names extend the watched ones, and the
	// parent. The watches on n and m may not fire for any of these.
	for _, other := range []string{f.path("n2"), f.path("nn"), f.path("m2"), f.path("m-x")} {
		f.create(f.s, other, nil, 0)
		f.set(f.s, other, []byte("x"), 0)
		f.create(f.s, meta.Join(other, "child"), nil, 0)
		f.delete(f.s, meta.Join(other, "child"), 0)
		f.delete(f.s, other, 1)
	}
	f.set(f.s, f.root, []byte("x"), meta.AnyVersion)

	f.delete(f.s, n, 0)
	f.create(f.s, m, nil, 0)
	expectEvent(t, dataW, meta.EventDeleted, n)
	expectEvent(t, existsW, meta.EventDeleted, n)
	expectEvent(t, childrenW, meta.EventDeleted, n)
	expectEvent(t, createdW, meta.EventCreated, m)
}

func testWatchIgnoresUnrelatedChanges(t *testing.T, h Harness) {
	f := newFixture(t, h)

	// Data watches: not fired by changes below the node or by failed writes.
	n := f.path("n")
	f.create(f.s, n, nil, 0)
	f.create(f.s, meta.Join(n, "c"), nil, 0)
	dataW, existsW := f.getW(f.s, n), f.existsW(f.s, n)
	f.create(f.s, meta.Join(n, "c", "g"), nil, 0)
	f.set(f.s, meta.Join(n, "c"), []byte("x"), meta.AnyVersion)
	f.delete(f.s, meta.Join(n, "c", "g"), 0)
	if _, err := f.s.Set(f.ctx, n, []byte("x"), 7); err == nil {
		t.Fatal("Set with a wrong version succeeded")
	}
	if _, err := f.s.Create(f.ctx, n, nil, 0); err == nil {
		t.Fatal("Create of an existing node succeeded")
	}
	if err := f.s.Delete(f.ctx, n, meta.AnyVersion); err == nil {
		t.Fatal("Delete of a node with a child succeeded")
	}
	f.delete(f.s, meta.Join(n, "c"), 1)
	f.delete(f.s, n, 0)
	expectEvent(t, dataW, meta.EventDeleted, n)
	expectEvent(t, existsW, meta.EventDeleted, n)

	// Child watch: not fired by the node's own value or failed creates.
	l := f.path("leaf")
	f.create(f.s, l, nil, 0)
	childrenW := f.childrenW(f.s, l)
	f.set(f.s, l, []byte("x"), 0)
	if _, err := f.s.Create(f.ctx, meta.Join(l, "missing", "c"), nil, 0); err == nil {
		t.Fatal("Create under a missing parent succeeded")
	}
	f.delete(f.s, l, 1)
	expectEvent(t, childrenW, meta.EventDeleted, l)

	// Creation watch: not fired by failed writes to the missing node.
	m := f.path("m")
	createdW := f.existsW(f.s, m)
	if _, err := f.s.Set(f.ctx, m, nil, meta.AnyVersion); err == nil {
		t.Fatal("Set of a missing node succeeded")
	}
	if err := f.s.Delete(f.ctx, m, meta.AnyVersion); err == nil {
		t.Fatal("Delete of a missing node succeeded")
	}
	if _, err := f.s.Create(f.ctx, meta.Join(m, "c"), nil, 0); err == nil {
		t.Fatal("Create under a missing node succeeded")
	}
	f.create(f.s, m, nil, 0)
	expectEvent(t, createdW, meta.EventCreated, m)
}

func testWatchMultiple(t *testing.T, h Harness) {
	f := newFixture(t, h)
	other := f.open()
	p := f.path("node")
	f.create(f.s, p, nil, 0)

	// Every watch set fires, even several of one session on one path.
	first, second := f.getW(f.s, p), f.getW(f.s, p)
	existsW := f.existsW(f.s, p)
	childrenW := f.childrenW(f.s, p)
	otherW := f.getW(other, p)
	f.set(other, p, []byte("x"), 0)
	for _, ch := range []<-chan meta.Event{first, second, existsW, otherW} {
		expectEvent(t, ch, meta.EventDataChanged, p)
	}
	f.delete(other, p, 1)
	expectEvent(t, childrenW, meta.EventDeleted, p)
}
