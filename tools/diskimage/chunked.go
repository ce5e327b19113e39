package diskimage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/cure-oss/cure/tools/chunklist"
)

// verifyWorkers is how many chunks are verified at once: every core, as
// the other stages mostly wait on the network, the decoder or the device.
func verifyWorkers() int { return max(1, runtime.GOMAXPROCS(0)) }

// chunkError is a chunk that failed its digest: the install is refused
// before any of that chunk reaches the decoder.
type chunkError struct{ err error }

func (e *chunkError) Error() string { return e.err.Error() }
func (e *chunkError) Unwrap() error { return e.err }

type verifyJob struct {
	i    int
	b    []byte
	err  error
	done chan struct{}
}

// verifyChunks checks the downloaded chunks (in artifact order on in) on
// verifyWorkers goroutines and passes them to out in the same order, each
// only once its digest matched. At the first mismatch it fails the
// pipeline and passes nothing more: later chunks go back to free.
// verified counts the chunks handed on.
func verifyChunks(list *chunklist.List, in <-chan []byte, out chan<- []byte, free *freeList, fail func(error), verified *atomic.Int64) {
	n := verifyWorkers()
	work := make(chan *verifyJob, n)
	order := make(chan *verifyJob, n+2)
	for range n {
		go func() {
			for j := range work {
				j.err = list.Check(j.i, j.b)
				close(j.done)
			}
		}()
	}
	go func() {
		defer close(work)
		defer close(order)
		i := 0
		for b := range in {
			j := &verifyJob{i: i, b: b, done: make(chan struct{})}
			i++
			order <- j
			work <- j
		}
	}()
	bad := false
	for j := range order {
		<-j.done
		if !bad && j.err != nil {
			bad = true
			fail(&chunkError{err: j.err})
		}
		if bad {
			free.put(j.b)
			continue
		}
		verified.Add(1)
		out <- j.b
	}
}

// fetchList downloads the chunk list at o.ChunksURL, checks it against the
// manifest's pin and binds it to the artifact (its sha256 and size).
func fetchList(ctx context.Context, o Options) (*chunklist.List, error) {
	ctx, cancel := context.WithTimeout(ctx, o.StallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.ChunksURL, nil)
	if err != nil {
		return nil, fmt.Errorf("chunk list %s: %w", o.ChunksURL, err)
	}
	resp, err := o.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("chunk list %s: GET: %w", o.ChunksURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("chunk list %s: GET: expected 200 OK, got %s", o.ChunksURL, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, chunklist.MaxListSize+1))
	if err != nil {
		return nil, fmt.Errorf("chunk list %s: read: %w", o.ChunksURL, err)
	}
	if len(b) > chunklist.MaxListSize {
		return nil, fmt.Errorf("chunk list %s: longer than %d bytes", o.ChunksURL, chunklist.MaxListSize)
	}
	if got := chunklist.SumHex(b); got != o.ChunksSHA256 {
		return nil, fmt.Errorf("chunk list %s: sha256 mismatch: manifest says %s, downloaded %s (%d bytes)", o.ChunksURL, o.ChunksSHA256, got, len(b))
	}
	l, err := chunklist.Parse(b, o.SHA256, o.Size)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.ChunksURL, err)
	}
	return l, nil
}

// validateChunks checks the chunk-list options; both or neither are set.
func (o *Options) validateChunks() error {
	o.ChunksSHA256 = strings.ToLower(strings.TrimSpace(o.ChunksSHA256))
	switch {
	case o.ChunksURL == "" && o.ChunksSHA256 == "":
		if o.Connections > 1 {
			return fmt.Errorf("artifact %s: connections %d: several connections need a chunk list (each range is verified on its own)", o.URL, o.Connections)
		}
		return nil
	case o.ChunksURL == "" || o.ChunksSHA256 == "":
		return errors.New("disk image: chunks url and chunks sha256 go together")
	case len(o.ChunksSHA256) != 64 || strings.Trim(o.ChunksSHA256, "0123456789abcdef") != "":
		return fmt.Errorf("artifact %s: chunks sha256 %q: expected 64 hex digits", o.URL, o.ChunksSHA256)
	}
	return nil
}
