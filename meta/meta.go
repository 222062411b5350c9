// Package meta is the metadata store that bookies, ledgers and brokers
// coordinate through: a tree of versioned nodes with compare-and-set,
// ephemeral nodes bound to a session, sequential names and one-shot watches.
//
// Two implementations pass the same conformance suite (meta/metatest):
// meta/zk on Apache ZooKeeper for clusters, and meta/local, an embedded,
// crash-safe store in the data directory for a single process.
//
// # Model
//
// A node has a path ("/a/b/c"), a value of at most MaxValueSize bytes and a
// Stat. Its data version starts at 0 and grows by one on every Set. Set and
// Delete take the version the caller last saw (or AnyVersion) and fail with
// ErrBadVersion when the node has moved on: that is the compare-and-set all
// coordination here is built on. A node's parent must exist before it is
// created (EnsurePath creates missing parents).
//
// Ephemeral nodes belong to the session of the Store that created them and
// are deleted when that session ends: Close, expiry, or (for meta/local) the
// process ending. Ephemeral nodes cannot have children.
//
// # Watches
//
// GetW, ExistsW and ChildrenW register a one-shot watch atomically with the
// read. The returned channel receives exactly one Event and is then closed.
// An event says that something changed after the read, not what it changed
// to: read again (and re-arm) to see the new state. EventWatchLost (with
// Err set to ErrSessionExpired or ErrClosed) means the watch will never fire
// and the caller must re-read.
//
// # Errors
//
// Every error from a Store is a *PathError naming the operation and path,
// wrapping one of the sentinel errors below (test with errors.Is), a context
// error, or an I/O error. Values and slices returned by a Store belong to the
// caller.
package meta

import (
	"context"
	"time"
)

// Version is a node's data version. It is 0 when the node is created and
// increases by one with every Set.
type Version int64

// AnyVersion makes Set and Delete unconditional.
const AnyVersion Version = -1

// Limits shared by every implementation; a request over them fails with
// ErrTooLarge or ErrInvalidPath before anything is sent or stored.
const (
	// MaxValueSize is the largest node value. ZooKeeper's default request
	// limit (jute.maxbuffer) is 1 MiB including the path and framing; this
	// leaves room for both.
	MaxValueSize = 1_000_000
	// MaxPathLength is the longest path, in bytes.
	MaxPathLength = 4096
)

// Stat describes a node.
type Stat struct {
	Version     Version   // data version
	Created     time.Time // when the node was created
	Modified    time.Time // when its value was last set
	Ephemeral   bool      // owned by a session and deleted with it
	NumChildren int       // number of children at the time of the read
}

// CreateFlags select the kind of node Create makes.
type CreateFlags uint8

const (
	// Ephemeral nodes are deleted when the creating session ends.
	Ephemeral CreateFlags = 1 << iota
	// Sequential appends a ten-digit, zero-padded counter to the last path
	// element. The counter belongs to the parent and increases with every
	// sequential create under it, so names sort in creation order.
	Sequential
)

// EventType says what a watch saw.
type EventType int

const (
	EventCreated         EventType = iota + 1 // the node was created (ExistsW on a missing node)
	EventDeleted                              // the node was deleted
	EventDataChanged                          // the node's value was set
	EventChildrenChanged                      // a child was created or deleted (ChildrenW)
	EventWatchLost                            // the watch will never fire; Err says why
)

func (t EventType) String() string {
	switch t {
	case EventCreated:
		return "created"
	case EventDeleted:
		return "deleted"
	case EventDataChanged:
		return "data-changed"
	case EventChildrenChanged:
		return "children-changed"
	case EventWatchLost:
		return "watch-lost"
	}
	return "unknown"
}

// Event is delivered once on a watch channel.
type Event struct {
	Type EventType
	Path string
	Err  error // set for EventWatchLost: ErrSessionExpired or ErrClosed
}

// SessionState is the state of a Store's session.
type SessionState int

const (
	// SessionConnected: the session is established (or re-established after
	// a disconnection, with its ephemeral nodes and watches intact).
	SessionConnected SessionState = iota + 1
	// SessionDisconnected: the connection is lost; the session may still be
	// alive on the server. Operations wait and retry until their context ends.
	SessionDisconnected
	// SessionExpired: the session is gone and with it every ephemeral node
	// it owned and every watch. The Store goes on with a new session; owners
	// of ephemeral nodes must re-create them.
	SessionExpired
	// SessionClosed: Close was called. No further events follow.
	SessionClosed
)

func (s SessionState) String() string {
	switch s {
	case SessionConnected:
		return "connected"
	case SessionDisconnected:
		return "disconnected"
	case SessionExpired:
		return "expired"
	case SessionClosed:
		return "closed"
	}
	return "unknown"
}

// SessionEvent reports a change of session state.
type SessionEvent struct {
	State SessionState
}

// Store is the metadata store. Implementations are safe for concurrent use.
//
// Contexts bound how long a call waits, including while the store is
// disconnected and retrying; a call whose context ends returns the context's
// error (wrapped in a *PathError).
type Store interface {
	// Get returns a node's value and stat. ErrNotFound if there is no node.
	Get(ctx context.Context, path string) ([]byte, Stat, error)
	// GetW is Get plus a watch that fires on EventDataChanged or EventDeleted.
	// No watch is set when the node does not exist.
	GetW(ctx context.Context, path string) ([]byte, Stat, <-chan Event, error)
	// Exists reports whether a node exists, with its stat when it does.
	Exists(ctx context.Context, path string) (Stat, bool, error)
	// ExistsW is Exists plus a watch: EventCreated if the node is missing,
	// EventDataChanged or EventDeleted if it exists.
	ExistsW(ctx context.Context, path string) (Stat, bool, <-chan Event, error)
	// Children returns the names (not paths) of a node's children, sorted.
	// ErrNotFound if there is no node.
	Children(ctx context.Context, path string) ([]string, error)
	// ChildrenW is Children plus a watch that fires on EventChildrenChanged
	// or EventDeleted.
	ChildrenW(ctx context.Context, path string) ([]string, <-chan Event, error)

	// Create makes a node and returns its path (which differs from path for
	// Sequential nodes). ErrExists if it exists, ErrNotFound if its parent
	// does not, ErrEphemeralParent if its parent is ephemeral.
	Create(ctx context.Context, path string, value []byte, flags CreateFlags) (string, error)
	// Set replaces a node's value if its version is expected (or expected is
	// AnyVersion) and returns the new stat. ErrBadVersion otherwise.
	Set(ctx context.Context, path string, value []byte, expected Version) (Stat, error)
	// Delete removes a node if its version is expected (or AnyVersion).
	// ErrNotEmpty if it has children, ErrBadVersion on a version mismatch.
	Delete(ctx context.Context, path string, expected Version) error

	// SessionEvents subscribes to session state changes. Events arrive in
	// order and none is dropped; cancel ends the subscription and closes
	// the channel.
	SessionEvents() (events <-chan SessionEvent, cancel func())

	// Close ends the session (deleting its ephemeral nodes), fires
	// EventWatchLost on every pending watch and releases resources. Calls
	// after Close fail with ErrClosed.
	Close() error
}
