// Package storage measures sequential read throughput of block devices
// with O_DIRECT and verifies the readback (the range is read twice and the
// per-block hashes compared). It writes only to a scratch range the suite
// names explicitly, on exactly one disk that is not the boot medium.
package storage

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/checks"
)

// File is an open block device.
type File interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
	Close() error
}

// Scratch is a range the suite allows the check to overwrite.
type Scratch struct {
	Device string // disk name, e.g. nvme1n1: exactly one disk, never a glob
	Offset uint64
	Length uint64
}

// Options configure the check.
type Options struct {
	// Root holds sys/block, proc/self/mounts, proc/cmdline and dev/ ("/" on a node).
	Root string
	// Disks lists disks with BootMedium marked; nil means blockdev.List and
	// blockdev.MarkBootMedium under Root.
	Disks func() ([]blockdev.Disk, error)
	// Select keeps the disks to read by component id (disk/<name>); nil keeps all.
	Select func(component string) bool
	// Offset and Length give the range read on each disk; Length 0 means
	// DefaultLength, and the range is clipped to the disk.
	Offset, Length uint64
	// BlockSize of each read, a multiple of 4096 (default 1 MiB).
	BlockSize int
	// Verify reads the range a second time and compares block hashes.
	Verify bool
	// ReadMBps bars the read throughput (MB = 10^6 bytes, as drives are rated).
	ReadMBps checks.Limit
	// Write, when set, also writes a pattern to the scratch range, reads it
	// back and compares. Nothing else is ever written.
	Write *Scratch
	// WriteMBps bars the write throughput (including the final flush).
	WriteMBps checks.Limit
	// Open opens a device for reading or writing; nil means OpenDirect.
	Open func(path string, write bool) (File, error)
}

// DefaultLength is read when Options.Length is zero.
const DefaultLength = 1 << 30

const align = 4096

// Check reads (and, with Write, writes) each selected disk and returns one
// verdict per disk, component disk/<name>.
func Check(ctx context.Context, o Options) ([]checks.Verdict, error) {
	if o.BlockSize == 0 {
		o.BlockSize = 1 << 20
	}
	if o.BlockSize < 0 || o.BlockSize%align != 0 {
		return nil, fmt.Errorf("storage: block size %d is not a positive multiple of %d", o.BlockSize, align)
	}
	if o.Offset%align != 0 || o.Length%align != 0 {
		return nil, fmt.Errorf("storage: range offset %d length %d must be multiples of %d for O_DIRECT", o.Offset, o.Length, align)
	}
	if o.Open == nil {
		o.Open = OpenDirect
	}
	disks, markErr := ListDisks(o.Root, o.Disks)
	if disks == nil && markErr != nil {
		return nil, markErr
	}
	if o.Write != nil {
		if err := CheckScratch(disks, markErr, *o.Write); err != nil {
			return nil, err
		}
	}
	var out []checks.Verdict
	for _, d := range disks {
		comp := "disk/" + d.Name
		writes := o.Write != nil && o.Write.Device == d.Name
		if o.Select != nil && !o.Select(comp) && !writes {
			continue
		}
		if err := ctx.Err(); err != nil {
			return out, err
		}
		v, err := o.disk(ctx, d, comp, writes)
		if err != nil {
			if ctx.Err() != nil {
				return out, err
			}
			v = checks.Verdict{Component: comp, Status: checks.Error, Message: err.Error()}
		}
		out = append(out, v)
	}
	return out, nil
}

// ListDisks returns the disks (from list, or blockdev under root when
// nil), and separately an error from boot-medium detection (which only
// matters when writing). The storage checks share it.
func ListDisks(root string, list func() ([]blockdev.Disk, error)) ([]blockdev.Disk, error) {
	if list != nil {
		d, err := list()
		if err != nil {
			return nil, fmt.Errorf("storage: listing disks: %w", err)
		}
		return d, nil
	}
	disks, err := blockdev.List(root)
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	cmdline, err := os.ReadFile(filepath.Join(root, "proc/cmdline"))
	if err != nil {
		return disks, fmt.Errorf("storage: reading kernel command line for boot-medium detection: %w", err)
	}
	return disks, blockdev.MarkBootMedium(disks, filepath.Join(root, "proc/self/mounts"), strings.TrimSpace(string(cmdline)))
}

// CheckScratch refuses a write unless the target is one known, unused,
// writable disk and the range lies inside it. The storage checks share it.
func CheckScratch(disks []blockdev.Disk, markErr error, s Scratch) error {
	if markErr != nil {
		return fmt.Errorf("storage: refusing to write scratch range on %q: cannot tell the boot medium: %w", s.Device, markErr)
	}
	if s.Device == "" || strings.ContainsAny(s.Device, "*?[/") {
		return fmt.Errorf("storage: scratch device %q must name exactly one disk (e.g. nvme1n1)", s.Device)
	}
	if s.Length == 0 || s.Offset%align != 0 || s.Length%align != 0 {
		return fmt.Errorf("storage: scratch range on %s: offset %d length %d must be non-empty multiples of %d", s.Device, s.Offset, s.Length, align)
	}
	for _, d := range disks {
		if d.Name != s.Device {
			continue
		}
		switch {
		case d.BootMedium:
			return fmt.Errorf("storage: refusing to write scratch range on %s: it is the boot medium or has a mounted filesystem", d.Name)
		case d.ReadOnly:
			return fmt.Errorf("storage: refusing to write scratch range on %s: the disk is read-only", d.Name)
		case len(d.Holders) > 0:
			return fmt.Errorf("storage: refusing to write scratch range on %s: in use by %s", d.Name, strings.Join(d.Holders, ", "))
		case s.Offset+s.Length > d.SizeBytes || s.Offset+s.Length < s.Offset:
			return fmt.Errorf("storage: scratch range %d+%d on %s ends past the disk's %d bytes", s.Offset, s.Length, d.Name, d.SizeBytes)
		}
		return nil
	}
	names := make([]string, 0, len(disks))
	for _, d := range disks {
		names = append(names, d.Name)
	}
	return fmt.Errorf("storage: scratch device %q not found (disks: %s)", s.Device, strings.Join(names, ", "))
}

func (o Options) disk(ctx context.Context, d blockdev.Disk, comp string, writes bool) (checks.Verdict, error) {
	if o.Offset >= d.SizeBytes {
		return checks.Verdict{}, fmt.Errorf("read offset %d is past the end of %s (%d bytes)", o.Offset, d.Name, d.SizeBytes)
	}
	length := o.Length
	if length == 0 {
		length = DefaultLength
	}
	length = min(length, d.SizeBytes-o.Offset)
	length -= length % align
	path := filepath.Join(o.Root, "dev", d.Name)
	f, err := o.Open(path, false)
	if err != nil {
		return checks.Verdict{}, err
	}
	defer f.Close()

	seed := maphash.MakeSeed()
	first, dur, err := readRange(ctx, f, o.Offset, length, o.BlockSize, seed)
	if err != nil {
		return checks.Verdict{}, fmt.Errorf("reading %s: %w", path, err)
	}
	rs := []checks.Reading{
		checks.Value("readMBps", mbps(length, dur), o.ReadMBps).In("MB/s"),
		checks.Value("readMB", float64(length)/1e6, checks.Limit{}).In("MB"),
	}
	var notes []string
	if o.Verify {
		second, _, err := readRange(ctx, f, o.Offset, length, o.BlockSize, seed)
		if err != nil {
			return checks.Verdict{}, fmt.Errorf("reading %s again: %w", path, err)
		}
		bad, at := compare(first, second)
		rs = append(rs, checks.Value("readbackMismatches", float64(bad), checks.AtMost(0)))
		if bad > 0 {
			notes = append(notes, fmt.Sprintf("first differing block at byte %d", o.Offset+uint64(at)*uint64(o.BlockSize)))
		}
	}
	if writes {
		wrs, note, err := o.writeScratch(ctx, path)
		if err != nil {
			return checks.Verdict{}, err
		}
		rs = append(rs, wrs...)
		if note != "" {
			notes = append(notes, note)
		}
	}
	v := checks.Judge(comp, rs...)
	for _, n := range notes {
		v.Message = strings.TrimPrefix(v.Message+"; "+n, "; ")
	}
	return v, nil
}

// readRange reads [off, off+length) in bs blocks, hashing each block in a
// second goroutine so hashing does not slow the timed I/O.
func readRange(ctx context.Context, f File, off, length uint64, bs int, seed maphash.Seed) ([]uint64, time.Duration, error) {
	const depth = 4
	free := make(chan []byte, depth)
	for range depth {
		free <- alignedBuf(bs)
	}
	type block struct {
		b []byte
		n int
	}
	full := make(chan block, depth)
	nblocks := (length + uint64(bs) - 1) / uint64(bs)
	sums := make([]uint64, 0, nblocks)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for blk := range full {
			sums = append(sums, maphash.Bytes(seed, blk.b[:blk.n]))
			free <- blk.b
		}
	}()
	start := time.Now()
	var err error
	for pos := uint64(0); pos < length; pos += uint64(bs) {
		if err = ctx.Err(); err != nil {
			break
		}
		b := <-free
		n := int(min(uint64(bs), length-pos))
		var got int
		got, err = f.ReadAt(b[:n], int64(off+pos))
		if err == nil && got != n {
			err = fmt.Errorf("short read at byte %d: %d of %d bytes", off+pos, got, n)
		}
		if err != nil {
			err = fmt.Errorf("at byte %d: %w", off+pos, err)
			break
		}
		full <- block{b, n}
	}
	close(full)
	<-done
	return sums, time.Since(start), err
}

func compare(a, b []uint64) (bad, first int) {
	first = -1
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	return bad, first
}

// writeScratch writes a seeded pattern over the scratch range, flushes,
// reads it back and compares.
func (o Options) writeScratch(ctx context.Context, path string) ([]checks.Reading, string, error) {
	s := *o.Write
	f, err := o.Open(path, true)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	seed := rand.Uint64()
	buf := alignedBuf(o.BlockSize)
	start := time.Now()
	for pos := uint64(0); pos < s.Length; pos += uint64(o.BlockSize) {
		if err := ctx.Err(); err != nil {
			return nil, "", err
		}
		n := int(min(uint64(o.BlockSize), s.Length-pos))
		pattern(buf[:n], seed, s.Offset+pos)
		if _, err := f.WriteAt(buf[:n], int64(s.Offset+pos)); err != nil {
			return nil, "", fmt.Errorf("writing scratch range of %s at byte %d: %w", path, s.Offset+pos, err)
		}
	}
	if err := f.Sync(); err != nil {
		return nil, "", fmt.Errorf("flushing %s: %w", path, err)
	}
	dur := time.Since(start)
	want := alignedBuf(o.BlockSize)
	var bad int
	note := ""
	for pos := uint64(0); pos < s.Length; pos += uint64(o.BlockSize) {
		if err := ctx.Err(); err != nil {
			return nil, "", err
		}
		n := int(min(uint64(o.BlockSize), s.Length-pos))
		if _, err := f.ReadAt(buf[:n], int64(s.Offset+pos)); err != nil {
			return nil, "", fmt.Errorf("reading back scratch range of %s at byte %d: %w", path, s.Offset+pos, err)
		}
		pattern(want[:n], seed, s.Offset+pos)
		if string(buf[:n]) != string(want[:n]) {
			if bad == 0 {
				note = fmt.Sprintf("scratch readback differs first in the block at byte %d", s.Offset+pos)
			}
			bad++
		}
	}
	return []checks.Reading{
		checks.Value("writeMBps", mbps(s.Length, dur), o.WriteMBps).In("MB/s"),
		checks.Value("writeVerifyMismatches", float64(bad), checks.AtMost(0)),
	}, note, nil
}

// pattern fills b with a stream derived from seed and the byte offset, so
// every block of the scratch range holds distinct data.
func pattern(b []byte, seed, off uint64) {
	r := rand.NewPCG(seed, off)
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
}

func mbps(n uint64, d time.Duration) float64 {
	if d <= 0 {
		d = time.Nanosecond
	}
	return float64(n) / 1e6 / d.Seconds()
}

// alignedBuf returns n bytes starting on a 4096-byte boundary, as O_DIRECT
// requires of user buffers.
func alignedBuf(n int) []byte {
	b := make([]byte, n+align)
	off := align - int(addr(b)%align)
	if off == align {
		off = 0
	}
	return b[off : off+n : off+n]
}

var errNotBlock = errors.New("not a block device")

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
