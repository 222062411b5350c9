//go:build !linux

package main

import (
	"context"
	"time"
)

// measureDirectWrites: O_DIRECT is measured on Linux only.
func measureDirectWrites(context.Context, string, int, time.Duration) (*syncedWrites, error) {
	return nil, errDirectUnsupported
}

// measureTwiceWrites: O_DIRECT is measured on Linux only.
func measureTwiceWrites(context.Context, string, int, time.Duration) (*syncedWrites, error) {
	return nil, errDirectUnsupported
}
