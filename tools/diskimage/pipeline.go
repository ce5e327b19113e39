package diskimage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cure-oss/cure/tools/chunklist"
)

// decoderSeam lets tests stand in for a misbehaving decoder.
var decoderSeam = func(r io.Reader) io.Reader { return r }

// Pipeline shape (each arrow a bounded channel, each box a goroutine; an
// external decoder adds a process and a feeder goroutine in the middle):
//
//	download ──chunks──▶ sha256 ──chunks──▶ decompress ──blocks──▶ zero scan+CRC ──▶ writeDepth writers
//
// With only the whole file's sha256 pinned, the sha256 has a goroutine of
// its own: it is inherently serial (2.0 GB/s with SHA-NI on this host, as
// fast as OpenSSL's), it was about half the CPU of an incompressible
// install, and its verdict comes only after the disk has been written.
// With a chunk list (tools/chunklist) the sha256 box is instead:
//
//	chunks ──▶ verifyWorkers goroutines, one chunk each ──▶ in order ──▶ decompress
//
// and a chunk moves on only once its digest matched, so the decoders never
// parse, and the disk never receives, a byte that was not verified.
// Buffers come from fixed free lists rather than a sync.Pool: a free list
// both reuses the aligned buffers and puts a hard bound on how many exist,
// which a sync.Pool does not. With 4 MiB blocks the stages hold at most
// blockBufs*4 MiB + chunkBufs*1 MiB (~44 MiB) whatever the image size.
const (
	chunkSize = 1 << 20
	chunkBufs = 8
	blockBufs = 9
	queue     = 2
	// zeroGrain is the granularity of zero detection: large enough that
	// the writes between zero runs stay big and aligned, small enough to
	// find the holes of a typical filesystem image.
	zeroGrain = 1 << 20
)

// zeroes is compared against, never written to.
var zeroes = make([]byte, zeroGrain)

var errStopped = errors.New("pipeline stopped by a failed stage")

// freeList hands out at most n buffers, carved on first use from one
// slab. Only one goroutine calls get; any may call put.
type freeList struct {
	free       chan []byte
	size, made int
	slab       []byte
}

func newFreeList(n, size int) *freeList {
	return &freeList{free: make(chan []byte, n), size: size}
}

func (l *freeList) get(ctx context.Context) ([]byte, error) {
	select {
	case b := <-l.free:
		return b, nil
	default:
	}
	if l.made < cap(l.free) {
		if l.slab == nil {
			l.slab = hugeBuf(cap(l.free) * l.size)
		}
		b := l.slab[l.made*l.size : (l.made+1)*l.size : (l.made+1)*l.size]
		l.made++
		return b, nil
	}
	select {
	case b := <-l.free:
		return b, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

func (l *freeList) put(b []byte) { l.free <- b[:cap(b)] }

type block struct {
	buf  []byte // len is the data length
	off  int64  // where it goes on the target
	zero []span // ranges of buf the decoder skipped as zeros: not in buf yet
}

// span is [from, to) within a block.
type span struct{ from, to int }

// pipelineState is how the stages ended.
type pipelineState struct {
	written, zero int64
	sha256        string // of the download
	readback      Digest
	decoder       string
	err           error // the first stage failure (decode or write)
	stopped       bool  // the download ended because a stage failed
	touched       bool  // something was written or zeroed on the target
	stages        Stages
}

// Stages attributes a streamed write's wall time to what held it up. The
// stages overlap, so each is charged along the writer's critical path:
// the writer's own busy time is Write; the time it waited for blocks is
// split between Decode and Download in the proportion the decoder itself
// spent working and waiting for input (Download covers the network and
// the sha256 of each chunk). The three add up to the pipeline's wall time.
type Stages struct {
	Download, Decode, Write time.Duration
}

// attribute charges wall to the stages (see Stages).
func attribute(wall, writeBusy, decBusy, decWait time.Duration) Stages {
	writeBusy = min(max(writeBusy, 0), wall)
	up := wall - writeBusy
	var dec time.Duration
	if decBusy > 0 && decBusy+decWait > 0 {
		dec = time.Duration(float64(up) * float64(decBusy) / float64(decBusy+max(decWait, 0)))
	}
	dec = min(max(dec, 0), up)
	return Stages{Download: up - dec, Decode: dec, Write: writeBusy}
}

func runPipeline(ctx context.Context, cancel context.CancelCauseFunc, o Options, t target, dl *downloadReader, img *qcowImage, list *chunklist.List) pipelineState {
	began := time.Now()
	p := &pipeline{ctx: ctx, cancel: cancel, o: o, chunks: newFreeList(chunkBufs, chunkSize), blocks: newFreeList(blockBufs, o.BlockSize),
		dlCh: make(chan []byte, queue), hashCh: make(chan []byte, queue), decCh: make(chan block, queue), verified: list != nil}
	if list != nil {
		// Chunks are verified whole before any of them moves on, so the
		// download is cut on the list's boundaries; enough of them for
		// every core to verify one while the stages keep theirs.
		p.chunks = newFreeList(max(chunkBufs, 2*verifyWorkers()+6), int(list.Chunk))
	}
	p.wg.Add(3)
	go p.download(dl)
	go p.verify(list)
	src := &chanReader{ctx: ctx, ch: p.hashCh, free: p.chunks}
	go p.decode(img, src)
	q, w, writeBusy := p.write(t)
	p.wg.Wait()
	// Whatever the stages left in the channels goes back; nothing is
	// waiting for it, this only keeps the accounting honest.
	st := pipelineState{written: q.written, zero: w.zero, sha256: p.sum, readback: w.digest.d, decoder: p.decName, touched: w.touched}
	p.mu.Lock()
	st.err = p.first
	p.mu.Unlock()
	st.stopped = p.stopped
	// The decoder's input waits are the chanReader's (for an external
	// decoder its feeder's, which mirror them).
	srcWait := src.waited.Load()
	st.stages = attribute(time.Since(began), writeBusy, p.decRead-time.Duration(srcWait), time.Duration(srcWait))
	return st
}

// pipeline is one runPipeline: its buffers, channels and what each stage
// reports once wg is done.
type pipeline struct {
	ctx            context.Context
	cancel         context.CancelCauseFunc
	o              Options
	chunks, blocks *freeList
	dlCh, hashCh   chan []byte
	decCh          chan block
	wg             sync.WaitGroup

	mu    sync.Mutex
	first error // the first stage failure

	stopped  bool          // download: its end was the pipeline cancelling it
	sum      string        // verify: the download's sha256, "" unless proven
	verified bool          // a chunk list checks every chunk before the decoder reads it
	decName  string        // decode: which decoder ran
	decRead  time.Duration // decode: time in ReadFull, its input waits included
}

func (p *pipeline) fail(err error) {
	p.mu.Lock()
	if p.first == nil {
		p.first = err
	}
	p.mu.Unlock()
	p.cancel(errStopped)
}

// download fills chunks until the body ends. dl records how it ended;
// stopped records whether that end was the pipeline cancelling it.
func (p *pipeline) download(dl *downloadReader) {
	defer p.wg.Done()
	defer close(p.dlCh)
	for {
		b, err := p.chunks.get(p.ctx)
		if err != nil {
			p.stopped = true
			return
		}
		n, err := io.ReadFull(dl, b)
		if err != nil && errors.Is(context.Cause(p.ctx), errStopped) {
			p.stopped = true
		}
		if n > 0 {
			select {
			case p.dlCh <- b[:n]:
			case <-p.ctx.Done():
				return
			}
		} else {
			p.chunks.put(b)
		}
		if err != nil {
			return
		}
	}
}

// verify checks every chunk downloaded, handing them on in order. After a
// cancel the chunks still pass through, so the decoder's drain returns
// them.
func (p *pipeline) verify(list *chunklist.List) {
	defer p.wg.Done()
	defer close(p.hashCh)
	if list == nil {
		h := sha256.New()
		for b := range p.dlCh {
			h.Write(b)
			p.hashCh <- b
		}
		p.sum = hex.EncodeToString(h.Sum(nil))
		return
	}
	var verified atomic.Int64
	verifyChunks(list, p.dlCh, p.hashCh, p.chunks, p.fail, &verified)
	if verified.Load() == int64(len(list.Digests)) {
		// Every chunk matched a list bound to this sha256 and size.
		p.sum = p.o.SHA256
	}
}

// decode decompresses (or maps qcow2 clusters) into blocks.
func (p *pipeline) decode(img *qcowImage, src *chanReader) {
	defer p.wg.Done()
	defer close(p.decCh)
	// Whatever happens, consume the rest of the download so its byte
	// count and hash cover the whole artifact.
	defer src.drain()
	// The decoders parse bytes nobody has verified yet (the sha256 is
	// known only at the end): a decoder bug on a hostile stream must
	// fail this install, not take the runner down.
	defer func() {
		if r := recover(); r != nil {
			p.fail(fmt.Errorf("decoder panicked on this stream: %v", r))
		}
	}()
	var dec io.Reader
	var zs zeroSkipper
	if img != nil {
		dec, p.decName = img.stream(src), "go qcow2"
	} else {
		d, err := newDecoder(p.o.Format, p.o.Decoder, src, p.o.Size, p.verified)
		if err != nil {
			p.fail(err)
			return
		}
		defer d.close()
		dec, p.decName, zs = d, d.name, d.zeros
	}
	if seam := decoderSeam(dec); seam != dec {
		dec, zs = seam, nil
	}
	// ReadFull reports a short final block as io.ErrUnexpectedEOF,
	// which is also what a decompressor says about a cut stream;
	// eofReader tells the two apart.
	r := &eofReader{r: dec}
	var off int64
	for {
		b, err := p.blocks.get(p.ctx)
		if err != nil {
			return
		}
		t0 := time.Now()
		n, zero, rerr := fillBlock(r, zs, b)
		p.decRead += time.Since(t0)
		if n > 0 {
			select {
			case p.decCh <- block{buf: b[:n], off: off, zero: zero}:
			case <-p.ctx.Done():
				return
			}
			off += int64(n)
		} else {
			p.blocks.put(b)
		}
		if rerr == io.EOF || (rerr == io.ErrUnexpectedEOF && r.eof) {
			return
		}
		if rerr != nil {
			if p.ctx.Err() == nil {
				p.fail(rerr)
			}
			return
		}
	}
}

// fillBlock is io.ReadFull(r, b), except that where zs (if not nil) says
// the next output is zero it is skipped, not produced: those ranges are
// returned instead, and b's bytes there are left as they were.
func fillBlock(r io.Reader, zs zeroSkipper, b []byte) (n int, zero []span, err error) {
	for n < len(b) && err == nil {
		if zs != nil {
			if k := zs.SkipZeros(len(b) - n); k > 0 {
				if l := len(zero); l > 0 && zero[l-1].to == n {
					zero[l-1].to += k
				} else {
					zero = append(zero, span{n, n + k})
				}
				n += k
				continue
			}
		}
		var m int
		m, err = r.Read(b[n:])
		n += m
	}
	switch {
	case n == len(b):
		err = nil
	case err == io.EOF && n > 0:
		err = io.ErrUnexpectedEOF
	}
	return n, zero, err
}

// write plans each block (zero scan, read-back CRC) here, in order, while
// earlier blocks' writes are still with the device. The scan stays off
// the decoder's goroutine: on a compressed filesystem image the decoder
// is the critical path, and on 2 cores the two overlap. busy is the
// planning and the waits for a free write slot.
func (p *pipeline) write(t target) (q *writeQueue, w *zeroWriter, busy time.Duration) {
	w = &zeroWriter{skip: p.o.TargetZeroed, digest: newDigester()}
	q = newWriteQueue(p.ctx, t, writeDepth, p.blocks, p.o.Progress, p.fail)
	for b := range p.decCh {
		if p.ctx.Err() != nil {
			p.blocks.put(b.buf)
			continue
		}
		t0 := time.Now()
		q.submit(b.buf, w.planKnown(b.buf, b.off, b.zero), w.end)
		busy += time.Since(t0)
	}
	t0 := time.Now()
	werr := q.wait()
	if werr == nil && p.ctx.Err() == nil {
		// The trailing zero range and a regular file's length, once every
		// block has landed.
		if werr = runOps(t, w.flushZero(nil)); werr == nil {
			if err := t.Extend(w.end); err != nil {
				werr = &writeError{off: w.end, err: err}
			}
		}
		if werr != nil {
			p.fail(werr)
		}
	}
	busy += time.Since(t0)
	return q, w, busy
}

// chanReader turns the chunk channel back into an io.Reader for the
// decompressors, returning each chunk to the free list once consumed.
type chanReader struct {
	ctx    context.Context
	ch     <-chan []byte
	free   *freeList
	cur    []byte
	rest   []byte
	waited atomic.Int64 // nanoseconds blocked waiting for the next chunk
}

func (c *chanReader) Read(p []byte) (int, error) {
	for len(c.rest) == 0 {
		if c.cur != nil {
			c.free.put(c.cur)
			c.cur = nil
		}
		var b []byte
		var ok bool
		select {
		case b, ok = <-c.ch:
		default:
			t0 := time.Now()
			select {
			case b, ok = <-c.ch:
			case <-c.ctx.Done():
				return 0, context.Cause(c.ctx)
			}
			c.waited.Add(int64(time.Since(t0)))
		}
		if !ok {
			return 0, io.EOF
		}
		c.cur, c.rest = b, b
	}
	n := copy(p, c.rest)
	c.rest = c.rest[n:]
	return n, nil
}

// peek returns the unread part of the current chunk, fetching the first
// one if needed, without consuming it.
func (c *chanReader) peek() ([]byte, error) {
	if len(c.rest) == 0 {
		if _, err := c.Read(nil); err != nil {
			return nil, err
		}
	}
	return c.rest, nil
}

// WriteTo hands whole chunks to w: feeding an external decoder through
// io.Copy would otherwise go through a 32 KiB bounce buffer.
func (c *chanReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if len(c.rest) == 0 {
			if _, err := c.Read(nil); err == io.EOF {
				return total, nil
			} else if err != nil {
				return total, err
			}
		}
		n, err := w.Write(c.rest)
		c.rest = c.rest[n:]
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
}

func (c *chanReader) drain() {
	if c.cur != nil {
		c.free.put(c.cur)
		c.cur, c.rest = nil, nil
	}
	for b := range c.ch {
		c.free.put(b)
	}
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

// zeroWriter plans the writes of blocks handed over in image order:
// all-zero grains become skipped or device-zeroed ranges, coalesced across
// blocks, the rest data writes. It digests every grain on the way: the
// scan for zeros has the bytes in cache.
type zeroWriter struct {
	skip              bool
	digest            *digester
	end               int64 // image bytes planned so far
	zero              int64
	zeroFrom, zeroLen int64 // pending zero range
	touched           bool  // an operation on the target was planned
}

// plan returns the operations that put b at off. A zero range is only
// emitted once it has ended: with the data that follows it, or by
// flushZero at the end of the image.
func (w *zeroWriter) plan(b []byte, off int64) []op { return w.planKnown(b, off, nil) }

// planKnown is plan for a block whose zero spans the decoder skipped (in
// order, not overlapping): a grain they cover whole is zero without a
// look at its bytes (never written, and the zeros' CRC is a constant);
// elsewhere their bytes are cleared, as they are written.
func (w *zeroWriter) planKnown(b []byte, off int64, zero []span) []op {
	var ops []op
	dataFrom := -1
	for s := 0; s < len(b); s += zeroGrain {
		e := min(s+zeroGrain, len(b))
		known := false
		for len(zero) > 0 && zero[0].from < e {
			z := zero[0]
			if z.from <= s && z.to >= e {
				known = true
				break
			}
			clear(b[max(z.from, s):min(z.to, e)])
			if z.to > e {
				break // it goes on into the next grain
			}
			zero = zero[1:]
		}
		// A short grain (the image's tail) is written as is: zero offload
		// wants aligned ranges.
		isZero := e-s == zeroGrain && (known || bytes.Equal(b[s:e], zeroes))
		if known && !isZero {
			clear(b[s:e]) // the tail grain, covered whole
		}
		w.digest.add(b[s:e], isZero)
		if isZero {
			if dataFrom >= 0 {
				ops = w.data(ops, b[dataFrom:s], off+int64(dataFrom))
				dataFrom = -1
			}
			if w.zeroLen == 0 {
				w.zeroFrom = off + int64(s)
			}
			w.zeroLen += int64(e - s)
			continue
		}
		if dataFrom < 0 {
			dataFrom = s
		}
	}
	if dataFrom >= 0 {
		ops = w.data(ops, b[dataFrom:], off+int64(dataFrom))
	}
	w.end = off + int64(len(b))
	return ops
}

func (w *zeroWriter) data(ops []op, p []byte, off int64) []op {
	ops = w.flushZero(ops)
	w.touched = true
	return append(ops, op{p: p, off: off})
}

// flushZero settles the pending zero range: counted, and zeroed on the
// device unless the target is known to be zero already.
func (w *zeroWriter) flushZero(ops []op) []op {
	if w.zeroLen == 0 {
		return ops
	}
	from, n := w.zeroFrom, w.zeroLen
	w.zeroLen = 0
	w.zero += n
	if w.skip {
		return ops
	}
	w.touched = true
	return append(ops, op{off: from, n: n})
}
