package memmap

import (
	"bytes"
	"encoding/binary"
	"os"
	"strings"
	"testing"

	"github.com/u-root/u-root/pkg/smbios"
)

func recorded(t testing.TB) (entry, data []byte) {
	t.Helper()
	entry, err := os.ReadFile("testdata/smbios_entry_point")
	if err != nil {
		t.Fatal(err)
	}
	data, err = os.ReadFile("testdata/DMI")
	if err != nil {
		t.Fatal(err)
	}
	return entry, data
}

// structs splits a table blob into its structures.
func structs(t testing.TB, b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		end := bytes.Index(b[b[1]:], []byte{0, 0})
		n := int(b[1]) + end + 2
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

// The QEMU node: one DIMM, one array range; an address in it is that DIMM's.
func TestRecordedQEMU(t *testing.T) {
	entry, data := recorded(t)
	info, err := smbios.ParseInfo(entry, data)
	if err != nil {
		t.Fatal(err)
	}
	m, err := FromInfo(info)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.DIMMs) != 1 || m.DIMMs[0].Locator != "DIMM 0" || m.DIMMs[0].Serial != "S0001" || m.DIMMs[0].Array != 0x1000 || m.DIMMs[0].SizeBytes != 2<<30 {
		t.Fatalf("dimms %+v", m.DIMMs)
	}
	if len(m.Arrays) != 1 || m.Arrays[0] != (Range{Start: 0, End: 2<<30 - 1, Handle: 0x1000}) || len(m.Devices) != 0 {
		t.Fatalf("ranges %+v %+v", m.Arrays, m.Devices)
	}
	ds, how := m.Lookup(0x1000)
	if len(ds) != 1 || ds[0].Locator != "DIMM 0" || !strings.Contains(how, "one populated device") {
		t.Errorf("Lookup(0x1000) = %+v, %q", ds, how)
	}
	if ds, how := m.Lookup(3 << 30); len(ds) != 0 || !strings.Contains(how, "no SMBIOS memory range") {
		t.Errorf("Lookup(3 GiB) = %+v, %q", ds, how)
	}
}

// twoDIMMs derives tables with a second device (handle 0x1101) in the same
// array and type 20 ranges: halves, or both devices interleaved.
func twoDIMMs(t *testing.T, interleave bool) *Map {
	t.Helper()
	entry, data := recorded(t)
	var out [][]byte
	for _, s := range structs(t, data) {
		out = append(out, s)
		if s[0] == 17 {
			second := bytes.Replace(append([]byte(nil), s...), []byte("DIMM 0"), []byte("DIMM 1"), 1)
			second = bytes.Replace(second, []byte("S0001"), []byte("S0002"), 1)
			binary.LittleEndian.PutUint16(second[2:], 0x1101)
			out = append(out, second)
			for i, h := range []uint16{0x1100, 0x1101} {
				r := make([]byte, 0x23)
				r[0], r[1] = 20, 0x23
				binary.LittleEndian.PutUint16(r[2:], uint16(0x1400+i))
				start, end := uint32(i)<<20, uint32(i+1)<<20-1 // KiB: 1 GiB each
				if interleave {
					start, end = 0, 2<<20-1
					r[0x11], r[0x12] = byte(i+1), 2
				}
				binary.LittleEndian.PutUint32(r[4:], start)
				binary.LittleEndian.PutUint32(r[8:], end)
				binary.LittleEndian.PutUint16(r[0x0c:], h)
				out = append(out, append(r, 0, 0))
			}
		}
	}
	blob := bytes.Join(out, nil)
	info, err := smbios.ParseInfo(entry, blob)
	if err != nil {
		t.Fatal(err)
	}
	m, err := FromInfo(info)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestDeviceRanges(t *testing.T) {
	m := twoDIMMs(t, false)
	if len(m.DIMMs) != 2 || len(m.Devices) != 2 {
		t.Fatalf("map %+v", m)
	}
	ds, how := m.Lookup(1<<30 + 0x40)
	if len(ds) != 1 || ds[0].Locator != "DIMM 1" || ds[0].Serial != "S0002" || !strings.Contains(how, "type 20") {
		t.Errorf("Lookup(1 GiB + 0x40) = %+v, %q", ds, how)
	}
	m = twoDIMMs(t, true)
	ds, how = m.Lookup(0x1000)
	if len(ds) != 2 || !strings.Contains(how, "2 interleaved devices") {
		t.Errorf("interleaved: %+v, %q", ds, how)
	}
	// Without type 20, two devices in the array: the array is all we know.
	m.Devices = nil
	ds, how = m.Lookup(0x1000)
	if len(ds) != 2 || !strings.Contains(how, "do not say which") {
		t.Errorf("array only: %+v, %q", ds, how)
	}
}

// FuzzTables: the tables are the firmware's; whatever parses maps without
// panicking and every range is ordered.
func FuzzTables(f *testing.F) {
	entry, data := recorded(f)
	f.Add(data)
	f.Fuzz(func(t *testing.T, blob []byte) {
		info, err := smbios.ParseInfo(entry, blob)
		if err != nil {
			return
		}
		m, err := FromInfo(info)
		if err != nil {
			return
		}
		for _, r := range append(m.Arrays, m.Devices...) {
			if r.End < r.Start {
				t.Fatalf("range %+v", r)
			}
		}
		m.Lookup(0x1000)
	})
}
