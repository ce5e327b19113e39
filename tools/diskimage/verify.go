package diskimage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Verify reads the first length bytes of target back and compares their
// sha256 with rawSHA256 (Result.RawSHA256 of the write). On block devices
// the page cache is dropped first so the medium itself is read.
func Verify(ctx context.Context, target string, length int64, rawSHA256 string) error {
	want := strings.ToLower(strings.TrimSpace(rawSHA256))
	if b, err := hex.DecodeString(want); err != nil || len(b) != sha256.Size {
		return fmt.Errorf("verify %s: sha256 %q: expected 64 hex digits", target, rawSHA256)
	}
	if length <= 0 {
		return fmt.Errorf("verify %s: length %d: expected the number of bytes written (> 0)", target, length)
	}
	block, err := kind(target)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	f, err := os.Open(target)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	defer f.Close()
	if block {
		if err := dropCache(f); err != nil {
			return fmt.Errorf("verify %s: drop page cache (BLKFLSBUF): %w", target, err)
		}
	}
	h := sha256.New()
	buf := make([]byte, defaultBlockSize)
	var done int64
	for done < length {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("verify %s: stopped after %d of %d bytes: %w", target, done, length, err)
		}
		n, err := io.ReadFull(f, buf[:min(int64(len(buf)), length-done)])
		h.Write(buf[:n])
		done += int64(n)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("verify %s: short read: got %d of %d bytes", target, done, length)
		}
		if err != nil {
			return fmt.Errorf("verify %s: read at offset %d: %w", target, done, err)
		}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("verify %s: sha256 mismatch over %d bytes: expected %s, read back %s", target, length, want, got)
	}
	return nil
}
