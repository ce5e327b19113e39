package builder

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path"
	"sort"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/u-root/mkuimage/cpio"
)

// ZstdArgs compress the initramfs with the reference zstd(1): level 22 is
// ~2.6 MB smaller than the Go encoder's best level on the default image.
// -T1 keeps the output a function of the input (and of the zstd version,
// which report.json records). Its window is the archive's size rounded up
// to a power of two (64 MiB for ~55 MB), which the kernel allocates with
// vmalloc while unpacking the initramfs (lib/decompress_unzstd.c accepts
// windows up to 2 GiB outside the pre-boot decompressor).
var ZstdArgs = []string{"-q", "-c", "-T1", "--no-progress", "--ultra", "-22"}

// zstdTool is the zstd(1) binary; a variable so tests can point it at a
// missing one.
var zstdTool = "zstd"

// compressZstd runs zstd(1) with ZstdArgs over data.
func compressZstd(data []byte) ([]byte, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(context.Background(), zstdTool, ZstdArgs...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(data), &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", zstdTool, strings.Join(ZstdArgs, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

// zstdVersion is `zstd -V`'s first line, recorded so a rebuild that
// differs can be told apart from one with another compressor.
func zstdVersion() (string, error) {
	out, err := exec.CommandContext(context.Background(), zstdTool, "-V").Output()
	if err != nil {
		return "", fmt.Errorf("%s -V: %w", zstdTool, err)
	}
	v := strings.TrimSpace(string(out))
	v = strings.Trim(strings.TrimSpace(strings.SplitN(v, "\n", 2)[0]), "* ")
	return v, nil
}

// Category is one line of report.json's size breakdown: what a group of
// files costs.
type Category struct {
	Name  string `json:"name"`
	Files int    `json:"files"`
	// Bytes is the files' size, uncompressed.
	Bytes int64 `json:"bytes"`
	// ZstBytes is the category's share of initramfs.cpio.zst: the total
	// split in proportion to each category's size when compressed alone,
	// so the column sums to the artifact's size exactly.
	ZstBytes int64 `json:"zst_bytes"`
}

// archiveCategory holds what is not file contents: cpio headers, names,
// padding, directories and symlinks. Its compressed cost is spread over the
// file categories (it compresses to almost nothing).
const archiveCategory = "archive: cpio headers, directories, links"

// categorize says which breakdown line a file belongs to, by image path.
func categorize(p string) string {
	parts := strings.Split(p, "/")
	switch {
	case p == "bbin/bb":
		return "busybox: runner, shell, commands (Go; u-root's init too when it is PID 1)"
	case p == "init":
		return "init: PID 1 built on its own (Go)"
	case strings.HasPrefix(p, "lib/modules/"):
		// lib/modules/<kver>/kernel/drivers/net/ethernet/<vendor>/...
		if len(parts) < 5 || parts[3] != "kernel" {
			return "modules: index (modules.dep, modules.alias)"
		}
		rest := parts[4 : len(parts)-1]
		n := 1
		switch {
		case len(rest) >= 4 && rest[0] == "drivers" && rest[1] == "net" && rest[2] == "ethernet":
			n = 4
		case len(rest) >= 2 && rest[0] == "drivers":
			n = 2
		}
		if n > len(rest) {
			n = len(rest)
		}
		if n == 0 {
			return "modules: other"
		}
		return "modules: " + strings.Join(rest[:n], "/")
	case strings.HasPrefix(p, "lib/firmware/"):
		return "firmware"
	case strings.HasSuffix(p, ".so") || strings.Contains(path.Base(p), ".so."):
		return "libraries"
	case strings.HasPrefix(p, "usr/bin/") || strings.HasPrefix(p, "usr/sbin/") ||
		strings.HasPrefix(p, "bin/") || strings.HasPrefix(p, "sbin/"):
		return "tools: " + path.Base(p)
	case p == "usr/share/misc/pci.ids":
		return "data: pci.ids"
	case strings.HasPrefix(p, "etc/"):
		return "config: /etc"
	}
	return "other"
}

// sizeBreakdown groups the archive's files by categorize, measures each
// group compressed alone with a fast encoder, and splits zstTotal in those
// proportions. The lines sum to the archive's length (Bytes) and to
// zstTotal (ZstBytes); they are sorted by ZstBytes, largest first.
func sizeBreakdown(archive []byte, zstTotal int64) ([]Category, error) {
	byName := map[string]*Category{}
	data := map[string]*bytes.Buffer{}
	var fileBytes int64
	rr := cpio.Newc.Reader(bytes.NewReader(archive))
	err := cpio.ForEachRecord(rr, func(r cpio.Record) error {
		if r.Mode&cpio.S_IFMT != cpio.S_IFREG {
			return nil
		}
		name := categorize(r.Name)
		c := byName[name]
		if c == nil {
			c = &Category{Name: name}
			byName[name] = c
			data[name] = &bytes.Buffer{}
		}
		c.Files++
		c.Bytes += int64(r.FileSize)
		fileBytes += int64(r.FileSize)
		if _, err := io.Copy(data[name], io.NewSectionReader(r.ReaderAt, 0, int64(r.FileSize))); err != nil {
			return fmt.Errorf("reading %s from archive: %w", r.Name, err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("size breakdown: %w", err)
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	defer enc.Close()
	alone := map[string]int64{}
	var sumAlone int64
	var out []Category
	for name, c := range byName {
		alone[name] = int64(len(enc.EncodeAll(data[name].Bytes(), nil)))
		sumAlone += alone[name]
		out = append(out, *c)
	}
	out = append(out, Category{Name: archiveCategory, Bytes: int64(len(archive)) - fileBytes})
	var given int64
	for i := range out {
		if sumAlone > 0 {
			out[i].ZstBytes = zstTotal * alone[out[i].Name] / sumAlone
		}
		given += out[i].ZstBytes
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ZstBytes != out[j].ZstBytes {
			return out[i].ZstBytes > out[j].ZstBytes
		}
		return out[i].Name < out[j].Name
	})
	// Integer division leaves a few bytes; the largest line takes them.
	out[0].ZstBytes += zstTotal - given
	return out, nil
}

// FormatBreakdown renders a breakdown as an aligned table (MB = 10^6 bytes).
func FormatBreakdown(cs []Category) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%10s %10s %6s  %s\n", "zst MB", "cpio MB", "files", "category")
	var z, u int64
	for _, c := range cs {
		fmt.Fprintf(&b, "%10.3f %10.3f %6d  %s\n", float64(c.ZstBytes)/1e6, float64(c.Bytes)/1e6, c.Files, c.Name)
		z += c.ZstBytes
		u += c.Bytes
	}
	fmt.Fprintf(&b, "%10.3f %10.3f %6s  total\n", float64(z)/1e6, float64(u)/1e6, "")
	return b.String()
}
