package journal

import (
	"os"
	"syscall"
)

// openDirect opens path for writing with O_DIRECT.
func openDirect(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|syscall.O_DIRECT, 0)
}
