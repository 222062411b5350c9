//go:build !linux

package journal

import (
	"errors"
	"os"
)

// openDirect: O_DIRECT is used on Linux only.
func openDirect(string) (*os.File, error) {
	return nil, errors.ErrUnsupported
}
