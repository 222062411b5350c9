package meta

import (
	"errors"
	"fmt"
)

// Sentinel errors. Stores return them wrapped in a *PathError.
var (
	// ErrNotFound: the node (or, for Create, its parent) does not exist.
	ErrNotFound = errors.New("meta: node does not exist")
	// ErrExists: Create found a node at the path.
	ErrExists = errors.New("meta: node already exists")
	// ErrBadVersion: the node's version is not the expected one.
	ErrBadVersion = errors.New("meta: version mismatch")
	// ErrNotEmpty: Delete of a node that has children.
	ErrNotEmpty = errors.New("meta: node has children")
	// ErrEphemeralParent: Create under an ephemeral node.
	ErrEphemeralParent = errors.New("meta: ephemeral nodes cannot have children")
	// ErrInvalidPath: the path is malformed or too long. Never retried.
	ErrInvalidPath = errors.New("meta: invalid path")
	// ErrTooLarge: the value is over MaxValueSize. Never retried.
	ErrTooLarge = errors.New("meta: value too large")
	// ErrSessionExpired: the session ended while the call was in flight, or
	// the watch was lost with it. Ephemeral nodes of the session are gone.
	ErrSessionExpired = errors.New("meta: session expired")
	// ErrUnavailable: the store could not be reached before the call's
	// context or the store's request timeout ended.
	ErrUnavailable = errors.New("meta: store unavailable")
	// ErrClosed: the Store was closed.
	ErrClosed = errors.New("meta: store closed")
)

// PathError records a failed operation on a path.
type PathError struct {
	Op   string // "get", "create", "set", "delete", "children", "exists"
	Path string
	Err  error
}

func (e *PathError) Error() string { return e.Op + " " + e.Path + ": " + e.Err.Error() }

func (e *PathError) Unwrap() error { return e.Err }

// Errorf returns a *PathError for op and path wrapping err, with an optional
// detail message: Errorf("create", p, ErrNotFound, "parent %s is missing", parent).
func Errorf(op, path string, err error, format string, args ...any) *PathError {
	if format != "" {
		err = fmt.Errorf("%w: %s", err, fmt.Sprintf(format, args...))
	}
	return &PathError{Op: op, Path: path, Err: err}
}
