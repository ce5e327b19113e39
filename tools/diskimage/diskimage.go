// Package diskimage streams an OS image from HTTP onto a disk: download,
// hash, decompress and write in one pass, then fsync and have the kernel
// re-read the partition table. Size and sha256 of the download are
// mandatory; Verify reads the written range back.
package diskimage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// Formats accepted in Options.Format.
const (
	FormatRaw  = "raw"
	FormatGzip = "raw.gz"
	FormatZstd = "raw.zst"
	FormatXz   = "raw.xz"
)

const (
	defaultBlockSize    = 4 << 20
	defaultStallTimeout = 2 * time.Minute
	// invalidateBytes is how much of the target's start is zeroed after a
	// failed write: the protective MBR, primary GPT and most boot loaders.
	invalidateBytes = 1 << 20
)

// Options describe one image write.
type Options struct {
	URL    string
	SHA256 string // of the downloaded (possibly compressed) artifact, hex
	Size   int64  // of the downloaded artifact, bytes
	Format string // raw | raw.gz | raw.zst | raw.xz
	Target string // block device or regular file; must already exist
	Client *http.Client
	// Progress, if set, is called after every block with the total number
	// of decompressed bytes written so far.
	Progress  func(written int64)
	BlockSize int // write size, default 4 MiB
	// StallTimeout aborts the download when no byte arrives for this long
	// (default 2 minutes). The whole transfer has no deadline of its own:
	// a multi-GiB image on a slow link is legitimate, a silent peer is not.
	StallTimeout time.Duration
}

// Result describes a completed write.
type Result struct {
	DownloadedBytes int64
	WrittenBytes    int64
	SHA256          string // of the download
	RawSHA256       string // of the decompressed bytes written
	Duration        time.Duration
}

// Write streams o.URL onto o.Target.
//
// The sha256 of the download is only known once the stream has ended, by
// which time the target has been written. That is accepted: on any error
// the caller leaves the boot override alone, and Write additionally zeroes
// the first MiB of the target so a partial or unverified image cannot boot.
func Write(ctx context.Context, o Options) (*Result, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	t, err := openTarget(o.Target)
	if err != nil {
		return nil, err
	}
	res, err := write(ctx, o, t)
	if cerr := t.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close %s: %w", o.Target, cerr)
	}
	return res, err
}

func (o *Options) validate() error {
	if o.URL == "" {
		return errors.New("disk image: url is empty")
	}
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("disk image: url %q: expected an absolute http(s) URL", o.URL)
	}
	sum := strings.ToLower(strings.TrimSpace(o.SHA256))
	if b, err := hex.DecodeString(sum); err != nil || len(b) != sha256.Size {
		return fmt.Errorf("artifact %s: sha256 %q: expected 64 hex digits", o.URL, o.SHA256)
	}
	o.SHA256 = sum
	if o.Size <= 0 {
		return fmt.Errorf("artifact %s: size %d: expected the artifact's byte count (> 0)", o.URL, o.Size)
	}
	switch o.Format {
	case FormatRaw, FormatGzip, FormatZstd, FormatXz:
	default:
		return fmt.Errorf("artifact %s: format %q: expected one of raw, raw.gz, raw.zst, raw.xz", o.URL, o.Format)
	}
	if o.Target == "" {
		return fmt.Errorf("artifact %s: target is empty", o.URL)
	}
	if o.BlockSize == 0 {
		o.BlockSize = defaultBlockSize
	}
	if o.BlockSize < 4096 || o.BlockSize%4096 != 0 {
		return fmt.Errorf("disk image: block size %d: expected a positive multiple of 4096", o.BlockSize)
	}
	if o.StallTimeout == 0 {
		o.StallTimeout = defaultStallTimeout
	}
	if o.Client == nil {
		o.Client = defaultClient()
	}
	return nil
}

// defaultClient bounds connection set-up and the wait for headers; the
// body is bounded by the stall watchdog instead of a total deadline.
func defaultClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 15 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		// Compressed images must arrive byte-exact for the sha256.
		DisableCompression: true,
	}}
}

// write does the streaming once the target is open; t is the device seam.
func write(ctx context.Context, o Options, t target) (*Result, error) {
	start := time.Now()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("artifact %s: %w", o.URL, err)
	}
	resp, err := o.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("artifact %s: GET: %w", o.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		return nil, fmt.Errorf("artifact %s: GET: expected 200 OK, got %s: %q", o.URL, resp.Status, strings.TrimSpace(string(snippet)))
	}
	// A server that announces the wrong length is caught before the disk is
	// touched.
	if resp.ContentLength >= 0 && resp.ContentLength != o.Size {
		return nil, fmt.Errorf("artifact %s: size mismatch: manifest says %d bytes, server sends Content-Length %d", o.URL, o.Size, resp.ContentLength)
	}

	// Read at most Size+1 bytes: enough to notice an over-long download
	// without trusting the server to end it.
	dl := &downloadReader{r: io.LimitReader(resp.Body, o.Size+1), h: sha256.New()}
	watchdog := time.AfterFunc(o.StallTimeout, func() {
		cancel(fmt.Errorf("no data received for %s", o.StallTimeout))
	})
	defer watchdog.Stop()
	dl.onRead = func() { watchdog.Reset(o.StallTimeout) }

	written, rawSum, streamErr := stream(dl, o, t)
	if streamErr == nil {
		// Pull anything after the compressed stream's end so the count and
		// hash cover the whole download.
		_, _ = io.Copy(io.Discard, dl)
	}
	res := &Result{
		DownloadedBytes: dl.n,
		WrittenBytes:    written,
		SHA256:          hex.EncodeToString(dl.h.Sum(nil)),
		RawSHA256:       rawSum,
	}
	if err := o.check(ctx, dl, res, streamErr); err != nil {
		if written > 0 {
			if ierr := invalidate(t); ierr != nil {
				err = errors.Join(err, fmt.Errorf("zero start of %s after failed write: %w", o.Target, ierr))
			} else {
				slog.Warn("disk image write failed; zeroed the start of the target", "target", o.Target, "written", written)
			}
		}
		return res, err
	}
	if err := t.Sync(); err != nil {
		return res, fmt.Errorf("fsync %s after %d bytes: %w", o.Target, written, err)
	}
	if err := t.RereadPartitions(); err != nil {
		return res, fmt.Errorf("re-read partition table of %s: %w", o.Target, err)
	}
	res.Duration = time.Since(start)
	slog.Info("disk image written", "url", o.URL, "target", o.Target, "downloaded", res.DownloadedBytes,
		"written", res.WrittenBytes, "sha256", res.SHA256, "raw_sha256", res.RawSHA256, "duration", res.Duration)
	return res, nil
}

// check turns the end state of the stream into the most specific error:
// transport failure, then short/long download, then write or decompression
// failure, then the hash.
func (o *Options) check(ctx context.Context, dl *downloadReader, res *Result, streamErr error) error {
	var werr *writeError
	switch {
	case errors.Is(dl.err, io.ErrUnexpectedEOF) || (dl.eof && dl.n < o.Size):
		return fmt.Errorf("artifact %s: truncated: got %d of %d bytes", o.URL, dl.n, o.Size)
	case dl.err != nil:
		if cause := context.Cause(ctx); cause != nil {
			return fmt.Errorf("artifact %s: download aborted after %d of %d bytes: %w", o.URL, dl.n, o.Size, cause)
		}
		return fmt.Errorf("artifact %s: download failed after %d of %d bytes: %w", o.URL, dl.n, o.Size, dl.err)
	case dl.n > o.Size:
		return fmt.Errorf("artifact %s: longer than the manifest size: more than %d bytes", o.URL, o.Size)
	case errors.As(streamErr, &werr):
		return fmt.Errorf("write %s at offset %d: %w", o.Target, werr.off, werr.err)
	case streamErr != nil:
		return fmt.Errorf("artifact %s: corrupt %s stream after %d downloaded bytes: %w", o.URL, o.Format, dl.n, streamErr)
	case dl.n < o.Size:
		return fmt.Errorf("artifact %s: truncated: got %d of %d bytes", o.URL, dl.n, o.Size)
	case res.SHA256 != o.SHA256:
		return fmt.Errorf("artifact %s: sha256 mismatch: manifest says %s, downloaded %s (%d bytes)", o.URL, o.SHA256, res.SHA256, dl.n)
	}
	return nil
}

type writeError struct {
	off int64
	err error
}

func (e *writeError) Error() string { return e.err.Error() }

// stream decompresses dl into t in BlockSize writes and returns the
// decompressed byte count and its sha256.
func stream(dl io.Reader, o Options, t io.Writer) (int64, string, error) {
	dec, closeDec, err := decompressor(o.Format, dl)
	if err != nil {
		return 0, "", err
	}
	defer closeDec()
	// ReadFull reports a short final block as io.ErrUnexpectedEOF, which is
	// also what a decompressor says about a cut stream; eofReader tells the
	// two apart.
	src := &eofReader{r: dec}
	h := sha256.New()
	buf := make([]byte, o.BlockSize)
	var written int64
	for {
		n, rerr := io.ReadFull(src, buf)
		if n > 0 {
			h.Write(buf[:n])
			if _, err := t.Write(buf[:n]); err != nil {
				return written, "", &writeError{off: written, err: err}
			}
			written += int64(n)
			if o.Progress != nil {
				o.Progress(written)
			}
		}
		if rerr == io.EOF || (rerr == io.ErrUnexpectedEOF && src.eof) {
			break
		}
		if rerr != nil {
			return written, "", rerr
		}
	}
	return written, hex.EncodeToString(h.Sum(nil)), nil
}

type eofReader struct {
	r   io.Reader
	eof bool
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		e.eof = true
	}
	return n, err
}

func decompressor(format string, r io.Reader) (io.Reader, func(), error) {
	switch format {
	case FormatRaw:
		return r, func() {}, nil
	case FormatGzip:
		z, err := gzip.NewReader(r)
		if err != nil {
			return nil, nil, fmt.Errorf("gzip header: %w", err)
		}
		return z, func() { z.Close() }, nil
	case FormatZstd:
		// Bound the window so a hostile frame header cannot demand
		// gigabytes of RAM in an in-memory image.
		z, err := zstd.NewReader(r, zstd.WithDecoderMaxMemory(1<<30), zstd.WithDecoderMaxWindow(512<<20))
		if err != nil {
			return nil, nil, fmt.Errorf("zstd: %w", err)
		}
		return z, z.Close, nil
	case FormatXz:
		z, err := xz.NewReader(r)
		if err != nil {
			return nil, nil, fmt.Errorf("xz header: %w", err)
		}
		return z, func() {}, nil
	}
	return nil, nil, fmt.Errorf("unsupported format %q", format)
}

// downloadReader counts and hashes the download and remembers how it ended.
type downloadReader struct {
	r      io.Reader
	h      hash.Hash
	n      int64
	err    error // first error other than io.EOF
	eof    bool
	onRead func()
}

func (d *downloadReader) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	if n > 0 {
		d.n += int64(n)
		d.h.Write(p[:n])
		if d.onRead != nil {
			d.onRead()
		}
	}
	switch {
	case err == io.EOF:
		d.eof = true
	case err != nil && d.err == nil:
		d.err = err
	}
	return n, err
}

func invalidate(t target) error {
	if _, err := t.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if _, err := t.Write(make([]byte, invalidateBytes)); err != nil {
		return err
	}
	return t.Sync()
}
