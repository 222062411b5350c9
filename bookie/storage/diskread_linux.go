package storage

import (
	"os"
	"syscall"
)

// openDirectRead opens path for reading with O_DIRECT.
func openDirectRead(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
}
