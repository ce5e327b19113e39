package diskimage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxConnections bounds Options.Connections.
const maxConnections = 16

// stripeSize is what one Range request of a striped download asks for.
// Each connection holds one stripe's buffers (plus one chunk), so memory
// is Connections × (stripeSize + chunk) whatever the image size.
const stripeSize = 4 << 20

// errNoRanges is a server that ignores Range: the download falls back to
// one connection.
var errNoRanges = errors.New("server does not answer Range requests")

// striper downloads the artifact over several connections: the image is
// cut into stripes, connection w fetches stripes w, w+k, w+2k, ... each
// with one Range request, into buffers of its own, and Read hands the
// bytes on in artifact order. Per-connection buffers mean a connection
// running ahead waits for the reader rather than taking buffers that the
// stripe the reader needs next would starve for. A dropped or short
// response resumes from its last byte (Range plus If-Range with the
// probe's ETag), a bounded number of times per connection.
type striper struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	o      Options
	chunk  int64
	stripe int64
	etag   string
	lanes  []*lane
	wg     sync.WaitGroup

	off     int64 // bytes handed to the reader
	cur     []byte
	curLane *lane
	rest    []byte
	resumes atomic.Int32
}

type lane struct {
	ch   chan []byte // filled buffers, in order
	free chan []byte
	err  error // why ch was closed early; read after ch is closed
}

func newStriper(ctx context.Context, o Options, chunk int64) *striper {
	ctx, cancel := context.WithCancelCause(ctx)
	stripe := max(chunk, stripeSize/chunk*chunk)
	return &striper{ctx: ctx, cancel: cancel, o: o, chunk: chunk, stripe: stripe}
}

// open probes the server (one byte, for the size, ETag and Range
// support), then starts the connections.
func (s *striper) open() error {
	resp, err := s.get(0, 0)
	if err != nil {
		return err
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
		return fmt.Errorf("artifact %s: %w (answered %s)", s.o.URL, errNoRanges, resp.Status)
	case resp.StatusCode != http.StatusPartialContent:
		return fmt.Errorf("artifact %s: GET bytes 0-0: expected 206 Partial Content, got %s", s.o.URL, resp.Status)
	}
	var a, b, total int64
	if _, err := fmt.Sscanf(resp.Header.Get("Content-Range"), "bytes %d-%d/%d", &a, &b, &total); err != nil || a != 0 || b != 0 {
		return fmt.Errorf("artifact %s: GET bytes 0-0: Content-Range %q", s.o.URL, resp.Header.Get("Content-Range"))
	}
	if total != s.o.Size {
		return fmt.Errorf("artifact %s: size mismatch: manifest says %d bytes, server has %d (Content-Range)", s.o.URL, s.o.Size, total)
	}
	if e := resp.Header.Get("ETag"); !strings.HasPrefix(e, "W/") {
		s.etag = e
	}
	stripes := (s.o.Size + s.stripe - 1) / s.stripe
	k := int(min(int64(s.o.Connections), stripes))
	per := int(s.stripe/s.chunk) + 1
	for w := range k {
		l := &lane{ch: make(chan []byte, per), free: make(chan []byte, per)}
		slab := hugeBuf(per * int(s.chunk))
		for i := range per {
			l.free <- slab[i*int(s.chunk) : (i+1)*int(s.chunk) : (i+1)*int(s.chunk)]
		}
		s.lanes = append(s.lanes, l)
		s.wg.Add(1)
		go s.run(w, k, l)
	}
	return nil
}

// get issues GET with Range bytes=from-to.
func (s *striper) get(from, to int64) (*http.Response, error) {
	req, err := http.NewRequestWithContext(s.ctx, http.MethodGet, s.o.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("artifact %s: %w", s.o.URL, err)
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", from, to))
	if s.etag != "" {
		req.Header.Set("If-Range", s.etag)
	}
	resp, err := s.o.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("artifact %s: GET bytes %d-%d: %w", s.o.URL, from, to, err)
	}
	return resp, nil
}

// run is connection w: its stripes, in order, into its lane.
func (s *striper) run(w, k int, l *lane) {
	defer s.wg.Done()
	defer close(l.ch)
	retries := 0
	for from := int64(w) * s.stripe; from < s.o.Size; from += int64(k) * s.stripe {
		to := min(from+s.stripe, s.o.Size)
		if err := s.fetchStripe(l, from, to, &retries); err != nil {
			l.err = err
			return
		}
	}
}

// fetchStripe fills the lane with [from, to), one chunk-sized buffer at a
// time, resuming a dropped response where it stopped.
func (s *striper) fetchStripe(l *lane, from, to int64, retries *int) error {
	var body io.ReadCloser
	var dog *time.Timer
	var actx context.Context
	var acancel context.CancelCauseFunc
	closeBody := func() {
		if body != nil {
			dog.Stop()
			body.Close()
			acancel(nil)
			body = nil
		}
	}
	defer closeBody()
	for bs := from; bs < to; bs += s.chunk {
		var b []byte
		select {
		case b = <-l.free:
		case <-s.ctx.Done():
			return context.Cause(s.ctx)
		}
		b = b[:min(s.chunk, to-bs)]
		filled := 0
		for filled < len(b) {
			if body == nil {
				pos := bs + int64(filled)
				actx, acancel = context.WithCancelCause(s.ctx)
				req, _ := http.NewRequestWithContext(actx, http.MethodGet, s.o.URL, nil)
				req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", pos, to-1))
				if s.etag != "" {
					req.Header.Set("If-Range", s.etag)
				}
				dog = time.AfterFunc(s.o.StallTimeout, func() { acancel(fmt.Errorf("%w: no data received for %s", errStall, s.o.StallTimeout)) })
				resp, err := s.o.Client.Do(req)
				if err == nil {
					want := fmt.Sprintf("bytes %d-%d/%d", pos, to-1, s.o.Size)
					switch {
					case resp.StatusCode != http.StatusPartialContent:
						err = fmt.Errorf("expected 206 Partial Content, got %s (artifact changed since the first request, or Range unsupported)", resp.Status)
					case resp.Header.Get("Content-Range") != want:
						err = fmt.Errorf("expected Content-Range %q, got %q", want, resp.Header.Get("Content-Range"))
					}
					if err != nil {
						resp.Body.Close()
						dog.Stop()
						acancel(nil)
						// A changed artifact is not retried.
						return fmt.Errorf("artifact %s: GET bytes %d-%d: %w", s.o.URL, pos, to-1, err)
					}
					body = resp.Body
				} else {
					dog.Stop()
					acancel(nil)
					if c := context.Cause(actx); errors.Is(c, errStall) {
						err = c
					}
					if err = s.retry(retries, pos, fmt.Errorf("artifact %s: GET bytes %d-%d: %w", s.o.URL, pos, to-1, err)); err != nil {
						return err
					}
					continue
				}
			}
			n, err := body.Read(b[filled:])
			filled += n
			if n > 0 {
				dog.Reset(s.o.StallTimeout)
			}
			if err == io.EOF && bs+int64(filled) == to {
				break
			}
			if err != nil {
				if c := context.Cause(actx); errors.Is(c, errStall) {
					err = c
				} else if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				closeBody()
				if err = s.retry(retries, bs+int64(filled), fmt.Errorf("artifact %s: range ending at byte %d: %w", s.o.URL, to-1, err)); err != nil {
					return err
				}
			}
		}
		select {
		case l.ch <- b:
		case <-s.ctx.Done():
			return context.Cause(s.ctx)
		}
	}
	return nil
}

// retry waits before a connection's next attempt, or says it has had
// its share (Options.Retries per connection).
func (s *striper) retry(retries *int, pos int64, err error) error {
	if *retries >= s.o.Retries || s.ctx.Err() != nil {
		return err
	}
	*retries++
	s.resumes.Add(1)
	slog.Warn("download interrupted; resuming with a Range request", "url", s.o.URL, "offset", pos, "size", s.o.Size,
		"attempt", *retries, "of", s.o.Retries, "err", err)
	select {
	case <-s.ctx.Done():
		return err
	case <-time.After(s.o.RetryWait * time.Duration(1<<min(*retries-1, 5))):
		return nil
	}
}

func (s *striper) Read(p []byte) (int, error) {
	for len(s.rest) == 0 {
		if s.cur != nil {
			s.curLane.free <- s.cur[:cap(s.cur)]
			s.cur = nil
		}
		if s.off >= s.o.Size {
			return 0, io.EOF
		}
		l := s.lanes[(s.off/s.stripe)%int64(len(s.lanes))]
		b, ok := <-l.ch
		if !ok {
			if l.err != nil {
				return 0, l.err
			}
			return 0, io.ErrUnexpectedEOF
		}
		s.cur, s.curLane, s.rest = b, l, b
	}
	n := copy(p, s.rest)
	s.rest = s.rest[n:]
	s.off += int64(n)
	return n, nil
}

// Close stops the connections and waits for them.
func (s *striper) Close() {
	s.cancel(errStopped)
	for _, l := range s.lanes {
		go func() {
			for range l.ch {
			}
		}()
	}
	s.wg.Wait()
}

func (s *striper) resumed() int { return int(s.resumes.Load()) }
