// Package gpt repairs the GUID partition table of a disk image written onto
// a larger disk: the image's backup header sits at the image's end, not the
// disk's, and its last partition ends where the image ended. Plan computes
// the change as data; Apply writes it. Everything goes through an
// io.ReaderAt/io.WriterAt seam, so tests use files and a node uses the
// block device.
//
// Layout (UEFI 2.10 §5.3): LBA 0 protective MBR, LBA 1 primary header,
// entries from the header's PartitionEntryLBA; the backup entries sit just
// before the backup header in the disk's last LBA.
package gpt

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"unicode/utf16"
)

// ErrNotGPT is returned for a disk with an MBR partition table (or none):
// there is no backup header to move.
var ErrNotGPT = errors.New("not a GPT disk")

const (
	signature         = "EFI PART"
	minHeaderSize     = 92
	mbrTypeProtective = 0xEE
	maxEntries        = 1024 // a sane upper bound; the default is 128
	maxEntrySize      = 4096 // 128 by default; UEFI allows 128 times any power of two
)

// Header is the part of a GPT header this package reads or changes.
type Header struct {
	HeaderSize     uint32
	MyLBA          uint64
	AlternateLBA   uint64
	FirstUsableLBA uint64
	LastUsableLBA  uint64
	DiskGUID       [16]byte
	EntriesLBA     uint64
	NumEntries     uint32
	EntrySize      uint32
	EntriesCRC     uint32
	raw            []byte // the whole header sector, to keep reserved bytes
}

// Partition is one used entry of the table.
type Partition struct {
	Number   int // 1-based, as Linux names partitions
	TypeGUID [16]byte
	FirstLBA uint64
	LastLBA  uint64
	Name     string
}

// Table is a parsed, CRC-checked GPT.
type Table struct {
	SectorSize int
	Primary    Header
	Partitions []Partition
	entries    []byte // the raw entry array (NumEntries*EntrySize)
}

// Read parses the protective MBR, the primary header at LBA 1 and its
// entry array from r, checking both CRC32s. diskSize is the size of the
// device (or file) in bytes; the header must describe a disk no larger.
func Read(r io.ReaderAt, sectorSize int, diskSize int64) (*Table, error) {
	if sectorSize != 512 && sectorSize != 4096 {
		return nil, fmt.Errorf("gpt: sector size %d: expected 512 or 4096", sectorSize)
	}
	ss := int64(sectorSize)
	if diskSize < 3*ss {
		return nil, fmt.Errorf("gpt: disk size %d bytes: too small to hold a GPT", diskSize)
	}
	mbr := make([]byte, 512)
	if _, err := r.ReadAt(mbr, 0); err != nil {
		return nil, fmt.Errorf("gpt: read protective MBR at LBA 0: %w", err)
	}
	if mbr[510] != 0x55 || mbr[511] != 0xAA {
		return nil, fmt.Errorf("gpt: LBA 0: expected MBR signature 55 AA, found %02X %02X", mbr[510], mbr[511])
	}
	if protectiveEntry(mbr) < 0 {
		return nil, fmt.Errorf("gpt: LBA 0: no protective MBR entry (type 0xEE): %w", ErrNotGPT)
	}
	sec := make([]byte, sectorSize)
	if _, err := r.ReadAt(sec, ss); err != nil {
		return nil, fmt.Errorf("gpt: read primary header at LBA 1: %w", err)
	}
	h, err := parseHeader(sec, "primary header at LBA 1")
	if err != nil {
		return nil, err
	}
	if h.MyLBA != 1 {
		return nil, fmt.Errorf("gpt: primary header at LBA 1: MyLBA is %d, expected 1", h.MyLBA)
	}
	lastLBA := uint64(diskSize/ss) - 1
	if h.AlternateLBA > lastLBA || h.LastUsableLBA >= h.AlternateLBA || h.FirstUsableLBA > h.LastUsableLBA {
		return nil, fmt.Errorf("gpt: primary header: usable LBAs %d-%d, backup at LBA %d do not fit a disk whose last LBA is %d (image larger than the disk?)",
			h.FirstUsableLBA, h.LastUsableLBA, h.AlternateLBA, lastLBA)
	}
	// The entry array size comes from the header: bound it before
	// allocating, and keep the array between the header and the first
	// usable LBA, where Apply rewrites it, so no partition data is in it.
	if h.EntrySize < 128 || h.EntrySize > maxEntrySize || h.EntrySize&(h.EntrySize-1) != 0 {
		return nil, fmt.Errorf("gpt: primary header: partition entry size %d: expected 128 times a power of two, at most %d", h.EntrySize, maxEntrySize)
	}
	if h.NumEntries == 0 || h.NumEntries > maxEntries {
		return nil, fmt.Errorf("gpt: primary header: %d partition entries: expected 1-%d", h.NumEntries, maxEntries)
	}
	arrayBytes := uint64(h.NumEntries) * uint64(h.EntrySize) // <= 2^22
	arraySectors := (arrayBytes + uint64(ss) - 1) / uint64(ss)
	if h.EntriesLBA < 2 || h.EntriesLBA >= h.FirstUsableLBA || arraySectors > h.FirstUsableLBA-h.EntriesLBA {
		return nil, fmt.Errorf("gpt: primary header: partition entry array at LBA %d (%d sectors): expected it after the header at LBA 1 and before the first usable LBA %d",
			h.EntriesLBA, arraySectors, h.FirstUsableLBA)
	}
	entries := make([]byte, arrayBytes)
	if _, err := r.ReadAt(entries, int64(h.EntriesLBA)*ss); err != nil {
		return nil, fmt.Errorf("gpt: read %d partition entries at LBA %d: %w", h.NumEntries, h.EntriesLBA, err)
	}
	if got := crc32.ChecksumIEEE(entries); got != h.EntriesCRC {
		return nil, fmt.Errorf("gpt: partition entry array at LBA %d: CRC32 %08x, header says %08x", h.EntriesLBA, got, h.EntriesCRC)
	}
	t := &Table{SectorSize: sectorSize, Primary: *h, entries: entries}
	parts, err := parseEntries(entries, h)
	if err != nil {
		return nil, err
	}
	t.Partitions = parts
	return t, nil
}

// parseEntries decodes the used entries of the array and checks that each
// lies in the usable range and that no two overlap: PlanFix and Apply
// reason about "the partition after this one", which an overlap defeats.
func parseEntries(entries []byte, h *Header) ([]Partition, error) {
	size := int(h.EntrySize)
	if size < 128 || len(entries) < int(h.NumEntries)*size {
		return nil, fmt.Errorf("gpt: partition entry array of %d bytes: too short for %d entries of %d bytes", len(entries), h.NumEntries, h.EntrySize)
	}
	var parts []Partition
	for i := range int(h.NumEntries) {
		e := entries[i*size:]
		var p Partition
		copy(p.TypeGUID[:], e[0:16])
		if p.TypeGUID == ([16]byte{}) {
			continue // unused entry
		}
		p.Number = i + 1
		p.FirstLBA = binary.LittleEndian.Uint64(e[32:])
		p.LastLBA = binary.LittleEndian.Uint64(e[40:])
		p.Name = decodeName(e[56:128])
		if p.FirstLBA < h.FirstUsableLBA || p.LastLBA > h.LastUsableLBA || p.FirstLBA > p.LastLBA {
			return nil, fmt.Errorf("gpt: partition %d (%q): LBAs %d-%d lie outside the usable range %d-%d", p.Number, p.Name, p.FirstLBA, p.LastLBA, h.FirstUsableLBA, h.LastUsableLBA)
		}
		parts = append(parts, p)
	}
	byStart := slices.Clone(parts)
	slices.SortFunc(byStart, func(a, b Partition) int { return cmp.Compare(a.FirstLBA, b.FirstLBA) })
	for i := 1; i < len(byStart); i++ {
		if a, b := byStart[i-1], byStart[i]; b.FirstLBA <= a.LastLBA {
			return nil, fmt.Errorf("gpt: partition %d (%q, LBAs %d-%d) overlaps partition %d (%q, LBAs %d-%d)", b.Number, b.Name, b.FirstLBA, b.LastLBA, a.Number, a.Name, a.FirstLBA, a.LastLBA)
		}
	}
	return parts, nil
}

func parseHeader(sec []byte, where string) (*Header, error) {
	if len(sec) < minHeaderSize {
		return nil, fmt.Errorf("gpt: %s: %d bytes, shorter than the %d-byte header", where, len(sec), minHeaderSize)
	}
	if string(sec[:8]) != signature {
		return nil, fmt.Errorf("gpt: %s: expected signature %q, found %q", where, signature, sec[:8])
	}
	le := binary.LittleEndian
	h := &Header{HeaderSize: le.Uint32(sec[12:])}
	if h.HeaderSize < minHeaderSize || int(h.HeaderSize) > len(sec) {
		return nil, fmt.Errorf("gpt: %s: header size %d: expected %d-%d", where, h.HeaderSize, minHeaderSize, len(sec))
	}
	if got, want := headerCRC(sec[:h.HeaderSize]), le.Uint32(sec[16:]); got != want {
		return nil, fmt.Errorf("gpt: %s: header CRC32 %08x, header says %08x", where, got, want)
	}
	h.MyLBA = le.Uint64(sec[24:])
	h.AlternateLBA = le.Uint64(sec[32:])
	h.FirstUsableLBA = le.Uint64(sec[40:])
	h.LastUsableLBA = le.Uint64(sec[48:])
	copy(h.DiskGUID[:], sec[56:72])
	h.EntriesLBA = le.Uint64(sec[72:])
	h.NumEntries = le.Uint32(sec[80:])
	h.EntrySize = le.Uint32(sec[84:])
	h.EntriesCRC = le.Uint32(sec[88:])
	h.raw = append([]byte(nil), sec...)
	return h, nil
}

// headerCRC is the CRC32 of the header with its own CRC field zeroed.
func headerCRC(hdr []byte) uint32 {
	b := append([]byte(nil), hdr...)
	clear(b[16:20])
	return crc32.ChecksumIEEE(b)
}

func decodeName(b []byte) string {
	u := make([]uint16, 0, len(b)/2)
	for i := 0; i+1 < len(b); i += 2 {
		c := binary.LittleEndian.Uint16(b[i:])
		if c == 0 {
			break
		}
		u = append(u, c)
	}
	return string(utf16.Decode(u))
}

// protectiveEntry returns the index of the MBR entry of type 0xEE, or -1.
func protectiveEntry(mbr []byte) int {
	for i := range 4 {
		if mbr[446+16*i+4] == mbrTypeProtective {
			return i
		}
	}
	return -1
}

// Plan is the change that makes the table span the whole disk.
type Plan struct {
	SectorSize int
	LastLBA    uint64 // of the disk

	OldAlternateLBA, NewAlternateLBA   uint64
	OldLastUsableLBA, NewLastUsableLBA uint64
	NewBackupEntriesLBA                uint64

	// Grow is set when a partition is to be extended.
	Grow *Grow
	// Add is set when a partition is to be created (PlanAdd).
	Add *Add
}

// Grow extends one partition's end.
type Grow struct {
	Number              int
	Name                string
	OldLastLBA, NewLast uint64
}

// Noop reports whether the table already spans the disk and nothing grows.
func (p *Plan) Noop() bool {
	return p.OldAlternateLBA == p.NewAlternateLBA && p.OldLastUsableLBA == p.NewLastUsableLBA && p.Grow == nil && p.Add == nil
}

func (p *Plan) String() string {
	s := fmt.Sprintf("backup header LBA %d -> %d, last usable LBA %d -> %d", p.OldAlternateLBA, p.NewAlternateLBA, p.OldLastUsableLBA, p.NewLastUsableLBA)
	if p.Grow != nil {
		s += fmt.Sprintf(", partition %d (%q) end LBA %d -> %d", p.Grow.Number, p.Grow.Name, p.Grow.OldLastLBA, p.Grow.NewLast)
	}
	if p.Add != nil {
		s += fmt.Sprintf(", new partition %d (%q) LBA %d-%d", p.Add.Number, p.Add.Name, p.Add.FirstLBA, p.Add.LastLBA)
	}
	return s
}

// GrowLast asks PlanFix to grow whichever partition ends last on the disk
// (the root partition of the usual image layout).
const GrowLast = -1

// PlanFix computes where the backup GPT goes on a disk of diskSize bytes
// and, when grow > 0 (or GrowLast), how far partition number grow extends: to the last
// usable LBA, its end rounded down so the partition ends on an alignBytes
// boundary (1 MiB when 0). Growing refuses a partition that is not the last
// one on the disk, since it would overlap its successor.
func PlanFix(t *Table, diskSize int64, grow int, alignBytes int64) (*Plan, error) {
	ss := int64(t.SectorSize)
	if ss <= 0 || diskSize < 3*ss {
		return nil, fmt.Errorf("gpt: disk size %d bytes with %d-byte sectors: too small to hold a GPT", diskSize, ss)
	}
	h := t.Primary
	entrySectors := (uint64(h.NumEntries)*uint64(h.EntrySize) + uint64(ss) - 1) / uint64(ss)
	p := &Plan{SectorSize: t.SectorSize, LastLBA: uint64(diskSize/ss) - 1,
		OldAlternateLBA: h.AlternateLBA, OldLastUsableLBA: h.LastUsableLBA}
	// The backup entries and header go after the last usable LBA; check
	// in this order so none of the subtractions below wraps around.
	if p.LastLBA <= h.LastUsableLBA || p.LastLBA-h.LastUsableLBA-1 < entrySectors {
		return nil, fmt.Errorf("gpt: disk of %d bytes is smaller than the table's usable end (LBA %d) and backup (%d entry sectors and a header)", diskSize, h.LastUsableLBA, entrySectors)
	}
	p.NewAlternateLBA = p.LastLBA
	p.NewBackupEntriesLBA = p.LastLBA - entrySectors
	p.NewLastUsableLBA = p.NewBackupEntriesLBA - 1
	if grow == GrowLast {
		grow = 0
		var end uint64
		for _, q := range t.Partitions {
			if q.LastLBA >= end {
				grow, end = q.Number, q.LastLBA
			}
		}
		if grow == 0 {
			return nil, errors.New("gpt: grow the last partition: the table has no partitions")
		}
	}
	if grow <= 0 {
		return p, nil
	}
	if alignBytes == 0 {
		alignBytes = 1 << 20
	}
	if alignBytes < 0 || alignBytes%ss != 0 {
		return nil, fmt.Errorf("gpt: alignment %d bytes: expected a multiple of the %d-byte sector", alignBytes, ss)
	}
	var target *Partition
	for i := range t.Partitions {
		if t.Partitions[i].Number == grow {
			target = &t.Partitions[i]
		}
	}
	if target == nil {
		return nil, fmt.Errorf("gpt: grow partition %d: no such partition (table has %s)", grow, numbers(t.Partitions))
	}
	for _, q := range t.Partitions {
		if q.Number != grow && q.FirstLBA > target.LastLBA {
			return nil, fmt.Errorf("gpt: grow partition %d (%q): partition %d (%q) lies after it at LBA %d: refusing to grow into it", grow, target.Name, q.Number, q.Name, q.FirstLBA)
		}
	}
	align := uint64(alignBytes / ss)
	// A disk smaller than one alignment unit has no aligned end: the
	// rounding must not wrap to 2^64-1.
	end := (p.NewLastUsableLBA + 1) / align * align
	if newLast := end - 1; end > 0 && newLast > target.LastLBA {
		p.Grow = &Grow{Number: grow, Name: target.Name, OldLastLBA: target.LastLBA, NewLast: newLast}
	}
	return p, nil
}

func numbers(ps []Partition) string {
	var b bytes.Buffer
	for i, p := range ps {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%d", p.Number)
	}
	if b.Len() == 0 {
		return "none"
	}
	return "partitions " + b.String()
}

// Apply writes plan p for table t: the grown entry, the backup entry
// array and header at the disk's end, the primary header, the protective
// MBR's size. The stale backup header the image carried is zeroed so no
// tool mistakes it for the real one. The backup is in place before the
// primary points at it, so an interruption leaves a valid primary.
func Apply(w io.WriterAt, r io.ReaderAt, t *Table, p *Plan) error {
	if p.Noop() {
		return nil
	}
	ss := int64(t.SectorSize)
	le := binary.LittleEndian
	entries := append([]byte(nil), t.entries...)
	if p.Grow != nil {
		e := entries[(p.Grow.Number-1)*int(t.Primary.EntrySize):]
		le.PutUint64(e[40:], p.Grow.NewLast)
	}
	if p.Add != nil {
		p.Add.putEntry(entries, t.Primary.EntrySize)
	}
	entriesCRC := crc32.ChecksumIEEE(entries)

	primary := append([]byte(nil), t.Primary.raw...)
	le.PutUint64(primary[32:], p.NewAlternateLBA)
	le.PutUint64(primary[48:], p.NewLastUsableLBA)
	le.PutUint32(primary[88:], entriesCRC)
	setCRC(primary, t.Primary.HeaderSize)

	backup := append([]byte(nil), primary...)
	le.PutUint64(backup[24:], p.NewAlternateLBA)
	le.PutUint64(backup[32:], 1)
	le.PutUint64(backup[72:], p.NewBackupEntriesLBA)
	setCRC(backup, t.Primary.HeaderSize)

	// The stale backup goes first: on a disk only slightly larger than the
	// image it can lie inside the new backup entry array written next.
	if p.OldAlternateLBA != p.NewAlternateLBA {
		if _, err := w.WriteAt(make([]byte, ss), int64(p.OldAlternateLBA)*ss); err != nil {
			return fmt.Errorf("gpt: clear stale backup header at LBA %d: %w", p.OldAlternateLBA, err)
		}
	}
	if _, err := w.WriteAt(entries, int64(p.NewBackupEntriesLBA)*ss); err != nil {
		return fmt.Errorf("gpt: write backup entries at LBA %d: %w", p.NewBackupEntriesLBA, err)
	}
	if _, err := w.WriteAt(backup, int64(p.NewAlternateLBA)*ss); err != nil {
		return fmt.Errorf("gpt: write backup header at LBA %d: %w", p.NewAlternateLBA, err)
	}
	if _, err := w.WriteAt(entries, int64(t.Primary.EntriesLBA)*ss); err != nil {
		return fmt.Errorf("gpt: write primary entries at LBA %d: %w", t.Primary.EntriesLBA, err)
	}
	if _, err := w.WriteAt(primary, ss); err != nil {
		return fmt.Errorf("gpt: write primary header at LBA 1: %w", err)
	}
	mbr := make([]byte, 512)
	if _, err := r.ReadAt(mbr, 0); err != nil {
		return fmt.Errorf("gpt: re-read protective MBR: %w", err)
	}
	if i := protectiveEntry(mbr); i >= 0 {
		// UEFI: size is the disk's size in LBAs minus one, saturated.
		le.PutUint32(mbr[446+16*i+12:], uint32(min(p.LastLBA, 0xFFFFFFFF)))
		if _, err := w.WriteAt(mbr, 0); err != nil {
			return fmt.Errorf("gpt: write protective MBR: %w", err)
		}
	}
	return nil
}

func setCRC(hdr []byte, size uint32) {
	clear(hdr[16:20])
	binary.LittleEndian.PutUint32(hdr[16:], crc32.ChecksumIEEE(hdr[:size]))
}
