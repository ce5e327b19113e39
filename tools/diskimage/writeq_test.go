package diskimage

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	curezstd "github.com/cure-oss/cure/tools/zstd"
)

// gateTarget records the operations it is given; a write at an offset in
// hold waits until that offset's channel is closed, and one at failAt
// fails. Every write is announced on wrote (when set) once recorded.
type gateTarget struct {
	mu     sync.Mutex
	writes []int64 // offsets written, in completion order
	zeros  [][2]int64
	hold   map[int64]chan struct{}
	failAt int64
	wrote  chan int64
}

func (g *gateTarget) WriteAt(p []byte, off int64) (int, error) {
	if c, ok := g.hold[off]; ok {
		<-c
	}
	if off == g.failAt {
		return 0, errors.New("injected I/O error")
	}
	g.mu.Lock()
	g.writes = append(g.writes, off)
	g.mu.Unlock()
	if g.wrote != nil {
		g.wrote <- off
	}
	return len(p), nil
}

func (g *gateTarget) ZeroRange(off, n int64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.zeros = append(g.zeros, [2]int64{off, n})
	return nil
}
func (g *gateTarget) Extend(int64) error      { return nil }
func (g *gateTarget) Sync() error             { return nil }
func (g *gateTarget) Close() error            { return nil }
func (g *gateTarget) RereadPartitions() error { return nil }

// progressLog collects Progress calls.
type progressLog struct {
	mu    sync.Mutex
	calls []int64
}

func (p *progressLog) add(n int64) { p.mu.Lock(); p.calls = append(p.calls, n); p.mu.Unlock() }
func (p *progressLog) get() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

const mib = 1 << 20

func dataJob(free *freeList, off int64) ([]byte, []op, int64) {
	b, _ := free.get(context.Background())
	return b, []op{{p: b, off: off}}, off + int64(len(b))
}

// A block finishing before an earlier one is not reported: Progress and
// the written count only ever cover a prefix that is on the target.
func TestWriteQueueReportsInOrder(t *testing.T) {
	release := make(chan struct{})
	g := &gateTarget{hold: map[int64]chan struct{}{0: release}, failAt: -1, wrote: make(chan int64, 4)}
	free := newFreeList(2, mib)
	var pl progressLog
	q := newWriteQueue(context.Background(), g, 2, free, pl.add, func(err error) { t.Errorf("fail(%v)", err) })
	q.submit(dataJob(free, 0))
	q.submit(dataJob(free, mib))
	if off := <-g.wrote; off != mib {
		t.Fatalf("first write to land at %d, want the second block's %d", off, mib)
	}
	q.mu.Lock()
	written := q.written
	q.mu.Unlock()
	if calls := pl.get(); len(calls) != 0 || written != 0 {
		t.Fatalf("block 1 landed before block 0: progress %v, written %d; want nothing yet", calls, written)
	}
	close(release)
	if err := q.wait(); err != nil {
		t.Fatal(err)
	}
	if calls := pl.get(); !reflect.DeepEqual(calls, []int64{mib, 2 * mib}) || q.written != 2*mib {
		t.Errorf("progress %v, written %d; want [1 MiB 2 MiB], 2 MiB", calls, q.written)
	}
	if len(free.free) != free.made || free.made != 2 {
		t.Errorf("%d of %d buffers back on the free list, want 2 of 2", len(free.free), free.made)
	}
}

// After a failed write nothing more is written, the failure is reported
// once with its offset, and the written count stops before it.
func TestWriteQueueStopsAtFirstFailure(t *testing.T) {
	g := &gateTarget{failAt: 2 * mib}
	free := newFreeList(3, mib)
	var pl progressLog
	var fails []error
	// One worker: the blocks after the failing one are handed over only
	// once it has failed, so none of them may be written.
	q := newWriteQueue(context.Background(), g, 1, free, pl.add, func(err error) { fails = append(fails, err) })
	for i := range int64(6) {
		q.submit(dataJob(free, i*mib))
	}
	err := q.wait()
	var we *writeError
	if !errors.As(err, &we) || we.off != 2*mib || !strings.Contains(err.Error(), "injected I/O error") {
		t.Fatalf("err = %v, want a writeError at offset %d", err, 2*mib)
	}
	if len(fails) != 1 || fails[0] != err {
		t.Errorf("fail called with %v, want once with %v", fails, err)
	}
	if !reflect.DeepEqual(g.writes, []int64{0, mib}) {
		t.Errorf("writes at %v, want only [0 1 MiB] (before the failure)", g.writes)
	}
	if calls := pl.get(); !reflect.DeepEqual(calls, []int64{mib, 2 * mib}) || q.written != 2*mib {
		t.Errorf("progress %v, written %d; want [1 MiB 2 MiB], 2 MiB", calls, q.written)
	}
	if len(free.free) != free.made {
		t.Errorf("%d of %d buffers back on the free list", len(free.free), free.made)
	}
}

// A cancelled pipeline (another stage failed) writes nothing more.
func TestWriteQueueStopsWhenCancelled(t *testing.T) {
	g := &gateTarget{failAt: -1}
	free := newFreeList(2, mib)
	ctx, cancel := context.WithCancel(context.Background())
	q := newWriteQueue(ctx, g, 1, free, nil, func(err error) { t.Errorf("fail(%v)", err) })
	q.submit(dataJob(free, 0))
	cancel()
	q.submit(dataJob(free, mib))
	if err := q.wait(); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(g.writes, mib) || q.written > mib {
		t.Errorf("writes %v, written %d after cancel", g.writes, q.written)
	}
}

// block4 is a 4 MiB block whose grains are zero where flags say so.
func block4(flags []bool) []byte {
	b := make([]byte, 4*mib)
	for i, z := range flags {
		if !z {
			b[i*mib+12345] = 1 // one byte is enough to make a grain data
		}
	}
	return b
}

func TestPlanCoalescesZeros(t *testing.T) {
	for _, c := range []struct {
		name string
		skip bool
		// Two blocks of four grains each: which grains are zero.
		zero  [2][]bool
		want  []op // zero ops have p == nil; data ops are compared by offset and length
		zeros int64
	}{
		{"data only", false, [2][]bool{{false, false, false, false}, {false, false, false, false}},
			[]op{{off: 0, n: 4 * mib}, {off: 4 * mib, n: 4 * mib}}, 0},
		{"zero run across blocks", false, [2][]bool{{false, true, true, true}, {true, true, false, false}},
			[]op{{off: 0, n: mib}, {off: mib, n: 5 * mib}, {off: 6 * mib, n: 2 * mib}}, 5 * mib},
		// Data on both sides of a block boundary stays two writes: each
		// block's buffer is released on its own.
		{"trailing zeros wait for flush", false, [2][]bool{{true, false, true, false}, {false, true, true, true}},
			[]op{{off: 0, n: mib}, {off: mib, n: mib}, {off: 2 * mib, n: mib}, {off: 3 * mib, n: mib}, {off: 4 * mib, n: mib}, {off: 5 * mib, n: 3 * mib}}, 5 * mib},
		{"zeros skipped on a zeroed target", true, [2][]bool{{true, false, true, false}, {false, true, true, true}},
			[]op{{off: mib, n: mib}, {off: 3 * mib, n: mib}, {off: 4 * mib, n: mib}}, 5 * mib},
		{"all zero, skipped", true, [2][]bool{{true, true, true, true}, {true, true, true, true}}, nil, 8 * mib},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := &zeroWriter{skip: c.skip, digest: newDigester()}
			var ops []op
			var img []byte
			for i, flags := range c.zero {
				b := block4(flags)
				img = append(img, b...)
				ops = append(ops, w.plan(b, int64(i)*4*mib)...)
			}
			ops = w.flushZero(ops)
			var got []op
			for _, o := range ops {
				n := o.n
				if o.p != nil {
					n = int64(len(o.p))
				}
				got = append(got, op{off: o.off, n: n})
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("ops %v, want %v", got, c.want)
			}
			if w.zero != c.zeros || w.end != 8*mib || w.touched != (len(c.want) > 0) {
				t.Errorf("zero %d end %d touched %v", w.zero, w.end, w.touched)
			}
			if !reflect.DeepEqual(w.digest.d, digestOf(img)) {
				t.Errorf("digest %v, want %v", w.digest.d, digestOf(img))
			}
		})
	}
}

// The sha256 is the last word on every decode path: an artifact that
// decodes cleanly but is not the one the manifest names fails the install
// and leaves nothing bootable at the start of the disk.
func TestInstallWrongHashOnEveryPath(t *testing.T) {
	raw := diskLike(6<<20 + 4608)
	files := map[string][]byte{}
	for _, f := range []string{FormatRaw, FormatGzip, FormatZstd, FormatXz} {
		files["img."+f] = compress(t, f, raw)
	}
	files["img.qcow2"] = qcow2Of(t, raw, "")
	srv := newRangeServer(t, files)
	for _, c := range []struct{ file, format string }{
		{"img.raw", FormatRaw}, {"img.raw.gz", FormatGzip}, {"img.raw.zst", FormatZstd}, {"img.raw.xz", FormatXz}, {"img.qcow2", FormatQcow2},
	} {
		for _, v := range variants(t, c.format) {
			t.Run(c.file+"/"+v.name, func(t *testing.T) {
				art := files[c.file]
				wrong := hexSum(append(bytes.Clone(art), 0))
				target := emptyTarget(t)
				// A zeroed target reads as zeros: the skipped grains are right.
				fill := bytes.Repeat([]byte{0xAA}, len(raw))
				if v.zeroed {
					fill = make([]byte, len(raw))
				}
				os.WriteFile(target, fill, 0o644)
				var progress progressLog
				res, err := Write(context.Background(), Options{URL: srv.URL + "/" + c.file, SHA256: wrong, Size: int64(len(art)),
					Format: c.format, Target: target, BlockSize: 2 << 20, TargetZeroed: v.zeroed, Decoder: v.decoder, Progress: progress.add})
				if err == nil || !strings.Contains(err.Error(), "sha256 mismatch: manifest says "+wrong) {
					t.Fatalf("err = %v, want a sha256 mismatch", err)
				}
				if res == nil || res.SHA256 != hexSum(art) {
					t.Fatalf("result %+v: want the download's own sha256 reported", res)
				}
				got, _ := os.ReadFile(target)
				if !bytes.Equal(got[:invalidateBytes], make([]byte, invalidateBytes)) {
					t.Error("the start of the target was not zeroed after the failed install")
				}
				if !bytes.Equal(got[len(got)-invalidateBytes:], make([]byte, invalidateBytes)) {
					t.Error("the end of the target (the backup GPT) was not zeroed after the failed install")
				}
				// Progress only ever reported bytes that had landed (the
				// last MiB of the target excepted: the failure zeroed it).
				tail := int64(len(got)-invalidateBytes) &^ 4095
				for _, n := range progress.get() {
					if n > int64(len(raw)) || (n > invalidateBytes && !bytes.Equal(got[invalidateBytes:min(n, tail)], raw[invalidateBytes:min(n, tail)])) {
						t.Fatalf("progress reported %d bytes written, the target does not hold them", n)
					}
				}
			})
		}
	}
}

// TestSkippedZerosPlanLikeScanned decodes a stream of raw and zero RLE
// blocks whose zero runs start and end inside 1 MiB grains, across block
// buffers of several sizes left full of garbage, with tools/zstd skipping
// the zeros (fillBlock, planKnown): the image the operations build and
// the read-back digest must be those of the plain decode and scan.
func TestSkippedZerosPlanLikeScanned(t *testing.T) {
	const kib = 1 << 10
	frame := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, (17 - 10) << 3} // 128 KiB window
	var want []byte
	blk := func(last bool, typ, size int, body []byte) {
		h := size<<3 | typ<<1
		if last {
			h |= 1
		}
		frame = append(append(frame, byte(h), byte(h>>8), byte(h>>16)), body...)
	}
	raw := func(n int, v byte) {
		d := bytes.Repeat([]byte{v}, n)
		blk(false, 0, n, d)
		want = append(want, d...)
	}
	zeros := func(n int) {
		for ; n > 0; n -= 128 * kib {
			blk(false, 1, min(n, 128*kib), []byte{0})
			want = append(want, make([]byte, min(n, 128*kib))...)
		}
	}
	raw(100*kib, 'a')
	zeros(1300 * kib) // ends inside grain 1
	raw(1, 'b')
	zeros(2900 * kib) // covers grains 2-3 whole
	raw(128*kib, 'c')
	zeros(1024*kib - 1)
	blk(true, 0, 0, nil)
	for _, size := range []int{mib, 3 * mib, 4 * mib} {
		z, err := curezstd.NewReader(bytes.NewReader(frame))
		if err != nil {
			t.Fatal(err)
		}
		w := &zeroWriter{digest: newDigester()}
		img := bytes.Repeat([]byte{0xee}, len(want))
		skipped := 0
		for off := 0; ; {
			b := bytes.Repeat([]byte{0xee}, size)
			n, zero, err := fillBlock(z, z, b)
			for _, s := range zero {
				skipped += s.to - s.from
			}
			for _, o := range w.planKnown(b[:n], int64(off), zero) {
				applyOp(img, o)
			}
			off += n
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, o := range w.flushZero(nil) {
			applyOp(img, o)
		}
		if i := firstDifference(img, want); i >= 0 || skipped < 4*mib {
			t.Fatalf("blocks of %d: image differs at %d (of %d); %d zero bytes skipped", size, i, len(want), skipped)
		}
		if !reflect.DeepEqual(w.digest.d, digestOf(want)) {
			t.Errorf("blocks of %d: digest %v, want %v", size, w.digest.d, digestOf(want))
		}
		scanned := &zeroWriter{digest: newDigester()}
		for off := 0; off < len(want); off += size {
			scanned.plan(want[off:min(off+size, len(want))], int64(off))
		}
		if scanned.flushZero(nil); w.zero != scanned.zero || w.zero < 2*mib {
			t.Errorf("blocks of %d: %d bytes planned as zero ranges, the scan finds %d", size, w.zero, scanned.zero)
		}
	}
}

func applyOp(img []byte, o op) {
	if o.p == nil {
		clear(img[o.off : o.off+o.n])
		return
	}
	copy(img[o.off:], o.p)
}

func firstDifference(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
