// Package artifact fetches and verifies content-addressed artifacts
// (firmware images, bundles): an expected size and sha256, a bounded read,
// a context timeout, and errors naming the URL, what was expected and what
// arrived. Nothing is handed to the caller before both checks pass. It
// knows nothing about manifests: callers pass the size and digest.
package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// Want is what an artifact must be.
type Want struct {
	Size   int64
	SHA256 string // hex, either case
}

// Fetcher downloads artifacts. The zero value is usable only with Limit set.
type Fetcher struct {
	// Client is the HTTP client (nil: one with a 30 s response-header timeout).
	Client *http.Client
	// Timeout bounds one whole download (0: 30 min).
	Timeout time.Duration
	// Limit is the largest size accepted; a Want above it is refused
	// before any request is made.
	Limit int64
}

// defaultClient goes direct (no proxy from the environment: artifacts
// come from the coordinator or the manifest's URL as written).
var defaultClient = &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: 30 * time.Second}}

// Bytes downloads url into memory and returns it once size and sha256 match.
func (f Fetcher) Bytes(ctx context.Context, url string, want Want) ([]byte, error) {
	if err := f.checkWant(url, want); err != nil {
		return nil, err
	}
	// One buffer of the expected size (plus the byte that detects a
	// longer body): a firmware image is not copied again on return.
	b := bytes.NewBuffer(make([]byte, 0, want.Size+1))
	if err := f.stream(ctx, url, want, b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// File downloads url into a new file in dir (os.TempDir when "") named by
// pattern (os.CreateTemp) and returns its path once size and sha256 match;
// on any error the file is removed. Tools that take a path and images too
// large for memory go through here.
func (f Fetcher) File(ctx context.Context, url string, want Want, dir, pattern string) (string, error) {
	if err := f.checkWant(url, want); err != nil {
		return "", err
	}
	if dir == "" {
		dir = os.TempDir()
	}
	out, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return "", fmt.Errorf("artifact %s: %w", url, err)
	}
	keep := false
	defer func() {
		if !keep {
			out.Close()
			os.Remove(out.Name())
		}
	}()
	if err := f.stream(ctx, url, want, out); err != nil {
		return "", fmt.Errorf("%w (into %s)", err, out.Name())
	}
	if err := out.Close(); err != nil {
		return "", fmt.Errorf("artifact %s: %w", url, err)
	}
	keep = true
	return out.Name(), nil
}

// Check downloads url and verifies it, keeping nothing.
func (f Fetcher) Check(ctx context.Context, url string, want Want) error {
	if err := f.checkWant(url, want); err != nil {
		return err
	}
	return f.stream(ctx, url, want, io.Discard)
}

func (f Fetcher) checkWant(url string, want Want) error {
	if want.Size <= 0 || (f.Limit > 0 && want.Size > f.Limit) {
		return fmt.Errorf("artifact %s: size %d outside 1..%d bytes", url, want.Size, f.Limit)
	}
	if f.Limit <= 0 {
		return fmt.Errorf("artifact %s: fetcher has no size limit configured", url)
	}
	if _, err := hex.DecodeString(want.SHA256); err != nil || len(want.SHA256) != 2*sha256.Size {
		return fmt.Errorf("artifact %s: expected sha256 %q is not 64 hex digits", url, want.SHA256)
	}
	return nil
}

func (f Fetcher) stream(ctx context.Context, url string, want Want, w io.Writer) error {
	t := f.Timeout
	if t <= 0 {
		t = 30 * time.Minute
	}
	c := f.Client
	if c == nil {
		c = defaultClient
	}
	ctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("artifact %s: %w", url, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("artifact %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("artifact %s: %w", url, &StatusError{Code: resp.StatusCode, Status: resp.Status})
	}
	if err := Verify(resp.Body, want, w); err != nil {
		return fmt.Errorf("artifact %s: %w", url, err)
	}
	return nil
}

// StatusError is a server's answer other than 200 OK (a 404 is an artifact
// the server does not hold).
type StatusError struct {
	Code   int
	Status string // "404 Not Found"
}

func (e *StatusError) Error() string { return "HTTP " + e.Status }

// ErrMismatch is wrapped by every size or digest mismatch.
var ErrMismatch = errors.New("artifact mismatch")

// Verify copies r into w (nil: discard), reading at most one byte more
// than want.Size, and checks size and sha256. A reader that fails midway
// is an error naming how many bytes arrived.
func Verify(r io.Reader, want Want, w io.Writer) error {
	if w == nil {
		w = io.Discard
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(r, want.Size+1))
	if err != nil {
		return fmt.Errorf("read failed after %d of %d bytes: %w", n, want.Size, err)
	}
	switch {
	case n > want.Size:
		return fmt.Errorf("%w: size: expected %d bytes, got more", ErrMismatch, want.Size)
	case n < want.Size:
		return fmt.Errorf("%w: size: expected %d bytes, got %d", ErrMismatch, want.Size, n)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != strings.ToLower(want.SHA256) {
		return fmt.Errorf("%w: sha256 mismatch: expected %s, got %s", ErrMismatch, strings.ToLower(want.SHA256), got)
	}
	return nil
}
