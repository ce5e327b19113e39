package diskimage

import (
	"fmt"
	"io"
	"sync"
)

// maxHeldBytes bounds what a holdTarget keeps in memory: its regions are
// two MiB, and an image writes each offset once.
const maxHeldBytes = 4 << 20

// holdTarget keeps the image's boot-critical regions off the disk until
// the download is verified: the first MiB (protective MBR, primary GPT,
// most boot loaders) and the target's last MiB (where firmware looks for
// the backup GPT when the primary is not valid). Without a chunk list the
// sha256 is known only once the whole stream was written; until then
// what reaches the disk has no partition table a firmware could boot
// from, and commit writes the held regions only after the check. Writes
// and zeroings are replayed in the order they came.
type holdTarget struct {
	target
	regions [][2]int64 // [start, end), sorted, disjoint

	mu    sync.Mutex
	held  []op // p copied; nil p: zeros
	bytes int64
}

// newHoldTarget holds the first invalidateBytes of t and, when its size
// is known, its last invalidateBytes (from a 4 KiB boundary).
func newHoldTarget(t target) *holdTarget {
	h := &holdTarget{target: t, regions: [][2]int64{{0, invalidateBytes}}}
	if tail, size, ok := tailRegion(t); ok {
		h.regions = append(h.regions, [2]int64{tail, size})
	}
	return h
}

// tailRegion is the target's last invalidateBytes, starting on a 4 KiB
// boundary past the head; ok is false when the size is unknown or the
// target no larger than the head.
func tailRegion(t target) (start, size int64, ok bool) {
	s, isSized := t.(interface{ Size() (int64, error) })
	if !isSized {
		return 0, 0, false
	}
	size, err := s.Size()
	if err != nil || size <= invalidateBytes {
		return 0, 0, false
	}
	return max(invalidateBytes, (size-invalidateBytes)&^4095), size, true
}

func (h *holdTarget) WriteAt(p []byte, off int64) (int, error) {
	err := h.route(off, int64(len(p)), func(a, b int64) error {
		_, err := h.target.WriteAt(p[a-off:b-off], a)
		return err
	}, func(a, b int64) op {
		return op{p: append([]byte(nil), p[a-off:b-off]...), off: a, n: b - a}
	})
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

func (h *holdTarget) ZeroRange(off, n int64) error {
	return h.route(off, n, func(a, b int64) error { return h.target.ZeroRange(a, b-a) },
		func(a, b int64) op { return op{off: a, n: b - a} })
}

// route passes the parts of [off, off+n) outside the held regions to
// pass and keeps the parts inside as hold makes them.
func (h *holdTarget) route(off, n int64, pass func(a, b int64) error, hold func(a, b int64) op) error {
	cur, end := off, off+n
	for _, r := range h.regions {
		if cur >= end {
			break
		}
		if r[1] <= cur || r[0] >= end {
			continue
		}
		if cur < r[0] {
			if err := pass(cur, r[0]); err != nil {
				return err
			}
			cur = r[0]
		}
		stop := min(end, r[1])
		if err := h.keep(hold(cur, stop)); err != nil {
			return err
		}
		cur = stop
	}
	if cur < end {
		return pass(cur, end)
	}
	return nil
}

func (h *holdTarget) keep(o op) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.bytes += int64(len(o.p)); h.bytes > maxHeldBytes {
		return fmt.Errorf("more than %d bytes written to the held start and end of the target: an image writes each offset once", maxHeldBytes)
	}
	h.held = append(h.held, o)
	return nil
}

// commit writes the held regions, in the order they came, once the
// download is verified.
func (h *holdTarget) commit() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, o := range h.held {
		if o.p == nil {
			if err := h.target.ZeroRange(o.off, o.n); err != nil {
				return &writeError{off: o.off, err: err}
			}
			continue
		}
		buf := alignedBuf(len(o.p), 4096)
		copy(buf, o.p)
		if _, err := h.target.WriteAt(buf, o.off); err != nil {
			return &writeError{off: o.off, err: err}
		}
	}
	h.held, h.bytes = nil, 0
	return nil
}

// invalidate zeroes the start and the end of the target (both GPT
// headers: with only the primary gone, firmware boots from the backup at
// the disk's end) so that a failed image cannot boot.
func invalidate(t target) error {
	if _, err := t.WriteAt(alignedBuf(invalidateBytes, 4096), 0); err != nil {
		return fmt.Errorf("zero the first %d bytes: %w", invalidateBytes, err)
	}
	if start, size, ok := tailRegion(t); ok {
		if _, err := t.WriteAt(alignedBuf(int(size-start), 4096), start); err != nil {
			return fmt.Errorf("zero bytes %d to %d (the backup GPT): %w", start, size, err)
		}
	}
	return t.Sync()
}

// Size is the target's size in bytes: the device's, or the file's now.
func (t *fileTarget) Size() (int64, error) {
	if t.block {
		return t.f.Seek(0, io.SeekEnd)
	}
	fi, err := t.f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}
