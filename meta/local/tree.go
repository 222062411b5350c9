package local

import (
	"fmt"
	"maps"
	"sort"

	"github.com/magnetar-io/magnetar/meta"
)

// node is one node of a tree. Values are immutable once stored: Set
// replaces the slice, so two trees may share it.
type node struct {
	value    []byte
	version  meta.Version
	ctime    int64 // unix nanoseconds
	mtime    int64
	seq      int64  // next sequential-child counter
	owner    uint64 // owning session for ephemeral nodes, 0 for persistent
	children map[string]struct{}
}

func (n *node) stat() meta.Stat {
	return meta.Stat{
		Version:     n.version,
		Created:     unixTime(n.ctime),
		Modified:    unixTime(n.mtime),
		Ephemeral:   n.owner != 0,
		NumChildren: len(n.children),
	}
}

// tree is the pure state of the store: no I/O, no locks, no clock (time
// comes in with each operation). The writer applies operations to its own
// tree and publishes the resulting mutations to the readers' tree after
// they are durable; both trees are always the result of the same sequence.
type tree struct {
	nodes map[string]*node
	// ephemerals indexes ephemeral paths by owning session.
	ephemerals map[uint64]map[string]struct{}
	// dead holds sessions that have ended; their ephemeral creates fail.
	dead map[uint64]struct{}
}

func newTree() *tree {
	t := &tree{
		nodes:      make(map[string]*node),
		ephemerals: make(map[uint64]map[string]struct{}),
		dead:       make(map[uint64]struct{}),
	}
	t.nodes["/"] = &node{children: make(map[string]struct{})}
	return t
}

// clone returns a deep copy sharing only the immutable values.
func (t *tree) clone() *tree {
	c := &tree{
		nodes:      make(map[string]*node, len(t.nodes)),
		ephemerals: make(map[uint64]map[string]struct{}, len(t.ephemerals)),
		dead:       maps.Clone(t.dead),
	}
	for p, n := range t.nodes {
		cn := *n
		cn.children = maps.Clone(n.children)
		c.nodes[p] = &cn
	}
	for s, paths := range t.ephemerals {
		c.ephemerals[s] = maps.Clone(paths)
	}
	return c
}

// mutation is one change to a tree, in the order it was made. Applying the
// same mutations to an equal tree gives an equal tree; the readers' tree
// also derives watch events from them.
type mutation struct {
	kind mutationKind
	path string
	node node // mCreate: the new node (children empty); mSet: value, version, mtime; mSeq: seq
}

type mutationKind uint8

const (
	mCreate mutationKind = iota + 1
	mSet
	mSeq // a parent's sequential counter moved: no event
	mDelete
	mEndSession // node.owner's session ended: refuse its ephemeral creates
)

// opKind is what a client asked for.
type opKind uint8

const (
	opCreate opKind = iota + 1
	opSet
	opDelete
	opEndSession // delete the session's ephemeral nodes and refuse new ones
)

// op is one write request, validated and applied by the writer.
type op struct {
	kind     opKind
	path     string
	value    []byte
	flags    meta.CreateFlags
	expected meta.Version
	session  uint64
}

// result is the outcome of an op.
type result struct {
	path string // created path (sequential names differ from op.path)
	stat meta.Stat
	err  error // a meta sentinel error, wrapped with detail
}

// apply validates o against t and, when it succeeds, changes t and appends
// the mutations it made to muts. On failure t is unchanged.
func (t *tree) apply(o *op, now int64, muts []mutation) (result, []mutation) {
	switch o.kind {
	case opCreate:
		return t.create(o, now, muts)
	case opSet:
		n, ok := t.nodes[o.path]
		if !ok {
			return result{err: meta.ErrNotFound}, muts
		}
		if o.expected != meta.AnyVersion && o.expected != n.version {
			return result{err: fmt.Errorf("%w: expected %d, node is at %d", meta.ErrBadVersion, o.expected, n.version)}, muts
		}
		m := mutation{kind: mSet, path: o.path, node: node{value: o.value, version: n.version + 1, mtime: now}}
		t.mutate(&m)
		return result{path: o.path, stat: t.nodes[o.path].stat()}, append(muts, m)
	case opDelete:
		n, ok := t.nodes[o.path]
		switch {
		case o.path == "/":
			return result{err: fmt.Errorf("%w: the root cannot be deleted", meta.ErrInvalidPath)}, muts
		case !ok:
			return result{err: meta.ErrNotFound}, muts
		case o.expected != meta.AnyVersion && o.expected != n.version:
			return result{err: fmt.Errorf("%w: expected %d, node is at %d", meta.ErrBadVersion, o.expected, n.version)}, muts
		case len(n.children) > 0:
			return result{err: fmt.Errorf("%w: %d children", meta.ErrNotEmpty, len(n.children))}, muts
		}
		m := mutation{kind: mDelete, path: o.path}
		t.mutate(&m)
		return result{path: o.path}, append(muts, m)
	case opEndSession:
		end := mutation{kind: mEndSession, node: node{owner: o.session}}
		t.mutate(&end)
		muts = append(muts, end)
		paths := make([]string, 0, len(t.ephemerals[o.session]))
		for p := range t.ephemerals[o.session] {
			paths = append(paths, p)
		}
		sort.Strings(paths) // deterministic event order
		for _, p := range paths {
			m := mutation{kind: mDelete, path: p}
			t.mutate(&m)
			muts = append(muts, m)
		}
		return result{}, muts
	}
	panic(fmt.Sprintf("local: unknown op kind %d", o.kind))
}

func (t *tree) create(o *op, now int64, muts []mutation) (result, []mutation) {
	if o.path == "/" {
		return result{err: meta.ErrExists}, muts
	}
	parentPath := meta.Parent(o.path)
	parent, ok := t.nodes[parentPath]
	switch {
	case !ok:
		return result{err: fmt.Errorf("%w: parent %s does not exist", meta.ErrNotFound, parentPath)}, muts
	case parent.owner != 0:
		return result{err: fmt.Errorf("%w: parent %s is ephemeral", meta.ErrEphemeralParent, parentPath)}, muts
	}
	ephemeral := o.flags&meta.Ephemeral != 0
	if _, dead := t.dead[o.session]; ephemeral && dead {
		return result{err: meta.ErrSessionExpired}, muts
	}
	path := o.path
	if o.flags&meta.Sequential != 0 {
		path = fmt.Sprintf("%s%010d", o.path, parent.seq)
		m := mutation{kind: mSeq, path: parentPath, node: node{seq: parent.seq + 1}}
		if _, exists := t.nodes[path]; exists {
			// Only possible if a client made a node with a sequential-looking
			// name by hand; the counter still moves, as in ZooKeeper.
			t.mutate(&m)
			return result{err: meta.ErrExists}, append(muts, m)
		}
		t.mutate(&m)
		muts = append(muts, m)
	} else if _, exists := t.nodes[path]; exists {
		return result{err: meta.ErrExists}, muts
	}
	m := mutation{kind: mCreate, path: path, node: node{value: o.value, ctime: now, mtime: now}}
	if ephemeral {
		m.node.owner = o.session
	}
	t.mutate(&m)
	return result{path: path}, append(muts, m)
}

// mutate applies one mutation. The writer validated it; on the readers'
// tree it replays what the writer did.
func (t *tree) mutate(m *mutation) {
	switch m.kind {
	case mCreate:
		n := m.node
		n.children = make(map[string]struct{})
		t.nodes[m.path] = &n
		t.nodes[meta.Parent(m.path)].children[meta.Base(m.path)] = struct{}{}
		if n.owner != 0 {
			if t.ephemerals[n.owner] == nil {
				t.ephemerals[n.owner] = make(map[string]struct{})
			}
			t.ephemerals[n.owner][m.path] = struct{}{}
		}
	case mSet:
		n := t.nodes[m.path]
		n.value, n.version, n.mtime = m.node.value, m.node.version, m.node.mtime
	case mSeq:
		t.nodes[m.path].seq = m.node.seq
	case mEndSession:
		t.dead[m.node.owner] = struct{}{}
	case mDelete:
		n := t.nodes[m.path]
		delete(t.nodes, m.path)
		delete(t.nodes[meta.Parent(m.path)].children, meta.Base(m.path))
		if n.owner != 0 {
			delete(t.ephemerals[n.owner], m.path)
			if len(t.ephemerals[n.owner]) == 0 {
				delete(t.ephemerals, n.owner)
			}
		}
	}
}
