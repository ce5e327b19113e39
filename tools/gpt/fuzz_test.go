package gpt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// buildGPT lays out a GPT disk of sectors sectors by hand: protective MBR,
// primary header at LBA 1, entries from LBA 2, usable space, backup entries
// and backup header at the end, both CRCs set.
func buildGPT(ss int, sectors uint64, numEntries uint32, parts []Partition) []byte {
	le := binary.LittleEndian
	disk := make([]byte, sectors*uint64(ss))
	mbr := disk[:512]
	mbr[446+4] = mbrTypeProtective
	le.PutUint32(mbr[446+8:], 1)
	le.PutUint32(mbr[446+12:], uint32(min(sectors-1, math.MaxUint32)))
	mbr[510], mbr[511] = 0x55, 0xAA

	entries := make([]byte, int(numEntries)*128)
	for _, p := range parts {
		e := entries[(p.Number-1)*128:]
		copy(e[0:16], p.TypeGUID[:])
		e[16] = byte(p.Number) // unique partition GUID: anything non-zero
		le.PutUint64(e[32:], p.FirstLBA)
		le.PutUint64(e[40:], p.LastLBA)
		for i, c := range utf16.Encode([]rune(p.Name)) {
			le.PutUint16(e[56+2*i:], c)
		}
	}
	entrySectors := (uint64(len(entries)) + uint64(ss) - 1) / uint64(ss)
	last := sectors - 1
	hdr := func(my, alt, entriesLBA uint64) []byte {
		h := make([]byte, ss)
		copy(h, signature)
		le.PutUint32(h[8:], 0x00010000)
		le.PutUint32(h[12:], 92)
		le.PutUint64(h[24:], my)
		le.PutUint64(h[32:], alt)
		le.PutUint64(h[40:], 2+entrySectors)
		le.PutUint64(h[48:], last-entrySectors-1)
		copy(h[56:72], "cure-fuzz-disk-!")
		le.PutUint64(h[72:], entriesLBA)
		le.PutUint32(h[80:], numEntries)
		le.PutUint32(h[84:], 128)
		le.PutUint32(h[88:], crc32.ChecksumIEEE(entries))
		setCRC(h, 92)
		return h
	}
	copy(disk[ss:], hdr(1, last, 2))
	copy(disk[2*ss:], entries)
	copy(disk[(last-entrySectors)*uint64(ss):], entries)
	copy(disk[last*uint64(ss):], hdr(last, 1, last-entrySectors))
	return disk
}

var linuxType = [16]byte{0xaf, 0x3d, 0xc6, 0x0f, 0x83, 0x84, 0x72, 0x47, 0x8e, 0x79, 0x3d, 0x69, 0xd8, 0x47, 0x7d, 0xe4}

// smallGPT is a 40-sector disk with 4 entries (one entry sector): usable
// LBAs 3-37, partitions 3-9 and 10-30.
func smallGPT(ss int) []byte {
	return buildGPT(ss, 40, 4, []Partition{
		{Number: 1, TypeGUID: linuxType, FirstLBA: 3, LastLBA: 9, Name: "EFI"},
		{Number: 2, TypeGUID: linuxType, FirstLBA: 10, LastLBA: 30, Name: "root"},
	})
}

// memDisk is a fixed-size disk in memory that refuses writes past its end.
type memDisk []byte

func (d memDisk) ReadAt(p []byte, off int64) (int, error) { return bytes.NewReader(d).ReadAt(p, off) }

func (d memDisk) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(d)) {
		return 0, fmt.Errorf("write of %d bytes at %d: outside the %d-byte disk", len(p), off, len(d))
	}
	return copy(d[off:], p), nil
}

func TestReadBuiltGPT(t *testing.T) {
	for _, ss := range []int{512, 4096} {
		disk := smallGPT(ss)
		tab, err := Read(bytes.NewReader(disk), ss, int64(len(disk)))
		if err != nil {
			t.Fatalf("sector size %d: %v", ss, err)
		}
		if len(tab.Partitions) != 2 || tab.Partitions[1].Name != "root" || tab.Partitions[1].LastLBA != 30 {
			t.Fatalf("sector size %d: partitions %+v", ss, tab.Partitions)
		}
	}
}

// Each header field that sizes, places or counts the entry array is
// checked before it is used (these used to allocate up to 4 TiB, read at a
// wrapped offset, or let Apply rewrite partition data as the entry array).
func TestReadRejectsHostileHeaders(t *testing.T) {
	le := binary.LittleEndian
	tests := []struct {
		name    string
		mut     func(h []byte, disk []byte)
		wantErr string
	}{
		{"entry size 2^32-1", func(h, _ []byte) { le.PutUint32(h[84:], math.MaxUint32) },
			"gpt: primary header: partition entry size 4294967295: expected 128 times a power of two, at most 4096"},
		{"entry size 136", func(h, _ []byte) { le.PutUint32(h[84:], 136) }, "partition entry size 136"},
		{"entry size 8192", func(h, _ []byte) { le.PutUint32(h[84:], 8192) }, "partition entry size 8192"},
		{"entry size 0", func(h, _ []byte) { le.PutUint32(h[84:], 0) }, "partition entry size 0"},
		{"2^32-1 entries", func(h, _ []byte) { le.PutUint32(h[80:], math.MaxUint32) },
			"gpt: primary header: 4294967295 partition entries: expected 1-1024"},
		{"no entries", func(h, _ []byte) { le.PutUint32(h[80:], 0) }, "0 partition entries"},
		{"entries at LBA 2^63", func(h, _ []byte) { le.PutUint64(h[72:], 1<<63) },
			"gpt: primary header: partition entry array at LBA 9223372036854775808 (1 sectors): expected it after the header at LBA 1 and before the first usable LBA 3"},
		{"entries at LBA 2^64-1", func(h, _ []byte) { le.PutUint64(h[72:], math.MaxUint64) }, "partition entry array at LBA 18446744073709551615"},
		{"entries on the MBR", func(h, _ []byte) { le.PutUint64(h[72:], 0) }, "partition entry array at LBA 0"},
		{"entries on the header", func(h, _ []byte) { le.PutUint64(h[72:], 1) }, "partition entry array at LBA 1"},
		{"entries in the usable range", func(h, _ []byte) { le.PutUint64(h[72:], 5) }, "partition entry array at LBA 5"},
		{"entries running into the usable range", func(h, _ []byte) { le.PutUint32(h[80:], 8) },
			"partition entry array at LBA 2 (2 sectors): expected it after the header at LBA 1 and before the first usable LBA 3"},
		{"header size 2^32-1", func(h, _ []byte) { le.PutUint32(h[12:], math.MaxUint32) }, "header size 4294967295: expected 92-512"},
		{"header size 91", func(h, _ []byte) { le.PutUint32(h[12:], 91) }, "header size 91"},
		{"backup at LBA 2^64-1", func(h, _ []byte) { le.PutUint64(h[32:], math.MaxUint64) }, "image larger than the disk?"},
		{"last usable 2^64-1", func(h, _ []byte) { le.PutUint64(h[48:], math.MaxUint64) }, "usable LBAs 3-18446744073709551615"},
		{"first usable after last usable", func(h, _ []byte) { le.PutUint64(h[40:], 38) }, "usable LBAs 38-37"},
		{"partition ends at 2^64-1", func(h, d []byte) { le.PutUint64(d[1024+128+40:], math.MaxUint64) },
			`partition 2 ("root"): LBAs 10-18446744073709551615 lie outside the usable range 3-37`},
		{"overlapping partitions", func(h, d []byte) { le.PutUint64(d[1024+128+32:], 9) },
			`gpt: partition 2 ("root", LBAs 9-30) overlaps partition 1 ("EFI", LBAs 3-9)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			disk := smallGPT(512)
			h := disk[512:1024]
			tc.mut(h, disk)
			le.PutUint32(h[88:], crc32.ChecksumIEEE(disk[1024:1024+4*128]))
			if hs := le.Uint32(h[12:]); hs >= 92 && hs <= 512 {
				setCRC(h, hs)
			}
			_, err := Read(bytes.NewReader(disk), 512, int64(len(disk)))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v\nwant containing %q", err, tc.wantErr)
			}
		})
	}
	if _, err := parseHeader([]byte(signature), "test"); err == nil || !strings.Contains(err.Error(), "8 bytes, shorter than the 92-byte header") {
		t.Errorf("parseHeader of 8 bytes: %v", err)
	}
}

// PlanFix computes LBAs by subtraction: a disk too small for them is an
// error, and alignment rounding on a disk smaller than one alignment unit
// does not wrap to 2^64-1.
func TestPlanFixSmallDisks(t *testing.T) {
	disk := smallGPT(512)
	tab, err := Read(bytes.NewReader(disk), 512, int64(len(disk)))
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{0, 512, 3 * 512, 38 * 512, 39 * 512} {
		if p, err := PlanFix(tab, size, GrowLast, 0); err == nil {
			t.Errorf("disk of %d bytes: plan %s, want an error", size, p)
		}
	}
	p, err := PlanFix(tab, 64*512, GrowLast, 0) // 32 KiB: no 1 MiB boundary at all
	if err != nil {
		t.Fatal(err)
	}
	if p.Grow != nil {
		t.Errorf("plan grows partition 2 to %d on a disk smaller than the alignment", p.Grow.NewLast)
	}
	p, err = PlanFix(tab, 64*512, GrowLast, 512)
	if err != nil || p.Grow == nil || p.Grow.NewLast != 64-1-1-1 {
		t.Errorf("sector alignment: plan %v, err %v; want partition 2 grown to LBA 61", p, err)
	}
	if _, err := PlanFix(tab, 64*512, GrowLast, -512); err == nil {
		t.Error("negative alignment accepted")
	}
}

func FuzzParseHeader(f *testing.F) {
	f.Add(smallGPT(512)[512:1024])
	f.Add(smallGPT(4096)[4096:8192])
	if b, err := os.ReadFile("testdata/sfdisk-16k.img"); err == nil {
		f.Add(b[512:1024])
	}
	f.Add([]byte(signature))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, sec []byte) {
		h, err := parseHeader(sec, "fuzz")
		if err != nil {
			return
		}
		le := binary.LittleEndian
		if h.HeaderSize < minHeaderSize || int(h.HeaderSize) > len(sec) {
			t.Fatalf("header size %d accepted for a %d-byte sector", h.HeaderSize, len(sec))
		}
		if headerCRC(sec[:h.HeaderSize]) != le.Uint32(sec[16:]) {
			t.Fatal("accepted a header whose CRC does not match")
		}
		if !bytes.Equal(h.raw, sec) || h.EntriesLBA != le.Uint64(sec[72:]) || h.NumEntries != le.Uint32(sec[80:]) {
			t.Fatal("header fields differ from the sector")
		}
		// Re-encoding what Apply changes keeps the header valid.
		raw := bytes.Clone(h.raw)
		le.PutUint64(raw[32:], h.AlternateLBA+1)
		setCRC(raw, h.HeaderSize)
		h2, err := parseHeader(raw, "fuzz re-encoded")
		if err != nil || h2.AlternateLBA != h.AlternateLBA+1 || h2.MyLBA != h.MyLBA {
			t.Fatalf("re-encoded header: %+v, %v", h2, err)
		}
	})
}

// fixCRCs recomputes the primary header's two CRCs where the fields that
// locate them allow, so the fuzzer gets past the checksums to the checks
// behind them.
func fixCRCs(disk []byte, ss int) {
	if len(disk) < 2*ss {
		return
	}
	le := binary.LittleEndian
	h := disk[ss : 2*ss]
	lba, n, size := le.Uint64(h[72:]), uint64(le.Uint32(h[80:])), uint64(le.Uint32(h[84:]))
	if lba < uint64(len(disk)/ss) && n*size <= uint64(len(disk))-lba*uint64(ss) {
		le.PutUint32(h[88:], crc32.ChecksumIEEE(disk[lba*uint64(ss):][:n*size]))
	}
	if hs := le.Uint32(h[12:]); hs >= minHeaderSize && int(hs) <= ss {
		setCRC(h, hs)
	}
}

// FuzzRead reads a whole disk's GPT, plans the fix for a disk grown by
// grow sectors, applies it and reads the result back. With fix set the
// CRCs are made to match first.
func FuzzRead(f *testing.F) {
	f.Add(smallGPT(512), false, uint8(0), false)
	f.Add(smallGPT(512), false, uint8(24), true)
	f.Add(smallGPT(4096), true, uint8(3), false)
	moved := smallGPT(512)
	copy(moved[2*512:], bytes.Repeat([]byte{0xff}, 16)) // entry 1's type changed: CRC mismatch
	f.Add(moved, false, uint8(1), false)
	f.Add(moved, false, uint8(1), true)
	if b, err := os.ReadFile("testdata/sfdisk-16k.img"); err == nil {
		f.Add(b, false, uint8(0), false)
		f.Add(b, false, uint8(40), true)
	}
	f.Fuzz(func(t *testing.T, disk []byte, big bool, grow uint8, fix bool) {
		ss := 512
		if big {
			ss = 4096
		}
		if fix {
			fixCRCs(disk, ss)
		}
		tab, err := Read(bytes.NewReader(disk), ss, int64(len(disk)))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "gpt: ") {
				t.Fatalf("error without the gpt prefix: %v", err)
			}
			return
		}
		checkTable(t, tab, int64(len(disk)))

		size := int64(len(disk)) + int64(grow)*int64(ss)
		plan, err := PlanFix(tab, size, GrowLast, int64(ss))
		if err != nil {
			return
		}
		h := tab.Primary
		entrySectors := (uint64(h.NumEntries)*uint64(h.EntrySize) + uint64(ss) - 1) / uint64(ss)
		if plan.LastLBA != uint64(size/int64(ss))-1 || plan.NewAlternateLBA != plan.LastLBA ||
			plan.NewBackupEntriesLBA+entrySectors != plan.LastLBA || plan.NewLastUsableLBA+1 != plan.NewBackupEntriesLBA ||
			plan.NewLastUsableLBA < h.LastUsableLBA {
			t.Fatalf("plan %s (last LBA %d, %d entry sectors) for a table with usable end %d", plan, plan.LastLBA, entrySectors, h.LastUsableLBA)
		}
		if g := plan.Grow; g != nil && (g.NewLast <= g.OldLastLBA || g.NewLast > plan.NewLastUsableLBA) {
			t.Fatalf("plan grows partition %d from %d to %d, usable end %d", g.Number, g.OldLastLBA, g.NewLast, plan.NewLastUsableLBA)
		}
		grown := make(memDisk, size)
		copy(grown, disk)
		if err := Apply(grown, grown, tab, plan); err != nil {
			t.Fatalf("apply %s: %v", plan, err)
		}
		after, err := Read(bytes.NewReader(grown), ss, size)
		if err != nil {
			t.Fatalf("the table Apply wrote does not read back: %v", err)
		}
		checkTable(t, after, size)
		if after.Primary.AlternateLBA != plan.NewAlternateLBA || after.Primary.LastUsableLBA != plan.NewLastUsableLBA {
			t.Fatalf("after apply: backup at %d, usable end %d; plan %s", after.Primary.AlternateLBA, after.Primary.LastUsableLBA, plan)
		}
		if len(after.Partitions) != len(tab.Partitions) {
			t.Fatalf("after apply: %d partitions, before %d", len(after.Partitions), len(tab.Partitions))
		}
		for i, p := range after.Partitions {
			want := tab.Partitions[i]
			if plan.Grow != nil && want.Number == plan.Grow.Number {
				want.LastLBA = plan.Grow.NewLast
			}
			if p != want {
				t.Fatalf("after apply: partition %+v, want %+v", p, want)
			}
		}
		b, err := parseHeader(grown[plan.LastLBA*uint64(ss):][:ss], "backup")
		if err != nil || b.MyLBA != plan.LastLBA || b.AlternateLBA != 1 || b.EntriesLBA != plan.NewBackupEntriesLBA || b.EntriesCRC != after.Primary.EntriesCRC {
			t.Fatalf("backup header: %+v, %v", b, err)
		}
		off := plan.NewBackupEntriesLBA * uint64(ss)
		if !bytes.Equal(grown[off:off+uint64(len(after.entries))], after.entries) {
			t.Fatal("backup entry array differs from the primary")
		}
	})
}

// checkTable asserts what PlanFix and Apply rely on in a table Read accepted.
func checkTable(t *testing.T, tab *Table, diskSize int64) {
	t.Helper()
	h, ss := tab.Primary, uint64(tab.SectorSize)
	last := uint64(diskSize)/ss - 1
	if h.MyLBA != 1 || h.AlternateLBA > last || h.LastUsableLBA >= h.AlternateLBA || h.FirstUsableLBA > h.LastUsableLBA {
		t.Fatalf("header LBAs my %d alt %d usable %d-%d on a disk whose last LBA is %d", h.MyLBA, h.AlternateLBA, h.FirstUsableLBA, h.LastUsableLBA, last)
	}
	if n := uint64(h.NumEntries) * uint64(h.EntrySize); uint64(len(tab.entries)) != n || h.EntriesLBA < 2 || h.EntriesLBA+(n+ss-1)/ss > h.FirstUsableLBA {
		t.Fatalf("entry array of %d bytes at LBA %d, first usable %d", len(tab.entries), h.EntriesLBA, h.FirstUsableLBA)
	}
	prev := 0
	for _, p := range tab.Partitions {
		if p.Number <= prev || p.Number > int(h.NumEntries) {
			t.Fatalf("partition numbers out of order or range: %+v", tab.Partitions)
		}
		prev = p.Number
		if p.FirstLBA < h.FirstUsableLBA || p.LastLBA > h.LastUsableLBA || p.FirstLBA > p.LastLBA {
			t.Fatalf("partition %+v outside usable %d-%d", p, h.FirstUsableLBA, h.LastUsableLBA)
		}
		if !utf8.ValidString(p.Name) {
			t.Fatalf("partition %d name %q is not UTF-8", p.Number, p.Name)
		}
		for _, q := range tab.Partitions {
			if q.Number != p.Number && q.FirstLBA <= p.LastLBA && p.FirstLBA <= q.LastLBA {
				t.Fatalf("partitions %d and %d overlap", p.Number, q.Number)
			}
		}
	}
}
