package ata

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"
)

// identifyBlock builds IDENTIFY DEVICE data word by word as ACS-3 7.12.7
// lays it out: strings byte-swapped per word and space padded, words as
// little-endian 16-bit values, word 255 the A5h signature and checksum.
func identifyBlock(words map[int]uint16, model, serial, fw string) []byte {
	b := make([]byte, 512)
	str := func(from, to int, s string) {
		s += strings.Repeat(" ", 2*(to-from)-len(s))
		for i := 0; i < to-from; i++ {
			// First character in bits 15:8 of the word.
			binary.LittleEndian.PutUint16(b[2*(from+i):], uint16(s[2*i])<<8|uint16(s[2*i+1]))
		}
	}
	str(10, 20, serial)
	str(23, 27, fw)
	str(27, 47, model)
	for w, v := range words {
		binary.LittleEndian.PutUint16(b[2*w:], v)
	}
	b[510] = 0xA5
	var sum byte
	for _, c := range b[:511] {
		sum += c
	}
	b[511] = -sum
	return b
}

// base is a 1 TB SATA SSD: 48-bit, 1953525168 sectors, word 82 with NOP,
// write cache, security (bit 1) and SMART, word 83 valid with 48-bit.
func base(w128, w89, w90 uint16) map[int]uint16 {
	const sectors = 1953525168
	return map[int]uint16{
		0:  0x0040,
		60: 0xffff, 61: 0x0fff, // 28-bit field saturated, as on any > 128 GiB disk
		82:  0x746b,
		83:  0x7d09, // bits 15:14 = 01b, bit 10 48-bit
		89:  w89,
		90:  w90,
		100: uint16(sectors & 0xffff), 101: uint16(sectors >> 16), 102: 0, 103: 0,
		128: w128,
	}
}

func TestParseIdentify(t *testing.T) {
	cases := []struct {
		name   string
		words  map[int]uint16
		sec    Security
		state  string
		normal string
		enh    string
	}{
		{"supported, enhanced erase", base(0x0021, 0x0002, 0x0001),
			Security{Supported: true, EnhancedErase: true}, "SEC1", "4 min", "2 min"},
		{"frozen by the BIOS", base(0x0029, 0x0002, 0x0001),
			Security{Supported: true, Frozen: true, EnhancedErase: true}, "SEC2", "4 min", "2 min"},
		{"enabled, locked", base(0x0027, 0x0002, 0x0001),
			Security{Supported: true, Enabled: true, Locked: true, EnhancedErase: true}, "SEC4", "4 min", "2 min"},
		{"enabled, unlocked (password set)", base(0x0023, 0x0002, 0x0001),
			Security{Supported: true, Enabled: true, EnhancedErase: true}, "SEC5", "4 min", "2 min"},
		{"enabled and frozen", base(0x000b, 0, 0),
			Security{Supported: true, Enabled: true, Frozen: true}, "SEC6", "not reported", "not reported"},
		{"count expired, master maximum", base(0x0117, 0, 0),
			Security{Supported: true, Enabled: true, Locked: true, CountExpired: true, MasterMaximum: true}, "SEC4", "not reported", "not reported"},
		{"not supported: word 82 bit 1 and word 128 clear", func() map[int]uint16 { w := base(0, 0, 0); w[82] = 0x7469; return w }(),
			Security{}, "SEC0", "not reported", "not reported"},
		{"word 82 says supported, word 128 bit 0 clear: status bits ignored", base(0x002e, 0x0010, 0),
			Security{}, "SEC0", "32 min", "not reported"},
		{"word 82 invalid (FFFFh)", func() map[int]uint16 { w := base(0x0021, 0, 0); w[82] = 0xffff; return w }(),
			Security{}, "SEC0", "not reported", "not reported"},
		// Extended format (bit 15): bits 14:0 in 2-minute units; 32767
		// saturates at "more than 65532 min".
		{"extended time format", base(0x0021, 0x8000|600, 0xffff),
			Security{Supported: true, EnhancedErase: true}, "SEC1", "1200 min", "more than 65532 min"},
		// Short format: bits 14:8 reserved and ignored; 255 saturates.
		{"short format reserved bits, saturated", base(0x0021, 0x7f05, 0x00ff),
			Security{Supported: true, EnhancedErase: true}, "SEC1", "10 min", "more than 508 min"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, err := ParseIdentify(identifyBlock(c.words, "Samsung SSD 870 EVO 1TB", "S6PUNX0R123456A", "SVT02B6Q"))
			if err != nil {
				t.Fatal(err)
			}
			if id.Security != c.sec {
				t.Errorf("security = %+v, want %+v", id.Security, c.sec)
			}
			if !strings.HasPrefix(id.Security.State(), c.state) {
				t.Errorf("state %q, want %s", id.Security.State(), c.state)
			}
			if id.NormalErase.String() != c.normal || id.EnhancedErase.String() != c.enh {
				t.Errorf("erase times %q / %q, want %q / %q", id.NormalErase, id.EnhancedErase, c.normal, c.enh)
			}
			if id.Model != "Samsung SSD 870 EVO 1TB" || id.Serial != "S6PUNX0R123456A" || id.Firmware != "SVT02B6Q" {
				t.Errorf("strings %q %q %q", id.Model, id.Serial, id.Firmware)
			}
			if id.Sectors != 1953525168 || id.LogicalSectorSize != 512 || id.Bytes() != 1000204886016 {
				t.Errorf("capacity %d x %d", id.Sectors, id.LogicalSectorSize)
			}
			if id.Word82 != c.words[82] || id.Word128 != c.words[128] {
				t.Errorf("raw words %#x %#x", id.Word82, id.Word128)
			}
		})
	}
}

func TestParseIdentifyEraseTimeFields(t *testing.T) {
	for _, c := range []struct {
		w        uint16
		reported bool
		ext      bool
		min      int
		atLeast  bool
	}{
		{0x0000, false, false, 0, false},
		{0x8000, false, true, 0, false}, // extended format, value 0: not reported
		{0x0001, true, false, 2, false},
		{0x00fe, true, false, 508, false},
		{0x00ff, true, false, 508, true},
		{0x8001, true, true, 2, false},
		{0xfffe, true, true, 65532, false},
		{0xffff, true, true, 65532, true},
	} {
		e := parseEraseTime(c.w)
		if e.Reported != c.reported || e.Extended != c.ext || e.Minutes != c.min || e.AtLeast != c.atLeast || e.Raw != c.w {
			t.Errorf("word %#04x: %+v", c.w, e)
		}
		if e.Duration() != time.Duration(c.min)*time.Minute {
			t.Errorf("word %#04x: duration %s", c.w, e.Duration())
		}
	}
}

func TestParseIdentifyGeometry(t *testing.T) {
	// 28-bit only (word 83 bit 10 clear): words 60-61.
	w := map[int]uint16{83: 0x4000, 60: 0x5678, 61: 0x0123}
	id, err := ParseIdentify(identifyBlock(w, "OLD", "1", "1"))
	if err != nil {
		t.Fatal(err)
	}
	if id.Sectors != 0x01235678 || id.LogicalSectorSize != 512 {
		t.Fatalf("sectors %#x x %d", id.Sectors, id.LogicalSectorSize)
	}
	// 4Kn: word 106 valid (bits 15:14 = 01b) with bit 12, words 117-118 =
	// 2048 words per logical sector.
	w = base(0x0021, 0, 0)
	w[106], w[117], w[118] = 0x5000, 2048, 0
	w[100], w[101] = 0x1000, 0
	id, err = ParseIdentify(identifyBlock(w, "4KN", "2", "1"))
	if err != nil {
		t.Fatal(err)
	}
	if id.LogicalSectorSize != 4096 || id.Bytes() != 0x1000*4096 {
		t.Fatalf("4Kn: %d x %d", id.Sectors, id.LogicalSectorSize)
	}
}

func TestParseIdentifyRejects(t *testing.T) {
	good := identifyBlock(base(0x0021, 0, 0), "M", "S", "F")
	bad := append([]byte(nil), good...)
	bad[256] ^= 0x01 // word 128: checksum no longer matches
	if _, err := ParseIdentify(bad); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("checksum: err = %v", err)
	}
	noSig := append([]byte(nil), bad...)
	noSig[510] = 0 // without the A5h signature the checksum is not checked
	if _, err := ParseIdentify(noSig); err != nil {
		t.Errorf("no signature: %v", err)
	}
	atapi := identifyBlock(map[int]uint16{0: 0x8580}, "CD", "S", "F")
	if _, err := ParseIdentify(atapi); err == nil || !strings.Contains(err.Error(), "ATAPI") {
		t.Errorf("atapi: err = %v", err)
	}
	if _, err := ParseIdentify(good[:256]); err == nil {
		t.Error("short block accepted")
	}
}

func TestEraseTimeout(t *testing.T) {
	mk := func(w89 uint16, sectors uint64) *Identify {
		return &Identify{NormalErase: parseEraseTime(w89), EnhancedErase: parseEraseTime(w89), Sectors: sectors, LogicalSectorSize: 512}
	}
	const tb = 1953525168 // 1 TB in 512-byte sectors
	for _, c := range []struct {
		name string
		id   *Identify
		want time.Duration
	}{
		{"estimate 120 min: x2 + 30 min", mk(60, tb), 4*time.Hour + 30*time.Minute},
		{"tiny estimate: at least an hour", mk(1, tb), time.Hour},
		// 1000204886016 B / 50 MiB/s = 19077 s, + 30 min.
		{"not reported: slow overwrite of the capacity", mk(0, tb), 19077*time.Second + 30*time.Minute},
		// >508 min on an 18 TB disk: the capacity bound (343322 s) wins.
		{"saturated: capacity bound", mk(0xff, 18e12/512), 343322*time.Second + 30*time.Minute},
		{"saturated on a small disk: 2 x 508 min + 30", mk(0xff, tb), 2*508*time.Minute + 30*time.Minute},
		{"nothing known", mk(0, 0), 24 * time.Hour},
	} {
		if got := c.id.EraseTimeout(false); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
