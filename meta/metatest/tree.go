package metatest

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/magnetar-io/magnetar/meta"
)

// seqCounter checks that p is base followed by a ten-digit, zero-padded
// counter and returns the counter.
func seqCounter(t testing.TB, base, p string) int64 {
	t.Helper()
	suffix, ok := strings.CutPrefix(p, base)
	if !ok || len(suffix) != 10 {
		t.Fatalf("sequential node %q is not %q followed by ten digits", p, base)
	}
	n, err := strconv.ParseInt(suffix, 10, 64)
	if err != nil || n < 0 {
		t.Fatalf("sequential node %q: suffix %q is not a counter", p, suffix)
	}
	return n
}

func testSequentialNames(t *testing.T, h Harness) {
	f := newFixture(t, h)
	base := f.path("item-")
	var created []string
	last := int64(-1)
	for i := range 5 {
		p := f.create(f.s, base, []byte(strconv.Itoa(i)), meta.Sequential)
		if n := seqCounter(t, base, p); n <= last {
			t.Fatalf("sequential create %d got counter %d after %d", i, n, last)
		} else {
			last = n
		}
		if v, st := f.get(f.s, p); string(v) != strconv.Itoa(i) || st.Ephemeral {
			t.Fatalf("Get(%q) = %q, %+v", p, v, st)
		}
		created = append(created, meta.Base(p))
	}
	// Sorted order is creation order.
	if got := f.children(f.s, f.root); !slices.Equal(got, created) {
		t.Fatalf("Children = %s, want the creation order %s", quoteAll(got), quoteAll(created))
	}
}

func testSequentialSharedCounter(t *testing.T, h Harness) {
	f := newFixture(t, h)
	// The counter belongs to the parent, not to the base name.
	last := int64(-1)
	for i, base := range []string{"lock-", "read-", "lock-", "write-", "read-"} {
		b := f.path(base)
		n := seqCounter(t, b, f.create(f.s, b, nil, meta.Sequential))
		if n <= last {
			t.Fatalf("create %d (%q) got counter %d after %d: the counter is not the parent's", i, base, n, last)
		}
		last = n
	}
	// A sequential create in another parent does not use this one's counter.
	f.create(f.s, f.path("other"), nil, 0)
	other := f.path("other", "x-")
	first := seqCounter(t, other, f.create(f.s, other, nil, meta.Sequential))
	second := seqCounter(t, other, f.create(f.s, other, nil, meta.Sequential))
	if second <= first {
		t.Fatalf("counters in another parent: %d then %d", first, second)
	}
}

func testSequentialAfterDelete(t *testing.T, h Harness) {
	f := newFixture(t, h)
	base := f.path("n-")
	p := f.create(f.s, base, nil, meta.Sequential)
	first := seqCounter(t, base, p)
	f.delete(f.s, p, 0)
	// A deleted name is never handed out again.
	if n := seqCounter(t, base, f.create(f.s, base, nil, meta.Sequential)); n <= first {
		t.Fatalf("counter after deleting %q is %d, want more than %d", p, n, first)
	}
}

func testSequentialConcurrent(t *testing.T, h Harness) {
	const goroutines, perGoroutine = 8, 25
	f := newFixture(t, h)
	base := f.path("c-")
	// Half the goroutines share the fixture's session, half have their own.
	stores := make([]meta.Store, goroutines)
	for i := range stores {
		stores[i] = f.s
		if i%2 == 1 {
			stores[i] = f.open()
		}
	}
	paths := make([][]string, goroutines)
	errs := make([]error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range perGoroutine {
				p, err := stores[g].Create(f.ctx, base, nil, meta.Sequential)
				if err != nil {
					errs[g] = err
					return
				}
				paths[g] = append(paths[g], p)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent sequential creates: %v", err)
	}

	var all []string
	for g, ps := range paths {
		last := int64(-1)
		for _, p := range ps {
			n := seqCounter(t, base, p)
			if n <= last {
				t.Fatalf("goroutine %d: counter %d after %d", g, n, last)
			}
			last = n
			all = append(all, meta.Base(p))
		}
	}
	slices.Sort(all)
	if i := duplicateAt(all); i >= 0 {
		t.Fatalf("sequential name %q handed out twice", all[i])
	}
	if got := f.children(f.s, f.root); !slices.Equal(got, all) {
		t.Fatalf("Children = %s, want the %d created names %s", quoteAll(got), len(all), quoteAll(all))
	}
}

// duplicateAt returns the index of the first element of a sorted slice that
// equals the next one, or -1.
func duplicateAt[T comparable](sorted []T) int {
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return i
		}
	}
	return -1
}

func testSequentialEphemeral(t *testing.T, h Harness) {
	f := newFixture(t, h)
	owner, other := f.open(), f.open()
	base := f.path("member-")
	p := f.create(owner, base, []byte("m"), meta.Ephemeral|meta.Sequential)
	seqCounter(t, base, p)
	if st := f.mustExist(other, p); !st.Ephemeral {
		t.Fatalf("ephemeral sequential node %q has stat %+v", p, st)
	}
	gone := f.existsW(other, p)
	if err := owner.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	expectEvent(t, gone, meta.EventDeleted, p)
	f.mustNotExist(other, p)
}

func testChildrenSorted(t *testing.T, h Harness) {
	f := newFixture(t, h)
	// Byte order, not creation order, numeric order or case-folded order.
	names := []string{"b", "a", "c10", "c9", "C", "c1", "Z", "_", "主题", "a b"}
	for i, name := range names {
		flags := meta.CreateFlags(0)
		if i%3 == 1 { // not "b", which gets a child below
			flags = meta.Ephemeral // listed like any other child
		}
		f.create(f.s, f.path(name), nil, flags)
	}
	want := sortedCopy(names)
	if got := f.children(f.s, f.root); !slices.Equal(got, want) {
		t.Fatalf("Children = %s, want %s", quoteAll(got), quoteAll(want))
	}
	// Another session sees the same list, and ChildrenW returns it too.
	got, _, err := f.open().ChildrenW(f.ctx, f.root)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("ChildrenW from another session = %s, %v; want %s", quoteAll(got), err, quoteAll(want))
	}
	// Grandchildren are not children.
	f.create(f.s, f.path("b", "grandchild"), nil, 0)
	if got := f.children(f.s, f.root); !slices.Equal(got, want) {
		t.Fatalf("Children after adding a grandchild = %s, want %s", quoteAll(got), quoteAll(want))
	}
	if got := f.children(f.s, f.path("b")); !slices.Equal(got, []string{"grandchild"}) {
		t.Fatalf("Children(b) = %s, want [\"grandchild\"]", quoteAll(got))
	}
}

func testChildrenLeafAndMissing(t *testing.T, h Harness) {
	f := newFixture(t, h)
	leaf := f.path("leaf")
	f.create(f.s, leaf, []byte("x"), 0)
	if got := f.children(f.s, leaf); len(got) != 0 {
		t.Fatalf("Children of a leaf = %s, want none", quoteAll(got))
	}
	got, ch, err := f.s.ChildrenW(f.ctx, leaf)
	if err != nil || len(got) != 0 || ch == nil {
		t.Fatalf("ChildrenW of a leaf = %s, channel %v, %v; want none, a watch, nil", quoteAll(got), ch, err)
	}
	missing := f.path("missing")
	_, err = f.s.Children(f.ctx, missing)
	checkErr(t, "Children of a missing node", err, meta.ErrNotFound, missing)
	_, _, err = f.s.ChildrenW(f.ctx, missing)
	checkErr(t, "ChildrenW of a missing node", err, meta.ErrNotFound, missing)
}

func testChildrenTenThousand(t *testing.T, h Harness) {
	const n = 10_000
	f := newFixture(t, h)
	parent := f.path("many")
	f.create(f.s, parent, nil, 0)
	// Unpadded numbers, so byte order differs from numeric order.
	names := make([]string, n)
	for i := range names {
		names[i] = "c" + strconv.Itoa(i)
	}
	err := parallel(n, workers, func(i int) error {
		_, err := f.s.Create(f.ctx, meta.Join(parent, names[i]), nil, 0)
		return err
	})
	if err != nil {
		t.Fatalf("creating %d children: %v", n, err)
	}
	want := sortedCopy(names)
	got := f.children(f.s, parent)
	if !slices.Equal(got, want) {
		t.Fatalf("Children returned %d names %s, want %d sorted", len(got), quoteAll(got), n)
	}
	if st := f.mustExist(f.s, parent); st.NumChildren != n {
		t.Fatalf("NumChildren = %d, want %d", st.NumChildren, n)
	}
}

func testEnsurePath(t *testing.T, h Harness) {
	f := newFixture(t, h)
	deep := f.path("a", "b", "c", "d", "e")
	if err := meta.EnsurePath(f.ctx, f.s, deep); err != nil {
		t.Fatalf("EnsurePath(%q): %v", deep, err)
	}
	for p := deep; p != f.root; p = meta.Parent(p) {
		if v, st := f.get(f.s, p); len(v) != 0 || st.Ephemeral || st.Version != 0 {
			t.Fatalf("EnsurePath made %q with %q, %+v; want an empty persistent node", p, v, st)
		}
	}

	// Existing nodes are left as they are, and missing ones filled in.
	f.set(f.s, f.path("a", "b"), []byte("kept"), 0)
	f.delete(f.s, deep, 0)
	for range 2 {
		if err := meta.EnsurePath(f.ctx, f.s, deep); err != nil {
			t.Fatalf("EnsurePath(%q) again: %v", deep, err)
		}
	}
	if v, st := f.get(f.s, f.path("a", "b")); string(v) != "kept" || st.Version != 1 {
		t.Fatalf("EnsurePath changed an existing node to %q version %d", v, st.Version)
	}
	f.mustExist(f.s, deep)
	if err := meta.EnsurePath(f.ctx, f.s, "/"); err != nil {
		t.Fatalf("EnsurePath(/): %v", err)
	}

	e := f.path("ephemeral")
	f.create(f.s, e, nil, meta.Ephemeral)
	under := meta.Join(e, "x", "y")
	err := meta.EnsurePath(f.ctx, f.s, under)
	checkErr(t, "EnsurePath under an ephemeral node", err, meta.ErrEphemeralParent, meta.Join(e, "x"))

	bad := f.path("a") + "//b"
	checkErr(t, "EnsurePath of an invalid path", meta.EnsurePath(f.ctx, f.s, bad), meta.ErrInvalidPath, bad)
}
