package diskimage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/cure-oss/cure/tools/tail"
	curezstd "github.com/cure-oss/cure/tools/zstd"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
	"golang.org/x/sys/unix"
)

// Decoder choices (Options.Decoder). Auto is what nodes use; the others
// exist so tests and the benchmark can hold one implementation to account.
const (
	// DecoderAuto picks per stream (see chooseZstd); xz goes to xz(1)
	// when the image carries it.
	DecoderAuto = ""
	// DecoderGo never execs: the Go decoders only, zstd picked per stream.
	DecoderGo = "go"
	// DecoderExec always uses the C tool (zstd(1), xz(1)).
	DecoderExec = "exec"
	// DecoderCureZstd and DecoderKlauspostZstd force one Go zstd decoder.
	DecoderCureZstd      = "cure-zstd"
	DecoderKlauspostZstd = "klauspost-zstd"
)

// maxWindow bounds the zstd window every decoder accepts (and xz(1)'s
// memory), so a hostile frame header cannot demand gigabytes of RAM in an
// in-memory image. 512 MiB covers `zstd --long` up to window log 29.
const maxWindow = 512 << 20

// externalDecoders are the C reference decoders. xz(1) is several times
// ulikunitz/xz; zstd(1) decodes compressed blocks faster than any Go
// decoder here. gzip stays in Go: klauspost's inflate outruns gzip(1).
var externalDecoders = map[string][]string{
	FormatZstd: {"zstd", "-d", "-c", "-q", "--no-progress", fmt.Sprintf("--memory=%dMB", maxWindow>>20)},
	FormatXz:   {"xz", "-d", "-c", "-q", fmt.Sprintf("--memlimit=%dMiB", maxWindow>>20)},
}

// decoder turns the artifact stream into raw image bytes. name says which
// implementation runs, for the Result and the logs.
type decoder struct {
	io.Reader
	name  string
	close func() error
	zeros zeroSkipper // nil unless the decoder knows where its zeros are
}

// zeroSkipper is a decoder that can pass over output it knows is zero
// (tools/zstd's RLE blocks) without producing it; see fillBlock.
type zeroSkipper interface{ SkipZeros(max int) int }

// Three zstd decoders, none best everywhere. BenchmarkZstdDecoders
// (decode_bench_test.go) decodes each class of image with each, through
// newDecoder (zstd(1) through its two pipes), into a CRC-32C. MB/s of
// decoded output, medians of 3 alternating runs, 2026-11-28, on a 2-core
// VM with other jobs running (load 7-9; each figure good to about ±30 %),
// 128 MiB inputs (ext4: 438 MiB) made by `zstd -3 -T0`; R is
// decoded/compressed size. "1 core" pins the benchmark and its zstd(1) to
// one core (taskset -c 0): the CPU each decoder costs, which is what the
// writer's other stages (download, verification, zero scan, writes) are
// left to share.
//
//	class (R)                     2 cores: cure / klauspost / zstd(1)   1 core: cure / klauspost / zstd(1)   chooseZstd
//	zero90: 90 % zero disk (13.8)   5126 / 1447 / 1571                   5640 / 1351 / 2223                   cure
//	ext4 of the Go tree (7.2)        855 /  936 / 1345                    891 /  690 /  839                   zstd(1)
//	stored: random bytes (1.0)      3872 / 3344 / 1252                   4679 / 2706 / 1527                   cure
//	text (2.9)                       400 /  507 /  811                    333 /  450 /  569                   zstd(1)
//
// (Earlier the same day, under load 14-24, every figure was lower and
// noisier and zstd(1) overtook cure on zero90 with 2 cores, 1998 vs 1218;
// on one core cure still led, 1853 vs 1469.)
//
// Through the whole writer (`bench-install -size 256MiB -codec zst
// -decoders cure-zstd,klauspost-zstd,exec -file-target`, same day and
// machine under load ~23, medians of 3 alternating runs), where the
// other stages take the second core: 90 %-zero 1145 cure, 650
// klauspost, 572 zstd(1); incompressible 508, 488, 454.
//
// tools/zstd turns RLE and raw blocks into a memclr or one copy, and needs
// no pipe copies; its Huffman/FSE path is pure Go and slower. So it wins
// where few bytes come out of compressed blocks: stored streams (R < 1.5)
// and sparse images (R >= 10: filesystem data compresses ~3.4x at the
// levels images use, so R >= 10 means under ~30 % of the output is
// compressed data). Between the two, or without a recorded size, zstd(1)
// if present (with a spare core 1.4-2x the Go decoders on compressed
// data; nodes have cores to spare, so the 2-core column decides here),
// else klauspost, a little ahead of tools/zstd there.
// TestChooseZstdFollowsBenchmark holds chooseZstd to this table.
const (
	storedRatio = 1.5
	sparseRatio = 10
)

// chooseZstd names the zstd decoder for a stream of size bytes whose
// first bytes are head.
func chooseZstd(choice string, head []byte, size int64, haveExec bool) string {
	switch choice {
	case DecoderCureZstd, DecoderKlauspostZstd:
		return choice
	case DecoderExec:
		return DecoderExec
	}
	if content, ok := zstdContentSize(head); ok && size > 0 {
		r := float64(content) / float64(size)
		if r < storedRatio || r >= sparseRatio {
			return DecoderCureZstd
		}
	}
	if haveExec && choice == DecoderAuto {
		return DecoderExec
	}
	return DecoderKlauspostZstd
}

// newDecoder starts the decoder for format on r; size is the artifact's
// and choice is Options.Decoder. verified says every byte of r will have
// matched the chunk list before the decoder sees it: the Go zstd decoders
// then skip the frame's XXH64, which would only re-prove the chunk
// digests at the cost of a pass over every decoded byte.
func newDecoder(format, choice string, r io.Reader, size int64, verified bool) (*decoder, error) {
	var execPath string
	if args, ok := externalDecoders[format]; ok {
		if p, err := exec.LookPath(args[0]); err == nil {
			execPath = p
		} else if choice == DecoderExec {
			return nil, fmt.Errorf("decoder %s requested but not found: %w", args[0], err)
		}
	}
	if format == FormatZstd {
		var head []byte
		if p, ok := r.(interface{ peek() ([]byte, error) }); ok {
			head, _ = p.peek()
		}
		choice = chooseZstd(choice, head, size, execPath != "")
	}
	switch {
	case choice == DecoderExec && execPath != "",
		choice == DecoderAuto && format == FormatXz && execPath != "":
		return startExternal(execPath, externalDecoders[format][1:], r)
	}
	switch format {
	case FormatRaw:
		return &decoder{Reader: r, name: "none", close: func() error { return nil }}, nil
	case FormatGzip:
		z, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("gzip header: %w", err)
		}
		return &decoder{Reader: z, name: "go gzip", close: z.Close}, nil
	case FormatZstd:
		if choice == DecoderCureZstd {
			z, err := curezstd.NewReader(r, curezstd.WithMaxWindow(maxWindow), curezstd.WithIgnoreChecksum(verified))
			if err != nil {
				return nil, fmt.Errorf("zstd: %w", err)
			}
			return &decoder{Reader: z, name: "cure zstd", close: func() error { z.Close(); return nil }, zeros: z}, nil
		}
		z, err := zstd.NewReader(r, zstd.WithDecoderMaxMemory(2*maxWindow), zstd.WithDecoderMaxWindow(maxWindow), zstd.IgnoreChecksum(verified))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		return &decoder{Reader: z, name: "klauspost zstd", close: func() error { z.Close(); return nil }}, nil
	case FormatXz:
		z, err := xz.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("xz header: %w", err)
		}
		return &decoder{Reader: z, name: "go xz", close: func() error { return nil }}, nil
	}
	return nil, fmt.Errorf("unsupported format %q", format)
}

// pipeSize is asked of the kernel for both pipes to the decoder (the
// default 64 KiB means a context switch per 64 KiB of output).
const pipeSize = 1 << 20

// external is a decoder process: a feeder goroutine copies the artifact
// into its stdin; its stdout is read until EOF, and only a clean exit
// turns that EOF into the end of the image.
type external struct {
	cmd    *exec.Cmd
	out    *os.File
	stderr *tail.Buffer
	fed    chan error // the feeder's result
	waited bool
	err    error
}

func startExternal(path string, args []string, src io.Reader) (*decoder, error) {
	inR, inW, err := pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	e := &external{cmd: exec.Command(path, args...), out: outR, stderr: &tail.Buffer{Max: 4096}, fed: make(chan error, 1)}
	e.cmd.Stdin, e.cmd.Stdout, e.cmd.Stderr = inR, outW, e.stderr
	err = e.cmd.Start()
	// The child has its own copies now; ours would keep the pipes open.
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	go func() {
		_, err := io.Copy(inW, src)
		inW.Close()
		// The decoder exiting early (a corrupt stream) breaks the pipe:
		// that is the decoder's story to tell, not the feeder's.
		if errors.Is(err, unix.EPIPE) {
			err = nil
		}
		e.fed <- err
	}()
	return &decoder{Reader: e, name: path, close: e.close}, nil
}

func pipe() (r, w *os.File, err error) {
	if r, w, err = os.Pipe(); err != nil {
		return nil, nil, fmt.Errorf("pipe to decoder: %w", err)
	}
	// Best effort: a smaller pipe only costs context switches.
	unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, pipeSize)
	return r, w, nil
}

func (e *external) Read(p []byte) (int, error) {
	n, err := e.out.Read(p)
	if err == io.EOF {
		// The decoder closed its output: it has exited or is about to.
		if werr := e.wait(); werr != nil {
			return n, werr
		}
	}
	return n, err
}

// wait reaps the process once and turns a failure into an error carrying
// what it printed. A feeder error (the download side) is returned as is.
func (e *external) wait() error {
	if e.waited {
		return e.err
	}
	e.waited = true
	werr := e.cmd.Wait()
	ferr := <-e.fed
	switch {
	case werr != nil:
		msg := strings.TrimSpace(e.stderr.String())
		if msg == "" {
			msg = "no message"
		}
		e.err = fmt.Errorf("%s: %s (%v)", e.cmd.Path, msg, werr)
	case ferr != nil:
		e.err = ferr
	}
	return e.err
}

// close stops the process if it is still running (the pipeline gave up)
// and waits for it and the feeder, so the artifact stream is free to be
// drained afterwards.
func (e *external) close() error {
	if !e.waited && e.cmd.Process != nil {
		e.cmd.Process.Kill()
	}
	e.out.Close()
	e.wait()
	return nil
}

// zstdContentSize reads Frame_Content_Size from the header of the zstd
// frame at the start of b (RFC 8878, 3.1.1.1), when the encoder recorded it
// (zstd(1) does for files). Only the first frame is looked at.
func zstdContentSize(b []byte) (uint64, bool) {
	if len(b) < 6 || b[0] != 0x28 || b[1] != 0xB5 || b[2] != 0x2F || b[3] != 0xFD {
		return 0, false
	}
	fhd := b[4]
	fcsFlag, single, dictFlag := fhd>>6, fhd&0x20 != 0, fhd&0x03
	p := 5
	if !single {
		p++ // Window_Descriptor
	}
	p += []int{0, 1, 2, 4}[dictFlag]
	n := []int{0, 2, 4, 8}[fcsFlag]
	if fcsFlag == 0 && single {
		n = 1
	}
	if n == 0 || len(b) < p+n {
		return 0, false
	}
	var v uint64
	for i := n - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[p+i])
	}
	if n == 2 {
		v += 256
	}
	return v, true
}
