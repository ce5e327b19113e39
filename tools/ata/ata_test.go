package ata

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a Transport that keeps what it was sent and answers with
// reply (and, for data-in, fills the buffer with in).
type recorder struct {
	cdbs    [][16]byte
	dirs    []Direction
	data    [][]byte
	timeout []time.Duration
	reply   Reply
	in      []byte
}

func (r *recorder) PassThrough(cdb [16]byte, dir Direction, data []byte, timeout time.Duration) (Reply, error) {
	r.cdbs = append(r.cdbs, cdb)
	r.dirs = append(r.dirs, dir)
	r.data = append(r.data, append([]byte(nil), data...))
	r.timeout = append(r.timeout, timeout)
	if dir == DirIn {
		copy(data, r.in)
	}
	return r.reply, nil
}

func hexCDB(c [16]byte) string { return fmt.Sprintf("% X", c[:]) }

// TestCDBBytes pins every byte of the pass-through CDBs against the SAT-4
// ATA PASS-THROUGH (16) layout (see Request.CDB).
func TestCDBBytes(t *testing.T) {
	var pw Password
	copy(pw[:], "0123456789abcdefghijklmnopqrstuv")
	rec := &recorder{in: identifyBlock(base(0x0021, 1, 1), "M", "S", "F")}
	if _, err := IdentifyDevice(rec); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		SetPassword(rec, User, pw),
		ErasePrepare(rec),
		EraseUnit(rec, User, pw, false, 3*time.Hour),
		EraseUnit(rec, User, pw, true, 5*time.Hour),
		DisablePassword(rec, User, pw),
		Unlock(rec, User, pw),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	want := []struct {
		cdb string
		dir Direction
		// decoded fields: PROTOCOL, T_DIR, BYTE_BLOCK, T_LENGTH, CK_COND
		proto, tDir, bytBlok, tLength, ckCond uint8
	}{
		// 85h; PROTOCOL 4 (PIO data-in) << 1; T_DIR=1 BYTE_BLOCK=1 T_LENGTH=2;
		// COUNT(7:0)=1; DEVICE A0h; COMMAND ECh.
		{"85 08 0E 00 00 00 01 00 00 00 00 00 00 A0 EC 00", DirIn, 4, 1, 1, 2, 0},
		// PROTOCOL 5 (PIO data-out); T_DIR=0 BYTE_BLOCK=1 T_LENGTH=2; F1h.
		{"85 0A 06 00 00 00 01 00 00 00 00 00 00 A0 F1 00", DirOut, 5, 0, 1, 2, 0},
		// PROTOCOL 3 (non-data); no transfer fields; F3h.
		{"85 06 00 00 00 00 00 00 00 00 00 00 00 A0 F3 00", DirNone, 3, 0, 0, 0, 0},
		{"85 0A 06 00 00 00 01 00 00 00 00 00 00 A0 F4 00", DirOut, 5, 0, 1, 2, 0},
		{"85 0A 06 00 00 00 01 00 00 00 00 00 00 A0 F4 00", DirOut, 5, 0, 1, 2, 0},
		{"85 0A 06 00 00 00 01 00 00 00 00 00 00 A0 F6 00", DirOut, 5, 0, 1, 2, 0},
		{"85 0A 06 00 00 00 01 00 00 00 00 00 00 A0 F2 00", DirOut, 5, 0, 1, 2, 0},
	}
	if len(rec.cdbs) != len(want) {
		t.Fatalf("%d commands sent, want %d", len(rec.cdbs), len(want))
	}
	for i, w := range want {
		c := rec.cdbs[i]
		if hexCDB(c) != w.cdb || rec.dirs[i] != w.dir {
			t.Errorf("command %d: CDB %s dir %d, want %s dir %d", i, hexCDB(c), rec.dirs[i], w.cdb, w.dir)
		}
		got := [5]uint8{c[1] >> 1 & 0xf, c[2] >> 3 & 1, c[2] >> 2 & 1, c[2] & 3, c[2] >> 5 & 1}
		if got != [5]uint8{w.proto, w.tDir, w.bytBlok, w.tLength, w.ckCond} {
			t.Errorf("command %d: PROTOCOL/T_DIR/BYTE_BLOCK/T_LENGTH/CK_COND = %v", i, got)
		}
		if c[1]&0xe1 != 0 || c[2]&0xd0 != 0 {
			t.Errorf("command %d: MULTIPLE_COUNT, EXTEND, OFF_LINE or T_TYPE set: %s", i, hexCDB(c))
		}
	}
	// Timeouts: the erase gets what the caller computed, the rest 30 s.
	if rec.timeout[3] != 3*time.Hour || rec.timeout[4] != 5*time.Hour || rec.timeout[1] != 30*time.Second {
		t.Errorf("timeouts %v", rec.timeout)
	}

	// Parameter blocks: word 0 control, words 1-16 the password as given.
	block := func(ctl uint16) []byte {
		b := make([]byte, 512)
		binary.LittleEndian.PutUint16(b, ctl)
		copy(b[2:], "0123456789abcdefghijklmnopqrstuv")
		return b
	}
	for i, ctl := range map[int]uint16{1: 0x0000, 3: 0x0000, 4: 0x0002, 5: 0x0000, 6: 0x0000} {
		if !bytes.Equal(rec.data[i], block(ctl)) {
			t.Errorf("command %d: parameter block % X..., want control %#04x", i, rec.data[i][:36], ctl)
		}
	}
	if len(rec.data[2]) != 0 {
		t.Error("ERASE PREPARE carried data")
	}
}

func TestCDBFields(t *testing.T) {
	// SMART READ DATA shape: FEATURES D0h, LBA mid/high 4Fh/C2h, CK_COND.
	r := &Request{Command: 0xB0, Features: 0xD0, Count: 1, LBA: 0xC24F00, Protocol: ProtoPIODataIn, CheckCondition: true}
	if got := hexCDB(r.CDB()); got != "85 08 2E 00 D0 00 01 00 00 00 4F 00 C2 00 B0 00" {
		t.Errorf("SMART READ DATA CDB %s", got)
	}
	// 28-bit LBA: bits 27:24 go to DEVICE bits 3:0.
	r = &Request{Command: 0x20, Count: 1, LBA: 0x0ABCDEF1, Device: 0xE0, Protocol: ProtoPIODataIn}
	if got := hexCDB(r.CDB()); got != "85 08 0E 00 00 00 01 00 F1 00 DE 00 BC EA 20 00" {
		t.Errorf("READ SECTORS CDB %s", got)
	}
}

func TestDoValidatesData(t *testing.T) {
	rec := &recorder{}
	for _, r := range []*Request{
		{Name: "x", Protocol: ProtoPIODataOut, Count: 1, Data: make([]byte, 100)},
		{Name: "x", Protocol: ProtoPIODataOut, Count: 2, Data: make([]byte, 512)},
		{Name: "x", Protocol: ProtoNonData, Data: make([]byte, 512)},
	} {
		if err := Do(rec, r); err == nil {
			t.Errorf("accepted %d bytes with COUNT %d protocol %d", len(r.Data), r.Count, r.Protocol)
		}
	}
	if len(rec.cdbs) != 0 {
		t.Error("an invalid request reached the transport")
	}
}

func TestSenseDecoding(t *testing.T) {
	// libata, descriptor format (D_SENSE=1), SECURITY ERASE UNIT aborted:
	// ABORTED COMMAND 00/00, ATA Status Return descriptor with ERROR 04h
	// (ABRT) and STATUS 51h (DRDY DSC ERR).
	desc := []byte{0x72, 0x0B, 0x00, 0x00, 0, 0, 0, 14,
		0x09, 0x0C, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xA0, 0x51}
	// Fixed format (libata >= 6.11, D_SENSE=0): VALID, INFORMATION =
	// ERROR, STATUS, DEVICE, COUNT.
	fixed := []byte{0xF0, 0x00, 0x0B, 0x04, 0x51, 0xA0, 0x00, 10, 0, 0, 0, 0, 0x00, 0x00, 0, 0, 0, 0}
	// Fixed format from libata before 6.11, as Debian 12's kernel sent it
	// for SET PASSWORD to QEMU's disk: registers at bytes 8-11, no VALID.
	oldFixed := []byte{0x70, 0x00, 0x0B, 0x00, 0x00, 0x00, 0x00, 0x0A, 0x04, 0x41, 0xA0, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}
	// Other fixed sense (NOT READY, command-specific bytes set) is not
	// mistaken for that layout.
	notATA := []byte{0x70, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x0A, 0x12, 0x00, 0x00, 0x00, 0x04, 0x01, 0x00, 0x00, 0x00, 0x00}
	// A descriptor before the ATA one (information, type 00h) is skipped;
	// EXTEND with 48-bit registers.
	twoDesc := []byte{0x72, 0x03, 0x11, 0x04, 0, 0, 0, 26,
		0x00, 0x0A, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		0x09, 0x0C, 0x01, 0x40, 0x00, 0x01, 0x12, 0x34, 0x00, 0x56, 0x00, 0x78, 0xE0, 0x51}
	req := &Request{Name: "SECURITY ERASE UNIT", Command: CmdSecurityEraseUnit}
	cases := []struct {
		name    string
		reply   Reply
		ok      bool
		aborted bool
		unsupp  bool
		regs    *Registers
		msg     string
	}{
		{"descriptor ABRT", Reply{Status: 2, DriverStatus: 8, Sense: desc}, false, true, false,
			&Registers{Error: 0x04, Status: 0x51, Device: 0xA0},
			"ATA SECURITY ERASE UNIT (F4h): command aborted by the drive: ATA status 0x51 (DRDY ERR), error 0x04 (ABRT); sense key 0xb (ABORTED COMMAND) ASC/ASCQ 00/00"},
		{"fixed ABRT", Reply{Status: 2, Sense: fixed}, false, true, false,
			&Registers{Error: 0x04, Status: 0x51, Device: 0xA0}, "error 0x04 (ABRT)"},
		{"pre-6.11 fixed", Reply{Status: 2, DriverStatus: 8, Sense: oldFixed}, false, true, false,
			&Registers{Error: 0x04, Status: 0x41, Device: 0xA0, Count: 1},
			"ATA SECURITY ERASE UNIT (F4h): command aborted by the drive: ATA status 0x41 (DRDY ERR), error 0x04 (ABRT); sense key 0xb (ABORTED COMMAND) ASC/ASCQ 00/00"},
		{"fixed, not ATA", Reply{Status: 2, Sense: notATA}, false, false, false,
			nil, "sense key 0x2 (NOT READY) ASC/ASCQ 04/01 (the sense carried no ATA status/error registers: 70 00 02"},
		{"medium error, two descriptors", Reply{Status: 2, Sense: twoDesc}, false, false, false,
			&Registers{Error: 0x40, Status: 0x51, Device: 0xE0, Count: 1, LBA: 0x12785634},
			"error 0x40 (UNC)"},
		{"no SAT below", Reply{Status: 2, Sense: []byte{0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x20, 0x00}}, false, false, true,
			nil, "not supported by the SCSI layer below (no SAT ATA pass-through)"},
		{"CK_COND success", Reply{Status: 2, Sense: []byte{0x72, 0x01, 0x00, 0x1D, 0, 0, 0, 14,
			0x09, 0x0C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xA0, 0x50}}, true, false, false, nil, ""},
		{"timeout", Reply{HostStatus: 0x03}, false, false, false, nil, "host status 0x3 (DID_TIME_OUT"},
		{"good", Reply{}, true, false, false, nil, ""},
		{"truncated descriptor", Reply{Status: 2, Sense: []byte{0x72, 0x0B, 0, 0, 0, 0, 0, 14, 0x09, 0x0C, 0}}, false, true, false, nil, "ABORTED COMMAND"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.reply.err(req)
			if c.ok {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			e := AsError(err)
			if e == nil {
				t.Fatalf("err = %v, want *Error", err)
			}
			if e.Aborted() != c.aborted || e.Unsupported() != c.unsupp || errors.Is(err, ErrUnsupported) != c.unsupp {
				t.Errorf("aborted %t unsupported %t", e.Aborted(), e.Unsupported())
			}
			if (c.regs == nil) != (e.Sense.ATA == nil) || c.regs != nil && *c.regs != *e.Sense.ATA {
				t.Errorf("registers %+v, want %+v", e.Sense.ATA, c.regs)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("message %q lacks %q", err, c.msg)
			}
		})
	}
	// 48-bit fields of the ATA Status Return descriptor: COUNT(15:8) at 4,
	// LBA(31:24) at 6, LBA(39:32) at 8, LBA(47:40) at 10.
	ext := append([]byte(nil), twoDesc...)
	ext[20+4], ext[20+8], ext[20+10] = 0x02, 0x9A, 0xBC
	s := ParseSense(ext)
	if s.Key != 0x3 || s.ASC != 0x11 || s.ASCQ != 0x04 || s.ATA == nil || s.ATA.Count != 0x0201 || s.ATA.LBA != 0xBC9A12785634 {
		t.Errorf("48-bit descriptor: %+v %+v", s, s.ATA)
	}
}
