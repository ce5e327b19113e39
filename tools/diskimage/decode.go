package diskimage

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
	"golang.org/x/sys/unix"
)

// Decoder choices (Options.Decoder).
const (
	// DecoderAuto runs the reference C decoder (zstd(1), xz(1)) when the
	// image carries it and the Go decoder otherwise.
	DecoderAuto = ""
	// DecoderGo always decodes in this process.
	DecoderGo = "go"
)

// maxWindow bounds the zstd window either decoder accepts (and xz(1)'s
// memory), so a hostile frame header cannot demand gigabytes of RAM in an
// in-memory image. 512 MiB covers `zstd --long` up to window log 29.
const maxWindow = 512 << 20

// externalDecoders are the C reference decoders, preferred where present.
// Why exec rather than Go: on images that are mostly zeros the Go zstd
// decoder fills RLE blocks a byte at a time (~1.2 GB/s here, measured by
// `make bench-install`), slower than `dd` writes zeros, while zstd(1)
// memsets them (4.7 GB/s); xz(1) is several times ulikunitz/xz. gzip stays
// in Go: klauspost's inflate is faster than gzip(1), which is the baseline.
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

// minExecRatio is the expansion (image bytes per artifact byte) from which
// zstd(1) is worth its two pipe copies. A stored (incompressible) stream
// decodes at memcpy speed in Go too, and there the copies through the
// pipes cost more CPU than they save (2.6 vs 2.0 CPU-seconds per GiB on
// the bench's random image); on a 10x image zstd(1) needs half the CPU.
const minExecRatio = 1.5

// newDecoder starts the decoder for format on r; size is the artifact's
// and choice is Options.Decoder.
func newDecoder(format, choice string, r io.Reader, size int64) (*decoder, error) {
	if args, ok := externalDecoders[format]; ok && choice == DecoderAuto {
		path, err := exec.LookPath(args[0])
		useExec := err == nil
		if useExec && format == FormatZstd {
			if p, ok := r.(interface{ peek() ([]byte, error) }); ok {
				if head, err := p.peek(); err == nil {
					if content, ok := zstdContentSize(head); ok && float64(content) < minExecRatio*float64(size) {
						useExec = false
					}
				}
			}
		}
		if useExec {
			return startExternal(path, args[1:], r)
		}
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
		z, err := zstd.NewReader(r, zstd.WithDecoderMaxMemory(2*maxWindow), zstd.WithDecoderMaxWindow(maxWindow))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		return &decoder{Reader: z, name: "go zstd", close: func() error { z.Close(); return nil }}, nil
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
	stderr *tailBuffer
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
	e := &external{cmd: exec.Command(path, args...), out: outR, stderr: &tailBuffer{max: 4096}, fed: make(chan error, 1)}
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

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = bytes.Clone(t.b[over:])
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
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
