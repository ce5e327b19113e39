package diskimage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// fetcher is the download as one io.Reader that survives dropped
// connections: when the body ends early or fails, it asks again with
// "Range: bytes=N-" (and If-Range with the first response's ETag, so a
// changed artifact is never spliced onto the old one), a bounded number of
// times. It resumes only when the first response advertised
// "Accept-Ranges: bytes". Each attempt has its own stall watchdog.
type fetcher struct {
	ctx     context.Context
	client  *http.Client
	url     string
	size    int64
	stall   time.Duration
	retries int
	wait    time.Duration

	body    io.ReadCloser
	actx    context.Context // the current attempt's, cancelled by its watchdog
	cancel  context.CancelCauseFunc
	dog     *time.Timer
	off     int64 // bytes delivered to the caller
	etag    string
	ranges  bool
	resumes int
	pending error // an error that arrived with data, reported next Read
}

var errStall = errors.New("stalled")

// open issues the first GET, or a ranged one from f.off.
func (f *fetcher) open() error {
	actx, cancel := context.WithCancelCause(f.ctx)
	req, err := http.NewRequestWithContext(actx, http.MethodGet, f.url, nil)
	if err != nil {
		cancel(nil)
		return fmt.Errorf("artifact %s: %w", f.url, err)
	}
	first := f.off == 0 && f.resumes == 0
	if !first {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", f.off))
		if f.etag != "" && !strings.HasPrefix(f.etag, "W/") {
			req.Header.Set("If-Range", f.etag)
		}
	}
	dog := time.AfterFunc(f.stall, func() { cancel(fmt.Errorf("%w: no data received for %s", errStall, f.stall)) })
	resp, err := f.client.Do(req)
	if err != nil {
		dog.Stop()
		cancel(nil)
		if c := context.Cause(actx); errors.Is(c, errStall) {
			err = c
		}
		return fmt.Errorf("artifact %s: GET: %w", f.url, err)
	}
	fail := func(e error) error {
		dog.Stop()
		resp.Body.Close()
		cancel(nil)
		return e
	}
	if first {
		if resp.StatusCode != http.StatusOK {
			snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
			return fail(fmt.Errorf("artifact %s: GET: expected 200 OK, got %s: %q", f.url, resp.Status, strings.TrimSpace(string(snippet))))
		}
		// A server that announces the wrong length is caught before the
		// disk is touched.
		if resp.ContentLength >= 0 && resp.ContentLength != f.size {
			return fail(fmt.Errorf("artifact %s: size mismatch: manifest says %d bytes, server sends Content-Length %d", f.url, f.size, resp.ContentLength))
		}
		f.ranges = resp.Header.Get("Accept-Ranges") == "bytes"
		f.etag = resp.Header.Get("ETag")
	} else {
		if resp.StatusCode != http.StatusPartialContent {
			return fail(fmt.Errorf("artifact %s: resume at byte %d: expected 206 Partial Content, got %s (artifact changed since the first request, or Range unsupported)", f.url, f.off, resp.Status))
		}
		want := fmt.Sprintf("bytes %d-%d/%d", f.off, f.size-1, f.size)
		if cr := resp.Header.Get("Content-Range"); cr != want {
			return fail(fmt.Errorf("artifact %s: resume: expected Content-Range %q, got %q", f.url, want, cr))
		}
	}
	f.body, f.actx, f.cancel, f.dog = resp.Body, actx, cancel, dog
	return nil
}

func (f *fetcher) closeBody() {
	if f.body != nil {
		f.dog.Stop()
		f.body.Close()
		f.cancel(nil)
		f.body = nil
	}
}

func (f *fetcher) Close() { f.closeBody() }

func (f *fetcher) resumed() int { return f.resumes }

func (f *fetcher) Read(p []byte) (int, error) {
	for {
		if f.pending == nil && f.body == nil {
			if err := f.open(); err != nil {
				return 0, err
			}
		}
		var n int
		err := f.pending
		f.pending = nil
		if err == nil {
			n, err = f.body.Read(p)
			if n > 0 {
				f.off += int64(n)
				f.dog.Reset(f.stall)
				if err != nil && err != io.EOF {
					f.pending = err
				}
				if err == io.EOF && f.off < f.size {
					f.pending = io.ErrUnexpectedEOF
				}
				return n, nil
			}
		}
		if err == nil {
			continue
		}
		if err == io.EOF && f.off >= f.size {
			return 0, io.EOF // over-long bodies are the caller's LimitReader's business
		}
		// The body ended early or failed.
		// The watchdog cancels the attempt with errStall, which the body
		// reports only as "context canceled".
		if f.body != nil {
			if c := context.Cause(f.actx); errors.Is(c, errStall) {
				err = c
			}
		}
		f.closeBody()
		if !f.ranges || f.resumes >= f.retries || f.ctx.Err() != nil || f.off >= f.size {
			return 0, err
		}
		f.resumes++
		slog.Warn("download interrupted; resuming with a Range request", "url", f.url, "offset", f.off, "size", f.size,
			"attempt", f.resumes, "of", f.retries, "err", err)
		select {
		case <-f.ctx.Done():
			return 0, err
		case <-time.After(f.wait * time.Duration(1<<min(f.resumes-1, 5))):
		}
	}
}

// rangeReader is an io.ReaderAt over HTTP Range requests, for the few
// random reads a qcow2 image's tables need before the stream starts.
type rangeReader struct {
	ctx     context.Context
	client  *http.Client
	url     string
	size    int64
	timeout time.Duration
}

func (r *rangeReader) ReadAt(p []byte, off int64) (int, error) {
	if off >= r.size {
		return 0, io.EOF
	}
	want := min(int64(len(p)), r.size-off)
	ctx, cancel := context.WithTimeout(r.ctx, r.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+want-1))
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("GET bytes %d-%d: %w", off, off+want-1, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		return 0, fmt.Errorf("GET bytes %d-%d: expected 206 Partial Content, got %s (qcow2 images need a server with Range support)", off, off+want-1, resp.Status)
	}
	if cr, exp := resp.Header.Get("Content-Range"), fmt.Sprintf("bytes %d-%d/%d", off, off+want-1, r.size); cr != exp {
		var a, b, total int64
		if _, err := fmt.Sscanf(cr, "bytes %d-%d/%d", &a, &b, &total); err == nil && total != r.size {
			return 0, fmt.Errorf("size mismatch: manifest says %d bytes, server has %d (Content-Range %q)", r.size, total, cr)
		}
		return 0, fmt.Errorf("GET bytes %d-%d: expected Content-Range %q, got %q", off, off+want-1, exp, cr)
	}
	n, err := io.ReadFull(resp.Body, p[:want])
	if err != nil {
		return n, fmt.Errorf("GET bytes %d-%d: got %d bytes: %w", off, off+want-1, n, err)
	}
	if want < int64(len(p)) {
		return n, io.EOF
	}
	return n, nil
}
