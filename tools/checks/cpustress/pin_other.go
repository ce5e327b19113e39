//go:build !linux

package cpustress

import "errors"

// pinThread cannot bind threads here; workers run unpinned.
func pinThread(int) error { return errors.ErrUnsupported }
