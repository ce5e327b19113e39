package ata

import (
	"errors"
	"math/bits"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzParseIdentify decodes IDENTIFY DEVICE data as a drive could return
// it. With fix set the word 255 checksum is made to match, so mutations
// reach the fields behind it.
func FuzzParseIdentify(f *testing.F) {
	f.Add(identifyBlock(base(0x0021, 0, 0), "Samsung SSD 870", "S5Y1NX0R", "SVT02B6Q"), false)
	f.Add(identifyBlock(base(0x003f, 0x00ff, 0x80f0), "M", "S", "F"), false)
	w := base(0x0021, 0, 0)
	w[106], w[117], w[118] = 0x5000, 2048, 0
	f.Add(identifyBlock(w, "4KN", "2", "1"), false)
	w[117], w[118] = 0xffff, 0xffff
	f.Add(identifyBlock(w, "huge sectors", "2", "1"), true)
	f.Add(identifyBlock(map[int]uint16{83: 0x4000, 60: 0x5678, 61: 0x0123}, "OLD", "1", "1"), false)
	f.Add(identifyBlock(map[int]uint16{0: 0x8580}, "CD", "S", "F"), false)
	f.Add(make([]byte, 511), false)
	f.Fuzz(func(t *testing.T, b []byte, fix bool) {
		if fix && len(b) == SectorSize && b[510] == 0xA5 {
			var sum byte
			for _, c := range b[:511] {
				sum += c
			}
			b[511] = -sum
		}
		id, err := ParseIdentify(b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "IDENTIFY DEVICE data: ") {
				t.Fatalf("error without context: %v", err)
			}
			return
		}
		if len(b) != SectorSize || b[1]&0x80 != 0 {
			t.Fatalf("accepted %d bytes, word 0 %#02x%02x", len(b), b[1], b[0])
		}
		for _, s := range []string{id.Model, id.Serial, id.Firmware} {
			if !utf8.ValidString(s) || s != strings.TrimSpace(s) {
				t.Fatalf("string %q", s)
			}
		}
		size := uint64(id.LogicalSectorSize)
		if id.Sectors >= 1<<48 || size < 512 || size > 2*maxSectorWords || size%2 != 0 {
			t.Fatalf("%d sectors of %d bytes", id.Sectors, size)
		}
		if hi, lo := bits.Mul64(id.Sectors, size); hi != 0 || lo != id.Bytes() {
			t.Fatalf("Bytes() = %d for %d x %d", id.Bytes(), id.Sectors, size)
		}
		s := id.Security
		if !s.Supported && (s.Enabled || s.Locked || s.Frozen || s.CountExpired || s.EnhancedErase || s.MasterMaximum) {
			t.Fatalf("security bits without support: %+v", s)
		}
		if s.State() == "" || id.Summary() == "" {
			t.Fatal("empty report")
		}
		for _, enh := range []bool{false, true} {
			est := id.Erase(enh)
			if est.Minutes < 0 || est.Minutes > 2*0x7ffe || est.Reported != (est.Minutes > 0) {
				t.Fatalf("estimate %+v", est)
			}
			// Never shorter than an hour or than twice the estimate plus a
			// margin: a timeout mid-erase leaves the drive locked.
			if to := id.EraseTimeout(enh); to < minEraseTimeout || to < 2*est.Duration()+eraseMargin {
				t.Fatalf("erase timeout %s for estimate %s, %d bytes", to, est, id.Bytes())
			}
		}
	})
}

// FuzzParseSense decodes sense data as the SATL returns it, and builds the
// error a failed command reports from it.
func FuzzParseSense(f *testing.F) {
	f.Add([]byte{0x72, 0x0B, 0x00, 0x00, 0, 0, 0, 14, 0x09, 0x0C, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xA0, 0x51}, uint8(2))
	f.Add([]byte{0xF0, 0x00, 0x0B, 0x04, 0x51, 0xA0, 0x00, 10, 0, 0, 0, 0, 0x00, 0x00, 0, 0, 0, 0}, uint8(2))
	f.Add([]byte{0x70, 0x00, 0x0B, 0x00, 0x00, 0x00, 0x00, 0x0A, 0x04, 0x41, 0xA0, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, uint8(2))
	f.Add([]byte{0x72, 0x03, 0x11, 0x04, 0, 0, 0, 26, 0x00, 0x0A, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		0x09, 0x0C, 0x01, 0x40, 0x00, 0x01, 0x12, 0x34, 0x00, 0x56, 0x00, 0x78, 0xE0, 0x51}, uint8(2))
	f.Add([]byte{0x72, 0x01, 0x00, 0x1D, 0, 0, 0, 14, 0x09, 0x0C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xA0, 0x50}, uint8(2))
	f.Add([]byte{0x72, 0x0B, 0, 0, 0, 0, 0, 0xff, 0x09, 0x0C, 0}, uint8(2))
	f.Add([]byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, status uint8) {
		s := ParseSense(b)
		if s.Key > 0xf || len(s.Raw) != len(b) {
			t.Fatalf("sense %+v", s)
		}
		if len(b) > 0 && b[0]&0x7f >= 0x70 && b[0]&0x7f <= 0x71 && len(b) >= 14 && (s.Key != b[2]&0xf || s.ASC != b[12] || s.ASCQ != b[13]) {
			t.Fatalf("fixed sense % x decoded as %x/%02x/%02x", b, s.Key, s.ASC, s.ASCQ)
		}
		if r := s.ATA; r != nil {
			if r.LBA >= 1<<48 {
				t.Fatalf("LBA %#x beyond 48 bits", r.LBA)
			}
			if b[0]&0x7f <= 0x71 && (r.Count > 0xff || r.LBA >= 1<<24) {
				t.Fatalf("fixed-format registers wider than the format: %+v", r)
			}
		}
		req := &Request{Name: "SECURITY ERASE UNIT", Command: CmdSecurityEraseUnit}
		err := Reply{Status: status, Sense: b}.err(req)
		if status == 0 {
			if err != nil {
				t.Fatalf("GOOD status: %v", err)
			}
			return
		}
		if err == nil {
			// Only CK_COND's "ATA PASS-THROUGH INFORMATION AVAILABLE" without ERR/DF passes.
			if status != 2 || !s.passThroughInfo() || s.ATA != nil && s.ATA.Status&(StatusERR|StatusDF) != 0 {
				t.Fatalf("status %#x, sense %+v: no error", status, s)
			}
			return
		}
		e := AsError(err)
		if e == nil || !strings.HasPrefix(err.Error(), "ATA SECURITY ERASE UNIT (F4h): ") {
			t.Fatalf("err = %v", err)
		}
		// "Unsupported" makes the wipe try another method: never when the
		// drive itself answered with registers.
		if e.Unsupported() && e.Sense.ATA != nil || errors.Is(err, ErrUnsupported) != e.Unsupported() {
			t.Fatalf("unsupported %t with registers %+v", e.Unsupported(), e.Sense.ATA)
		}
	})
}

// Words 117-118 are bounded, so Bytes cannot overflow, and the erase
// timeout saturates instead of wrapping for a capacity near 2^64 bytes.
func TestParseIdentifyHostileGeometry(t *testing.T) {
	w := base(0x0021, 0, 0)
	w[106], w[117], w[118] = 0x5000, 0xffff, 0xffff
	if _, err := ParseIdentify(identifyBlock(w, "M", "S", "F")); err == nil ||
		!strings.Contains(err.Error(), "IDENTIFY DEVICE data: words 117-118 say 4294967295 words per logical sector: expected 256-32768") {
		t.Errorf("words 117-118 = 2^32-1: err = %v", err)
	}
	w[117], w[118] = 128, 0
	if _, err := ParseIdentify(identifyBlock(w, "M", "S", "F")); err == nil || !strings.Contains(err.Error(), "say 128 words") {
		t.Errorf("words 117-118 = 128: err = %v", err)
	}
	w[117], w[118] = 0x8000, 0 // 64 KiB sectors
	w[100], w[101], w[102], w[103] = 0xffff, 0xffff, 0xffff, 0xffff
	id, err := ParseIdentify(identifyBlock(w, "M", "S", "F"))
	if err != nil {
		t.Fatal(err)
	}
	if id.Sectors != 1<<48-1 || id.Bytes() != (1<<48-1)<<16 {
		t.Errorf("%d sectors, %d bytes", id.Sectors, id.Bytes())
	}
	if to := id.EraseTimeout(false); to < 24*time.Hour {
		t.Errorf("erase timeout %s for %d bytes: wrapped", to, id.Bytes())
	}
	b := identifyBlock(base(0x0021, 0, 0), "Mod\xffel", "S", "F")
	if id, err := ParseIdentify(b); err != nil || id.Model != "Mod\uFFFDel" {
		t.Errorf("model %q, %v: want the invalid byte replaced by U+FFFD", id.Model, err)
	}
}
