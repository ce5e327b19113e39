// Package diskimage streams an OS image from HTTP onto a disk. Download,
// decompression, hashing and writing run as concurrent stages joined by
// bounded channels of reusable aligned buffers, so memory stays flat
// whatever the image size. All-zero regions are not written: they are
// skipped when the caller vouches the target is already zero, or handed to
// the device as Write Zeroes / punched holes otherwise. A dropped download
// resumes with a Range request. Size and sha256 of the download are
// mandatory; Verify reads the written range back.
package diskimage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cure-oss/cure/tools/chunklist"
)

// Formats accepted in Options.Format.
const (
	FormatRaw   = "raw"
	FormatGzip  = "raw.gz"
	FormatZstd  = "raw.zst"
	FormatXz    = "raw.xz"
	FormatQcow2 = "qcow2"
)

const (
	defaultBlockSize    = 4 << 20
	defaultStallTimeout = 2 * time.Minute
	defaultRetries      = 5
	defaultRetryWait    = time.Second
	// invalidateBytes is how much of the target's start, and of its end,
	// is zeroed after a failed write (and held back until the download is
	// verified, without a chunk list): the protective MBR, primary GPT and
	// most boot loaders; the backup GPT in the last 33 sectors.
	invalidateBytes = 1 << 20
)

// Options describe one image write.
type Options struct {
	URL    string
	SHA256 string // of the downloaded (possibly compressed) artifact, hex
	Size   int64  // of the downloaded artifact, bytes
	Format string // raw | raw.gz | raw.zst | raw.xz | qcow2
	Target string // block device or regular file; must already exist
	Client *http.Client
	// Progress, if set, is called after every block with the total number
	// of decompressed bytes written so far.
	Progress  func(written int64)
	BlockSize int // write size, a multiple of 1 MiB; default 4 MiB
	// StallTimeout aborts a download attempt when no byte arrives for this
	// long (default 2 minutes). The whole transfer has no deadline of its
	// own: a multi-GiB image on a slow link is legitimate, a silent peer
	// is not.
	StallTimeout time.Duration
	// TargetZeroed is the caller's statement that the target already reads
	// as zeros (right after a verified crypto-erase): all-zero regions are
	// then skipped. Otherwise they are zeroed by the device (BLKZEROOUT)
	// or punched out of a regular file, never sent as zero-filled writes.
	TargetZeroed bool
	// Buffered disables O_DIRECT (used when the device allows it).
	Buffered bool
	// Decoder is DecoderAuto (chosen per stream, see decode.go) or one of
	// the other Decoder* constants.
	Decoder string
	// Retries bounds how often a dropped download resumes with a Range
	// request (default 5; negative: never). RetryWait is the first pause,
	// doubling each time (default 1 s).
	Retries   int
	RetryWait time.Duration
	// ChunksURL and ChunksSHA256 name the artifact's chunk list
	// (tools/chunklist) and the sha256 the manifest pins for it. With
	// them, chunks are verified on all cores as they arrive and nothing
	// unverified is decoded or written; without, the whole download's
	// sha256 is checked at its end.
	ChunksURL    string
	ChunksSHA256 string
	// Connections is how many HTTP Range connections download the
	// artifact at once (default 1), for links where one connection is the
	// limit. More than one needs a chunk list.
	Connections int
}

// Result describes a completed write.
type Result struct {
	DownloadedBytes int64
	WrittenBytes    int64  // image bytes now on the target, zeros included
	ZeroBytes       int64  // of WrittenBytes, skipped or zeroed without writing
	SHA256          string // of the download
	Readback        Digest // of the image bytes written, for Verify
	Decoder         string // what decoded the stream
	// Verification is how the download was verified: "whole-sha256", or
	// the chunk list's name (e.g. "chunked-blake3-1MiB").
	Verification string
	Connections  int  // HTTP connections that downloaded it at once
	Resumes      int  // Range requests after dropped connections
	Direct       bool // written with O_DIRECT
	Duration     time.Duration
	// Stages is the streamed pass's wall time by what held it up
	// (download, decode, write; see Stages): the run's time buckets.
	Stages Stages
}

// Write streams o.URL onto o.Target.
//
// With only a whole-file sha256, the digest of a streamed download is
// only known once the stream has ended, by which time the target has been
// written. That is accepted: on any error the caller leaves the boot
// override alone. Until the sha256 matched, the image's first MiB and
// whatever it writes to the target's last MiB are held in memory
// (holdTarget): the unverified bytes on the disk carry no partition table
// and no boot loader, primary or backup. On any error Write zeroes the
// first and the last MiB of the target (both GPT headers) so a partial
// or unverified image cannot boot. With a chunk list nothing unverified
// is written at all; a failure still zeroes both ends, as the verified
// prefix alone is no bootable image either.
func Write(ctx context.Context, o Options) (*Result, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	t, err := openTarget(o.Target, !o.Buffered)
	if err != nil {
		return nil, err
	}
	res, err := write(ctx, o, t)
	if res != nil {
		res.Direct = t.direct
	}
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
	case FormatRaw, FormatGzip, FormatZstd, FormatXz, FormatQcow2:
	default:
		return fmt.Errorf("artifact %s: format %q: expected one of raw, raw.gz, raw.zst, raw.xz, qcow2", o.URL, o.Format)
	}
	if o.Target == "" {
		return fmt.Errorf("artifact %s: target is empty", o.URL)
	}
	if o.BlockSize == 0 {
		o.BlockSize = defaultBlockSize
	}
	// Whole zero grains per block keep the grain digest and the zero
	// scan on the same boundaries.
	if o.BlockSize < zeroGrain || o.BlockSize%zeroGrain != 0 {
		return fmt.Errorf("disk image: block size %d: expected a positive multiple of %d", o.BlockSize, zeroGrain)
	}
	switch o.Decoder {
	case DecoderAuto, DecoderGo, DecoderExec, DecoderCureZstd, DecoderKlauspostZstd:
	default:
		return fmt.Errorf("disk image: decoder %q: expected \"\" (auto), %s, %s, %s or %s", o.Decoder, DecoderGo, DecoderExec, DecoderCureZstd, DecoderKlauspostZstd)
	}
	if o.StallTimeout == 0 {
		o.StallTimeout = defaultStallTimeout
	}
	switch {
	case o.Retries == 0:
		o.Retries = defaultRetries
	case o.Retries < 0:
		o.Retries = 0
	}
	if o.RetryWait == 0 {
		o.RetryWait = defaultRetryWait
	}
	if o.Client == nil {
		o.Client = defaultClient()
	}
	if o.Connections < 0 || o.Connections > maxConnections {
		return fmt.Errorf("artifact %s: connections %d: expected 0 to %d", o.URL, o.Connections, maxConnections)
	}
	o.Connections = max(o.Connections, 1)
	return o.validateChunks()
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

// write does the transfer once the target is open; t is the device seam.
func write(ctx context.Context, o Options, t target) (*Result, error) {
	start := time.Now()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// qcow2 maps guest clusters through tables that may lie anywhere in
	// the file: read them first with Range requests, before the disk is
	// touched, so the one sequential pass below can place every cluster.
	var img *qcowImage
	if o.Format == FormatQcow2 {
		rr := &rangeReader{ctx: ctx, client: o.Client, url: o.URL, size: o.Size, timeout: o.StallTimeout}
		var err error
		if img, err = readQcow2(rr, o.Size); err != nil {
			return nil, fmt.Errorf("artifact %s: %w", o.URL, err)
		}
	}
	// The chunk list, like the status and length below, is checked
	// before the disk is touched.
	var list *chunklist.List
	verification := "whole-sha256"
	if o.ChunksURL != "" {
		var err error
		if list, err = fetchList(ctx, o); err != nil {
			return nil, err
		}
		verification = list.String()
	}
	src, err := openSource(ctx, &o, list)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	// Read at most Size+1 bytes: enough to notice an over-long download
	// without trusting the server to end it.
	dl := &downloadReader{r: io.LimitReader(src, o.Size+1)}
	// Without a chunk list nothing is verified before the end: the
	// regions a firmware boots from are held until then.
	var dst target = t
	var hold *holdTarget
	if list == nil {
		hold = newHoldTarget(t)
		dst = hold
	}
	st := runPipeline(ctx, cancel, o, dst, dl, img, list)

	res := &Result{
		DownloadedBytes: dl.n,
		WrittenBytes:    st.written,
		ZeroBytes:       st.zero,
		SHA256:          st.sha256,
		Readback:        st.readback,
		Decoder:         st.decoder,
		Verification:    verification,
		Connections:     o.Connections,
		Resumes:         src.resumed(),
		Stages:          st.stages,
	}
	err = o.check(ctx, dl, res, st)
	if err == nil && hold != nil {
		if err = hold.commit(); err != nil {
			err = fmt.Errorf("write the held start and end of %s after the sha256 matched: %w", o.Target, err)
		}
	}
	if err != nil {
		if st.touched {
			if ierr := invalidate(t); ierr != nil {
				err = errors.Join(err, fmt.Errorf("zero start and end of %s after failed write: %w", o.Target, ierr))
			} else {
				slog.Warn("disk image write failed; zeroed the start and the end of the target (both GPT headers)", "target", o.Target, "written", st.written)
			}
		}
		return res, err
	}
	if err := t.Sync(); err != nil {
		return res, fmt.Errorf("fsync %s after %d bytes: %w", o.Target, st.written, err)
	}
	if err := t.RereadPartitions(); err != nil {
		return res, fmt.Errorf("re-read partition table of %s: %w", o.Target, err)
	}
	res.Duration = time.Since(start)
	slog.Info("disk image written", "url", o.URL, "target", o.Target, "format", o.Format, "downloaded", res.DownloadedBytes,
		"written", res.WrittenBytes, "zero", res.ZeroBytes, "resumes", res.Resumes, "sha256", res.SHA256,
		"readback", res.Readback.String(), "decoder", res.Decoder, "verification", res.Verification, "connections", res.Connections, "duration", res.Duration)
	return res, nil
}

// source is where the artifact's bytes come from: one connection that
// resumes with Range requests, or several (striper.go).
type source interface {
	io.Reader
	Close()
	resumed() int
}

// openSource opens the download: several connections when asked for and
// the server honours Range (else o.Connections drops to 1), one otherwise.
func openSource(ctx context.Context, o *Options, list *chunklist.List) (source, error) {
	if o.Connections > 1 {
		s := newStriper(ctx, *o, list.Chunk)
		switch err := s.open(); {
		case err == nil:
			return s, nil
		case errors.Is(err, errNoRanges):
			slog.Warn("several connections asked for, but the server ignores Range: one connection", "url", o.URL)
			o.Connections = 1
		default:
			return nil, err
		}
	}
	f := &fetcher{ctx: ctx, client: o.Client, url: o.URL, size: o.Size, stall: o.StallTimeout, retries: o.Retries, wait: o.RetryWait}
	if err := f.open(); err != nil {
		return nil, err
	}
	return f, nil
}

// check turns the end state of the transfer into the most specific error:
// transport failure, then short/long download, then write or decompression
// failure, then the hash. A download error caused by the pipeline stopping
// itself (a stage failed) is not the story: the stage's error is.
func (o *Options) check(ctx context.Context, dl *downloadReader, res *Result, st pipelineState) error {
	var werr *writeError
	var cerr *chunkError
	switch {
	case errors.Is(dl.err, io.ErrUnexpectedEOF) || (dl.eof && dl.n < o.Size):
		return fmt.Errorf("artifact %s: truncated: got %d of %d bytes", o.URL, dl.n, o.Size)
	case dl.err != nil && !st.stopped:
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, errStopped) {
			return fmt.Errorf("artifact %s: download aborted after %d of %d bytes: %w", o.URL, dl.n, o.Size, cause)
		}
		return fmt.Errorf("artifact %s: download failed after %d of %d bytes: %w", o.URL, dl.n, o.Size, dl.err)
	case dl.n > o.Size:
		return fmt.Errorf("artifact %s: longer than the manifest size: more than %d bytes", o.URL, o.Size)
	case errors.As(st.err, &cerr):
		return fmt.Errorf("artifact %s: %w: refused before any of it was decoded or written", o.URL, cerr)
	case errors.As(st.err, &werr):
		return fmt.Errorf("artifact %s: write %s at offset %d: %w", o.URL, o.Target, werr.off, werr.err)
	case st.err != nil:
		return fmt.Errorf("artifact %s: corrupt %s stream after %d downloaded bytes: %w", o.URL, o.Format, dl.n, st.err)
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

// downloadReader counts the download and remembers how it ended.
type downloadReader struct {
	r   io.Reader
	n   int64
	err error // first error other than io.EOF
	eof bool
}

func (d *downloadReader) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	d.n += int64(n)
	switch {
	case err == io.EOF:
		d.eof = true
	case err != nil && d.err == nil:
		d.err = err
	}
	return n, err
}
