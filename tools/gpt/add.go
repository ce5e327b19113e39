package gpt

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"unicode/utf16"
)

// Add is a partition to create in the free space after the last one.
type Add struct {
	Number            int
	Name              string
	FirstLBA, LastLBA uint64
	TypeGUID, GUID    [16]byte
}

// LinuxData is the Linux filesystem data type GUID,
// 0FC63DAF-8483-4772-8E79-3D69D8477DE4, as GPT stores it (the first
// three fields little-endian).
var LinuxData = [16]byte{0xAF, 0x3D, 0xC6, 0x0F, 0x83, 0x84, 0x72, 0x47, 0x8E, 0x79, 0x3D, 0x69, 0xD8, 0x47, 0x7D, 0xE4}

// PlanAdd adds to p (from PlanFix of t, growing nothing) a Linux data
// partition named name in the first free entry, from the first 1 MiB
// boundary after every partition to the last 1 MiB boundary of the usable
// space. It refuses a table with no free entry or less than 1 MiB free.
func PlanAdd(t *Table, p *Plan, name string) error {
	if p.Grow != nil {
		return fmt.Errorf("gpt: add partition %q: the plan also grows partition %d into the same space", name, p.Grow.Number)
	}
	if len(utf16.Encode([]rune(name))) > 36 {
		return fmt.Errorf("gpt: partition name %q: longer than 36 UTF-16 units", name)
	}
	used := map[int]bool{}
	var end uint64
	for _, q := range t.Partitions {
		used[q.Number] = true
		end = max(end, q.LastLBA)
	}
	n := 0
	for i := 1; i <= int(t.Primary.NumEntries); i++ {
		if !used[i] {
			n = i
			break
		}
	}
	if n == 0 {
		return fmt.Errorf("gpt: add partition %q: all %d entries are used", name, t.Primary.NumEntries)
	}
	align := uint64((1 << 20) / t.SectorSize)
	first := (max(end+1, t.Primary.FirstUsableLBA) + align - 1) / align * align
	last := (p.NewLastUsableLBA+1)/align*align - 1
	if last < first || last-first+1 < align {
		return fmt.Errorf("gpt: add partition %q: less than 1 MiB free after LBA %d (last usable LBA %d)", name, end, p.NewLastUsableLBA)
	}
	a := &Add{Number: n, Name: name, FirstLBA: first, LastLBA: last, TypeGUID: LinuxData}
	if _, err := rand.Read(a.GUID[:]); err != nil {
		return fmt.Errorf("gpt: partition GUID: %w", err)
	}
	a.GUID[7] = a.GUID[7]&0x0f | 0x40 // version 4, stored little-endian
	a.GUID[8] = a.GUID[8]&0x3f | 0x80
	p.Add = a
	return nil
}

// putEntry writes a's entry into the raw entry array.
func (a *Add) putEntry(entries []byte, entrySize uint32) {
	e := entries[(a.Number-1)*int(entrySize):][:entrySize]
	clear(e)
	copy(e[0:16], a.TypeGUID[:])
	copy(e[16:32], a.GUID[:])
	binary.LittleEndian.PutUint64(e[32:], a.FirstLBA)
	binary.LittleEndian.PutUint64(e[40:], a.LastLBA)
	for i, u := range utf16.Encode([]rune(a.Name)) {
		binary.LittleEndian.PutUint16(e[56+2*i:], u)
	}
}
