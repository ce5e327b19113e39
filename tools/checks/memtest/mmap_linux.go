package memtest

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// mmapAnon maps n bytes of private anonymous memory outside the Go heap,
// populated up front so the first pattern pass measures RAM, not page faults.
func mmapAnon(n int) ([]byte, func() error, error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap %d bytes: %w", n, err)
	}
	return b, func() error { return unix.Munmap(b) }, nil
}
