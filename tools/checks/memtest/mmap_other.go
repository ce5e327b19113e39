//go:build !linux

package memtest

// mmapAnon falls back to a heap allocation where there is no mmap: the
// pattern logic is the same, only the memory is the Go heap's.
func mmapAnon(n int) ([]byte, func() error, error) {
	return make([]byte, n), func() error { return nil }, nil
}
