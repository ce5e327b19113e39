package toolbundle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cure-oss/cure/tools/artifact"
	"github.com/klauspost/compress/zstd"
)

// Limits of what a bundle may be; cure-build's bundle of fio, stress-ng
// and iperf3 is ~35 MB compressed, ~110 MB unpacked.
const (
	MaxArchive      = 512 << 20 // compressed, as fetched
	MaxManifest     = 1 << 20
	MaxEntries      = 4096
	maxZstdWindow   = 64 << 20
	blockSize       = 512
	defaultUnpacked = 1 << 30
)

// Ref is where a bundle is and what it must be.
type Ref struct {
	URL  string
	Want artifact.Want
}

// Fetch downloads the bundle through f into a new file in dir and returns
// its path once its size and sha256 match (nothing else may read it
// before); on any error nothing is left behind.
func Fetch(ctx context.Context, f artifact.Fetcher, ref Ref, dir string) (string, error) {
	if f.Limit == 0 {
		f.Limit = MaxArchive
	}
	if f.Timeout == 0 {
		f.Timeout = 10 * time.Minute
	}
	p, err := f.File(ctx, ref.URL, ref.Want, dir, "toolbundle-*.tar.zst")
	if err != nil {
		return "", fmt.Errorf("tool bundle: %w", err)
	}
	return p, nil
}

// ExtractProgram copies the archive's entry bin/<name> to dst (mode
// 0755): how the runner takes the helper out of a verified bundle without
// unpacking the rest.
func ExtractProgram(archive, name, dst string) error {
	in, err := os.Open(archive)
	if err != nil {
		return fmt.Errorf("tool bundle: %w", err)
	}
	defer in.Close()
	z, err := newReader(in)
	if err != nil {
		return err
	}
	defer z.Close()
	want := "bin/" + name
	errDone := errors.New("done")
	err = readUSTAR(z, func(entry string, size int64, body io.Reader) error {
		if entry != want {
			return nil
		}
		if err := writeFile(dst, 0o755, body, size); err != nil {
			return err
		}
		return errDone
	})
	if errors.Is(err, errDone) {
		return nil
	}
	if err == nil {
		err = fmt.Errorf("no %s in the archive", want)
	}
	return fmt.Errorf("tool bundle %s: %w", archive, err)
}

func newReader(r io.Reader) (*zstd.Decoder, error) {
	z, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow), zstd.WithDecoderMaxMemory(2*maxZstdWindow))
	if err != nil {
		return nil, fmt.Errorf("tool bundle: %w", err)
	}
	return z, nil
}

// Options of Unpack.
type Options struct {
	// Tools are the tools to unpack (with what they need); the other
	// files are read past, not written.
	Tools []string
	// MaxBytes bounds the bytes written (tmpfs is RAM); 0 means 1 GiB.
	MaxBytes int64
}

// Unpack reads a bundle (zstd-compressed ustar) and writes the files the
// requested tools need under dir, which must be empty or absent (each helper
// unpacks into a directory of its own). Every entry must be named in the
// manifest with the size it states; anything else is refused.
func Unpack(r io.Reader, dir string, o Options) (*Bundle, error) {
	z, err := newReader(r)
	if err != nil {
		return nil, err
	}
	defer z.Close()
	return unpack(z, dir, o)
}

func unpack(r io.Reader, dir string, o Options) (*Bundle, error) {
	if o.MaxBytes <= 0 {
		o.MaxBytes = defaultUnpacked
	}
	var (
		m      *Manifest
		want   map[string]bool
		byPath = map[string]File{}
		seen   = map[string]bool{}
	)
	entries := 0
	err := readUSTAR(r, func(name string, size int64, body io.Reader) error {
		entries++
		if entries > MaxEntries {
			return fmt.Errorf("more than %d entries", MaxEntries)
		}
		if m == nil {
			if name != ManifestName || size > MaxManifest {
				return fmt.Errorf("first entry is %q (%d bytes), want %s", name, size, ManifestName)
			}
			raw, err := io.ReadAll(body)
			if err != nil {
				return err
			}
			if m, err = ParseManifest(raw); err != nil {
				return err
			}
			if want, err = m.needed(o.Tools); err != nil {
				return err
			}
			var total int64
			for _, f := range m.Files {
				byPath[f.Path] = f
				if want[f.Path] {
					total += f.Size
				}
			}
			if total > o.MaxBytes {
				return fmt.Errorf("%s need %d bytes unpacked, over the %d-byte bound", o.Tools, total, o.MaxBytes)
			}
			return nil
		}
		f, ok := byPath[name]
		switch {
		case !ok:
			return fmt.Errorf("entry %q is not in the manifest", name)
		case seen[name]:
			return fmt.Errorf("entry %q appears twice", name)
		case size != f.Size:
			return fmt.Errorf("entry %s is %d bytes, the manifest says %d", name, size, f.Size)
		}
		seen[name] = true
		if !want[name] {
			return nil
		}
		return writeFile(filepath.Join(dir, filepath.FromSlash(name)), os.FileMode(f.Mode), body, size)
	})
	if err != nil {
		return nil, fmt.Errorf("tool bundle: %w", err)
	}
	if m == nil {
		return nil, errors.New("tool bundle: empty archive")
	}
	for p := range want {
		if !seen[p] {
			return nil, fmt.Errorf("tool bundle: %s is in the manifest but not in the archive", p)
		}
	}
	return &Bundle{Dir: dir, Manifest: m, Unpacked: append([]string(nil), o.Tools...)}, nil
}

// writeFile creates p (never over an existing file) with size bytes.
func writeFile(p string, mode os.FileMode, body io.Reader, size int64) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = fmt.Errorf("%s: %d of %d bytes", p, n, size)
	}
	return err
}

// readUSTAR calls each for every regular-file entry of a ustar archive, in
// order. Anything but a regular file with a valid header checksum is an
// error; so is a truncated archive.
func readUSTAR(r io.Reader, each func(name string, size int64, body io.Reader) error) error {
	var h [blockSize]byte
	for {
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return fmt.Errorf("reading a header: %w", err)
		}
		if h == [blockSize]byte{} {
			return nil // end of archive (the second zero block is not needed)
		}
		name, size, err := parseHeader(&h)
		if err != nil {
			return err
		}
		body := &io.LimitedReader{R: r, N: size}
		if err := each(name, size, body); err != nil {
			return err
		}
		// What each did not read, and the padding to the next block.
		pad := body.N + (blockSize-size%blockSize)%blockSize
		if _, err := io.CopyN(io.Discard, r, pad); err != nil {
			return fmt.Errorf("entry %s: %w", name, err)
		}
	}
}

func parseHeader(h *[blockSize]byte) (string, int64, error) {
	if !bytes.Equal(h[257:263], []byte("ustar\x00")) {
		return "", 0, errors.New("not a ustar header")
	}
	want, err := octal(h[148:156])
	if err != nil {
		return "", 0, fmt.Errorf("header checksum: %w", err)
	}
	var sum int64
	for i, c := range h {
		if i >= 148 && i < 156 {
			c = ' '
		}
		sum += int64(c)
	}
	if sum != want {
		return "", 0, fmt.Errorf("header checksum %d, computed %d", want, sum)
	}
	name := cstring(h[0:100])
	if prefix := cstring(h[345:500]); prefix != "" {
		name = prefix + "/" + name
	}
	if t := h[156]; t != '0' && t != 0 {
		return "", 0, fmt.Errorf("entry %q has type %q: only regular files are accepted", name, t)
	}
	size, err := octal(h[124:136])
	if err != nil {
		return "", 0, fmt.Errorf("entry %q size: %w", name, err)
	}
	return name, size, nil
}

func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

func octal(b []byte) (int64, error) {
	s := string(bytes.Trim(b, " \x00"))
	v, err := strconv.ParseInt(s, 8, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not an octal number", s)
	}
	return v, nil
}

// ReadManifest reads a bundle's manifest (its first entry) and nothing
// more: what the coordinator checks when it is given a bundle to serve.
func ReadManifest(r io.Reader) (*Manifest, error) {
	z, err := newReader(r)
	if err != nil {
		return nil, err
	}
	defer z.Close()
	var m *Manifest
	errFound := errors.New("found")
	err = readUSTAR(z, func(name string, size int64, body io.Reader) error {
		if name != ManifestName || size > MaxManifest {
			return fmt.Errorf("first entry is %q (%d bytes), want %s", name, size, ManifestName)
		}
		raw, err := io.ReadAll(body)
		if err != nil {
			return err
		}
		if m, err = ParseManifest(raw); err != nil {
			return err
		}
		return errFound
	})
	if m == nil || !errors.Is(err, errFound) {
		if err == nil {
			err = errors.New("empty archive")
		}
		return nil, fmt.Errorf("tool bundle: %w", err)
	}
	return m, nil
}
