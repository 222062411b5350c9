//go:build !linux

package storage

import (
	"errors"
	"os"
)

// openDirectRead: O_DIRECT reads are only built on Linux.
func openDirectRead(string) (*os.File, error) {
	return nil, errors.New("O_DIRECT reads are only built on Linux")
}

// openDirectWrite: O_DIRECT writes are only built on Linux.
func openDirectWrite(string) (*os.File, error) {
	return nil, errors.New("O_DIRECT writes are only built on Linux")
}
