package storage

import (
	"os"
	"syscall"
)

// openDirectRead opens path for reading with O_DIRECT.
func openDirectRead(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
}

// openDirectWrite opens path for writing with O_DIRECT.
func openDirectWrite(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|syscall.O_DIRECT, 0)
}
