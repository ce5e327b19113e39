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
}

// Three zstd decoders, none best everywhere (GB/s of output on this
// machine, `make bench-install` and tools/zstd's benchmarks):
//
//	                          cure zstd   klauspost   zstd(1) via pipes
//	90%-zero disk image         4-6.5       ~1.0        ~1.5-2 (pipe-bound)
//	stored (random) data        ~2.9        ~2.2        ~1 (two pipe copies)
//	ext4 image, 3.4x at -3      ~0.4        ~0.6        ~0.6-0.7
//
// (Decoder alone, idle machine. Through the whole writer on a loaded one,
// an ext4 image 54% full came out at 0.82 cure, 0.59 klauspost, 0.86
// zstd(1): docs/ARCHITECTURE.md, tools/zstd.)
//
// tools/zstd turns RLE and raw blocks into a memclr or one copy; its
// Huffman/FSE path is pure Go and slower. What decides is the share of
// the image that comes out of compressed blocks, c. From the costs above
// (per GiB: zeros 0.18 s vs 0.6 s, compressed 2.5 s vs 1.5 s) cure wins
// while c < ~0.3. The frame header's content size against the artifact
// size gives the expansion R; filesystem data compresses ~3.4x at the
// levels images use, so c ≈ 3.4/R, and c < 0.3 means R ≥ 10. A stored
// stream (R < 1.5) has no compressed blocks to speak of. Between the two,
// or without a recorded size, the C decoder if present, else klauspost.
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
// and choice is Options.Decoder.
func newDecoder(format, choice string, r io.Reader, size int64) (*decoder, error) {
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
			z, err := curezstd.NewReader(r, curezstd.WithMaxWindow(maxWindow))
			if err != nil {
				return nil, fmt.Errorf("zstd: %w", err)
			}
			return &decoder{Reader: z, name: "cure zstd", close: func() error { z.Close(); return nil }}, nil
		}
		z, err := zstd.NewReader(r, zstd.WithDecoderMaxMemory(2*maxWindow), zstd.WithDecoderMaxWindow(maxWindow))
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
