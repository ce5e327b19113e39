//go:build !linux

package storage

import (
	"errors"
	"fmt"
)

// OpenDirect needs Linux's O_DIRECT; elsewhere the check cannot measure
// the device rather than a cache, so it refuses.
func OpenDirect(path string, write bool) (File, error) {
	return nil, fmt.Errorf("open %s with O_DIRECT: %w", path, errors.ErrUnsupported)
}
