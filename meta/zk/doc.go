// Package zk is the meta.Store on Apache ZooKeeper, built on
// github.com/go-zookeeper/zk.
//
// # Mapping
//
// A meta node is a znode with the world-all ACL. Data versions map one to
// one (ZooKeeper's int32 dataVersion; meta.AnyVersion is ZooKeeper's -1).
// Stat.Created and Stat.Modified are the znode's ctime and mtime (ms),
// Ephemeral is ephemeralOwner != 0. meta.Ephemeral and meta.Sequential are
// ZooKeeper's ephemeral and sequential create modes; a Store is one
// ZooKeeper session, so its ephemeral nodes are deleted by the server when
// the session is closed or expires.
//
// A connect string may end in a chroot ("host:2181,host2:2181/magnetar"):
// Open creates the chroot node (and its parents) if missing and every path
// is relative to it; paths the Store returns (sequential names, Event.Path)
// never include it. Without a chroot, "/" is ZooKeeper's root and its
// "zookeeper" child is visible.
//
// ZooKeeper errors map to the meta sentinels, always inside a
// *meta.PathError naming the caller's path: NoNode → ErrNotFound,
// NodeExists → ErrExists, BadVersion → ErrBadVersion, NotEmpty →
// ErrNotEmpty, NoChildrenForEphemerals → ErrEphemeralParent, SessionExpired
// → ErrSessionExpired. Paths and value sizes are checked before anything is
// sent (ZooKeeper drops the connection on an oversized packet). Deleting
// "/" fails with ErrInvalidPath and creating it with ErrExists, as in
// meta/local.
//
// Session states map as StateHasSession → SessionConnected,
// StateDisconnected → SessionDisconnected, StateExpired → SessionExpired
// (go-zookeeper then opens a new session: SessionConnected again), Close →
// SessionClosed. Repeated disconnection states while reconnecting are
// reported once.
//
// # Watches
//
// Watches are go-zookeeper's, one per call, forwarded to a meta.Event
// channel by a goroutine that ends when the watch fires. go-zookeeper
// re-registers its watches when it reconnects within the same session, so
// a disconnection does not lose them; session expiry does (EventWatchLost
// with meta.ErrSessionExpired), and so does Close (meta.ErrClosed, delivered
// before Close returns). A watch whose call was abandoned (its context ended
// while the request was in flight) stays registered in go-zookeeper until
// it fires, but nobody receives it.
//
// # Contexts and retries
//
// go-zookeeper's calls block and take no context, so each request runs on
// its own goroutine: a call returns as soon as its context ends and the
// request, if already queued, finishes in the background. A call therefore
// returning a context error may still have been applied. Calls whose context
// has no deadline are bounded by Options.RequestTimeout.
//
// While the session is not established, calls wait for it rather than
// queue requests in go-zookeeper, so a call that times out while ZooKeeper
// is unreachable has normally sent nothing (only a request queued in the
// instant the connection broke is sent once it is back). When a request
// fails because the connection was lost (or no server could be reached),
// the call waits for the session and retries, with a short backoff, until
// its context ends; it then fails with meta.ErrUnavailable wrapped together
// with the context's error.
//
// Reads are simply retried (also after session expiry: a read does not
// depend on the session). A write whose request was lost in flight may or
// may not have been applied; the retry resolves that ambiguity as follows:
//
//   - Create that now fails with NodeExists succeeds if the node is ours:
//     for an ephemeral node, its owner is our current session; for a
//     persistent one, it holds our value and is still at version 0. (A
//     concurrent creator of the same persistent node with the same value is
//     indistinguishable from us and loses nothing by being taken for us.)
//   - Set with an expected version that now fails with BadVersion succeeds
//     if the node is at expected+1 and holds our value. Set with AnyVersion
//     is simply repeated (it may bump the version twice).
//   - Delete that now fails with NoNode succeeds.
//   - Sequential Create cannot tell its node from others (ZooKeeper picked
//     the name), so it is simply repeated: a sequential create interrupted
//     by a connection loss may leave one orphan node per lost attempt (an
//     ephemeral orphan goes away with the session).
//
// A write that fails with SessionExpired is not retried: the session it was
// made in is gone, with its ephemeral nodes.
package zk
