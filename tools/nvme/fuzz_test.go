package nvme

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// The device fills these buffers: whatever it returns, parsing must not
// panic, fixed-size structures must refuse any other length, and every
// string must be UTF-8 (they end up in protobuf messages).

func FuzzParseSMARTLog(f *testing.F) {
	f.Add(smartVector())
	f.Add(make([]byte, SMARTLogSize))
	f.Add(bytes.Repeat([]byte{0xff}, SMARTLogSize))
	f.Add(make([]byte, SMARTLogSize-1))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := ParseSMARTLog(b)
		if (err == nil) != (len(b) == SMARTLogSize) {
			t.Fatalf("%d bytes: err = %v", len(b), err)
		}
		if err != nil {
			return
		}
		le := binary.LittleEndian
		if l.CriticalWarning != b[0] || l.CompositeTempK != le.Uint16(b[1:]) || l.WarningTempMinutes != le.Uint32(b[192:]) {
			t.Fatal("fields differ from their bytes")
		}
		// 128-bit counters: the low half, or saturated when the high half is set.
		for _, c := range []struct {
			got uint64
			off int
		}{{l.DataUnitsRead, 32}, {l.PowerOnHours, 128}, {l.MediaErrors, 160}, {l.ErrorLogEntries, 176}} {
			want := le.Uint64(b[c.off:])
			if le.Uint64(b[c.off+8:]) != 0 {
				want = ^uint64(0)
			}
			if c.got != want {
				t.Fatalf("counter at %d = %d, want %d", c.off, c.got, want)
			}
		}
		if n := len(l.WarningNames()); n != bits.OnesCount8(b[0]&0x3f)+min(int(b[0]&0xc0), 1) {
			t.Fatalf("warning byte %#02x: %d names", b[0], n)
		}
	})
}

func FuzzParseFirmwareLog(f *testing.F) {
	b := make([]byte, 512)
	b[0] = 2 | 3<<4
	copy(b[8:], pad("1.0", 8))
	copy(b[16:], pad("2.1", 8))
	f.Add(b)
	f.Add(make([]byte, 64))
	f.Add(make([]byte, 63))
	f.Add(append([]byte{0xff, 0, 0, 0, 0, 0, 0, 0}, bytes.Repeat([]byte{0xc3}, 56)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := ParseFirmwareLog(b)
		if (err == nil) != (len(b) >= 64) {
			t.Fatalf("%d bytes: err = %v", len(b), err)
		}
		if err != nil {
			return
		}
		if l.ActiveSlot < 0 || l.ActiveSlot > 7 || l.NextSlot < 0 || l.NextSlot > 7 {
			t.Fatalf("slots %d/%d", l.ActiveSlot, l.NextSlot)
		}
		for i, s := range l.Slots {
			if !utf8.ValidString(s) || len(s) > 8*3 || s != strings.TrimSpace(s) {
				t.Fatalf("slot %d revision %q", i+1, s)
			}
		}
		if a := l.Active(); l.ActiveSlot >= 1 && a != l.Slots[l.ActiveSlot-1] || l.ActiveSlot == 0 && a != "" {
			t.Fatalf("Active() = %q for slot %d", a, l.ActiveSlot)
		}
	})
}

func FuzzParseController(f *testing.F) {
	f.Add(controllerVector())
	f.Add(make([]byte, IdentifySize))
	f.Add(bytes.Repeat([]byte{0xff}, IdentifySize))
	f.Add(make([]byte, 512))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseController(b)
		if (err == nil) != (len(b) == IdentifySize) {
			t.Fatalf("%d bytes: err = %v", len(b), err)
		}
		if err != nil {
			return
		}
		for name, s := range map[string]string{"SN": c.SN, "MN": c.MN, "FR": c.FR, "SUBNQN": c.SUBNQN} {
			if !utf8.ValidString(s) || strings.ContainsRune(s, 0) && name == "SUBNQN" {
				t.Fatalf("%s = %q", name, s)
			}
		}
		if n := c.FirmwareSlots(); n < 0 || n > 7 {
			t.Fatalf("%d firmware slots", n)
		}
		if c.TNVMCAP.Sign() < 0 || c.TNVMCAP.BitLen() > 128 || c.UNVMCAP.Sign() < 0 || c.UNVMCAP.BitLen() > 128 {
			t.Fatalf("capacities %v %v", c.TNVMCAP, c.UNVMCAP)
		}
		if strings.Count(c.Version(), ".") != 2 {
			t.Fatalf("version %q", c.Version())
		}
	})
}

func FuzzParseNamespace(f *testing.F) {
	formats := []uint32{9 << 16, 9<<16 | 8, 9<<16 | 16, 9<<16 | 64, 12 << 16, 12<<16 | 8, 12<<16 | 16, 12<<16 | 64}
	f.Add(uint32(1), namespaceVector(4194304, 7, 0, formats...))
	f.Add(uint32(1), namespaceVector(524288, 7, 4|1<<4, formats...))
	many := make([]uint32, 20)
	many[17] = 12 << 16
	f.Add(uint32(2), namespaceVector(10, 19, 1|1<<5, many...))
	f.Add(uint32(1), namespaceVector(^uint64(0), 0, 0, 12<<16))
	f.Add(uint32(1), namespaceVector(10, 63, 0x6f, 31<<16))
	f.Add(uint32(1), make([]byte, 100))
	f.Fuzz(func(t *testing.T, nsid uint32, b []byte) {
		n, err := ParseNamespace(nsid, b)
		if err != nil {
			if len(b) == IdentifySize && !strings.HasPrefix(err.Error(), "identify namespace ") {
				t.Fatalf("error without context: %v", err)
			}
			return
		}
		if len(b) != IdentifySize || n.NSID != nsid {
			t.Fatalf("accepted %d bytes as namespace %d", len(b), n.NSID)
		}
		if len(n.LBAFormats) != int(n.NLBAF)+1 || len(n.LBAFormats) > 64 {
			t.Fatalf("%d formats for NLBAF %d", len(n.LBAFormats), n.NLBAF)
		}
		if i := n.FormatIndex(); i < 0 || i >= len(n.LBAFormats) {
			t.Fatalf("format index %d of %d", i, len(n.LBAFormats))
		}
		size := uint64(n.LBASize())
		if size != 0 && (size < 512 || size&(size-1) != 0) {
			t.Fatalf("LBA size %d", size)
		}
		// SizeBytes is exact: no wrap-around.
		if got := n.SizeBytes(); size != 0 && got/size != n.NSZE {
			t.Fatalf("SizeBytes %d for %d blocks of %d", got, n.NSZE, size)
		}
	})
}

func FuzzParseSanitizeStatus(f *testing.F) {
	f.Add(sanitizeLog(0x8000, uint16(SanitizeInProgress), 0x204))
	f.Add(sanitizeLog(0, uint16(SanitizeSucceeded)|1<<8|5<<3, 4))
	f.Add(make([]byte, 7))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseSanitizeStatus(b)
		if (err == nil) != (len(b) >= 8) {
			t.Fatalf("%d bytes: err = %v", len(b), err)
		}
		if err != nil {
			return
		}
		le := binary.LittleEndian
		sstat := le.Uint16(b[2:])
		if uint16(st.State)|uint16(st.Passes)<<3 != sstat&0xff || st.GlobalErase != (sstat&0x100 != 0) || st.State > 7 || st.Passes > 31 ||
			st.Progress != le.Uint16(b) || st.CDW10 != le.Uint32(b[4:]) {
			t.Fatalf("status %+v from % x", st, b[:8])
		}
		if st.State.String() == "" {
			t.Fatal("state without a name")
		}
	})
}

func FuzzParseStatus(f *testing.F) {
	f.Add(uint8(OpFirmwareCommit), uint32(0x10b))
	f.Add(uint8(OpIdentify), uint32(0x4002))
	f.Add(uint8(0), uint32(0))
	f.Add(uint8(0xff), uint32(0x1800)) // CRD bits only
	f.Add(uint8(0x84), uint32(0xffffffff))
	f.Fuzz(func(t *testing.T, op uint8, status uint32) {
		e := ParseStatus(op, status)
		if (e == nil) != (status&0x7fff == 0) {
			t.Fatalf("status %#x: %v", status, e)
		}
		if e == nil {
			return
		}
		if e.Opcode != op || e.SCT > 7 || e.Error() == "" || e.Name() == "" {
			t.Fatalf("status %#x: %+v", status, e)
		}
		// Status re-encodes SC, SCT, More and DNR (not CRD, bits 12:11).
		if got := e.Status(); got != uint16(status&0x67ff) {
			t.Fatalf("status %#x re-encoded as %#x", status, got)
		}
		if e2 := ParseStatus(op, uint32(e.Status())); e.Status() != 0 && (e2 == nil || *e2 != *e) {
			t.Fatalf("status %#x does not round-trip: %+v then %+v", status, e, e2)
		}
	})
}

// A namespace whose byte size overflows 64 bits is refused rather than
// reported as a small one, and device strings that are not UTF-8 are
// repaired (a protobuf string field refuses them, which would keep the
// runner from sending its inventory at all).
func TestParseHostileIdentify(t *testing.T) {
	_, err := ParseNamespace(3, namespaceVector(1<<53, 0, 0, 12<<16))
	if err == nil || !strings.Contains(err.Error(), "identify namespace 3: NSZE 9007199254740992 blocks of 4096 bytes: more than 2^64 bytes") {
		t.Errorf("overflowing NSZE: err = %v", err)
	}
	if n, err := ParseNamespace(3, namespaceVector(1<<52-1, 0, 0, 12<<16)); err != nil || n.SizeBytes() != (1<<52-1)*4096 {
		t.Errorf("largest NSZE that fits: %v", err)
	}
	b := controllerVector()
	copy(b[4:24], pad("SN\xff\xfe01", 20))
	copy(b[64:72], "\xc3\x281.0   ")
	c, err := ParseController(b)
	if err != nil {
		t.Fatal(err)
	}
	if c.SN != "SN\uFFFD01" || c.FR != "\uFFFD(1.0" {
		t.Errorf("SN %q FR %q: want invalid bytes replaced by U+FFFD", c.SN, c.FR)
	}
	log := make([]byte, 64)
	copy(log[8:], "v\x80\x81")
	if l, err := ParseFirmwareLog(log); err != nil || l.Slots[0] != "v\uFFFD" {
		t.Errorf("firmware slot 1 = %q, %v", l.Slots[0], err)
	}
}

// sysfs model/serial/firmware_rev are the controller's raw Identify bytes.
func TestEnumerateRepairsUTF8(t *testing.T) {
	root := t.TempDir()
	d := filepath.Join(root, "sys/class/nvme/nvme0")
	writeFile(t, filepath.Join(d, "model"), "Model\xff\xfe  \n")
	writeFile(t, filepath.Join(d, "serial"), "\xc0SER\n")
	writeFile(t, filepath.Join(d, "firmware_rev"), "1.0\x80\n")
	writeFile(t, filepath.Join(d, "address"), "0000:00:04.0\n")
	got, err := Enumerate(root)
	if err != nil {
		t.Fatal(err)
	}
	if i := got[0]; i.Model != "Model\uFFFD" || i.Serial != "\uFFFDSER" || i.FirmwareRev != "1.0\uFFFD" {
		t.Errorf("Enumerate = %+v: want invalid bytes replaced by U+FFFD", i)
	}
}
