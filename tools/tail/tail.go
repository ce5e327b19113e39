// Package tail keeps the end of a stream: the last lines a child process
// printed on stderr are what an error message needs, the rest is noise.
package tail

import "sync"

// Buffer is an io.Writer that keeps only the last Max bytes written. It is
// safe for concurrent use (os/exec may copy stderr from a goroutine).
type Buffer struct {
	Max int

	mu sync.Mutex
	b  []byte
}

func (t *Buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.Max; over > 0 {
		// Copy down rather than reslice, so the dropped head is freed.
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

// String returns what is kept.
func (t *Buffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
