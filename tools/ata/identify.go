package ata

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"time"
)

// Identify is what the wipe needs from IDENTIFY DEVICE data (ACS-3 7.12.7).
type Identify struct {
	Model, Serial, Firmware string
	// Sectors is the number of user-addressable logical sectors (words
	// 100-103 when the 48-bit feature set is supported, else 60-61), and
	// LogicalSectorSize their size in bytes (words 106, 117-118).
	Sectors           uint64
	LogicalSectorSize uint32
	// Word82 and Word128 are kept raw: a refusal quotes them.
	Word82, Word128 uint16
	Security        Security
	// NormalErase and EnhancedErase are the drive's own SECURITY ERASE
	// UNIT time estimates (words 89 and 90).
	NormalErase, EnhancedErase EraseTime
	MasterPasswordID           uint16 // word 92
}

// Security is the Security feature set state (word 82 bit 1, word 128).
type Security struct {
	// Supported needs word 82 bit 1 and word 128 bit 0 both set: with
	// either clear the other status bits mean nothing.
	Supported     bool
	Enabled       bool // word 128 bit 1: a user password is set
	Locked        bool // word 128 bit 2: media access refused until SECURITY UNLOCK
	Frozen        bool // word 128 bit 3: SECURITY FREEZE LOCK until the next power-on/reset
	CountExpired  bool // word 128 bit 4: too many wrong passwords; power-cycle
	EnhancedErase bool // word 128 bit 5: enhanced SECURITY ERASE UNIT supported
	MasterMaximum bool // word 128 bit 8: master password capability Maximum (else High)
}

// State is the ACS-3 security state name (SEC1..SEC6) for evidence.
func (s Security) State() string {
	switch {
	case !s.Supported:
		return "SEC0 (not supported)"
	case !s.Enabled && !s.Frozen:
		return "SEC1 (disabled, not frozen)"
	case !s.Enabled:
		return "SEC2 (disabled, frozen)"
	case s.Locked:
		return "SEC4 (enabled, locked)"
	case !s.Frozen:
		return "SEC5 (enabled, unlocked, not frozen)"
	}
	return "SEC6 (enabled, unlocked, frozen)"
}

// EraseTime is word 89 or 90 decoded (ACS-3 7.12.7, words 89/90): with
// bit 15 clear (short format) bits 7:0 hold the time in 2-minute units and
// 255 means "more than 508 minutes"; with bit 15 set (extended format)
// bits 14:0 hold it and 32767 means "more than 65532 minutes". 0 means
// the drive does not report a time.
type EraseTime struct {
	Raw      uint16
	Reported bool
	Extended bool
	Minutes  int  // value × 2
	AtLeast  bool // the field saturated: the erase takes longer than Minutes
}

func parseEraseTime(w uint16) EraseTime {
	e := EraseTime{Raw: w}
	v, limit := w&0xff, uint16(0xff) // bits 14:8 reserved in the short format
	if w&0x8000 != 0 {
		e.Extended, v, limit = true, w&0x7fff, 0x7fff
	}
	if v == 0 {
		return e
	}
	e.Reported, e.Minutes = true, int(v)*2
	if v == limit {
		// 255 / 32767 mean "more than 508 / 65532 minutes": the largest
		// exact value times two.
		e.Minutes, e.AtLeast = int(limit-1)*2, true
	}
	return e
}

// Duration is the estimate (the lower bound when AtLeast, 0 if unreported).
func (e EraseTime) Duration() time.Duration { return time.Duration(e.Minutes) * time.Minute }

func (e EraseTime) String() string {
	switch {
	case !e.Reported:
		return "not reported"
	case e.AtLeast:
		return fmt.Sprintf("more than %d min", e.Minutes)
	}
	return fmt.Sprintf("%d min", e.Minutes)
}

// ParseIdentify decodes a 512-byte IDENTIFY DEVICE block.
func ParseIdentify(b []byte) (*Identify, error) {
	if len(b) != SectorSize {
		return nil, fmt.Errorf("IDENTIFY DEVICE data: %d bytes, want %d", len(b), SectorSize)
	}
	w := func(i int) uint16 { return binary.LittleEndian.Uint16(b[2*i:]) }
	if w(0)&0x8000 != 0 {
		return nil, fmt.Errorf("IDENTIFY DEVICE data: word 0 %#04x says ATAPI device, not an ATA disk", w(0))
	}
	// Word 255 (integrity): when bits 7:0 are A5h, all 512 bytes sum to 0.
	if b[510] == 0xA5 {
		var sum uint8
		for _, c := range b {
			sum += c
		}
		if sum != 0 {
			return nil, fmt.Errorf("IDENTIFY DEVICE data: checksum in word 255 (%#04x) does not match (sum %#02x)", w(255), sum)
		}
	}
	id := &Identify{
		Serial:           ataString(b, 10, 20),
		Firmware:         ataString(b, 23, 27),
		Model:            ataString(b, 27, 47),
		Word82:           w(82),
		Word128:          w(128),
		NormalErase:      parseEraseTime(w(89)),
		EnhancedErase:    parseEraseTime(w(90)),
		MasterPasswordID: w(92),
	}
	// Words 82/83 are valid unless 0000h or FFFFh; word 83 also needs bits
	// 15:14 = 01b.
	valid82 := id.Word82 != 0 && id.Word82 != 0xffff
	w83 := w(83)
	lba48 := w83&0xc000 == 0x4000 && w83&(1<<10) != 0
	if lba48 {
		id.Sectors = binary.LittleEndian.Uint64(b[200:208]) & (1<<48 - 1)
	} else {
		id.Sectors = uint64(binary.LittleEndian.Uint32(b[120:124]))
	}
	id.LogicalSectorSize = SectorSize
	if w106 := w(106); w106&0xc000 == 0x4000 && w106&(1<<12) != 0 {
		if words := binary.LittleEndian.Uint32(b[234:238]); words != 0 {
			// Bit 12 says "longer than 256 words"; bound it so Bytes
			// (at most 2^48 sectors) cannot overflow 64 bits.
			if words < 256 || words > maxSectorWords {
				return nil, fmt.Errorf("IDENTIFY DEVICE data: words 117-118 say %d words per logical sector: expected 256-%d", words, maxSectorWords)
			}
			id.LogicalSectorSize = 2 * words
		}
	}
	s := id.Word128
	id.Security = Security{Supported: valid82 && id.Word82&(1<<1) != 0 && s&1 != 0}
	if id.Security.Supported {
		sec := &id.Security
		sec.Enabled = s&(1<<1) != 0
		sec.Locked = s&(1<<2) != 0
		sec.Frozen = s&(1<<3) != 0
		sec.CountExpired = s&(1<<4) != 0
		sec.EnhancedErase = s&(1<<5) != 0
		sec.MasterMaximum = s&(1<<8) != 0
	}
	return id, nil
}

// maxSectorWords bounds words 117-118: 64 KiB logical sectors.
const maxSectorWords = 1 << 15

// ataString decodes words [from, to): ASCII with the two bytes of every
// word swapped (the ACS-3 ATA string convention), space padded. Bytes that
// are not UTF-8 become U+FFFD: these strings go into protobuf messages.
func ataString(b []byte, from, to int) string {
	out := make([]byte, 0, 2*(to-from))
	for i := from; i < to; i++ {
		out = append(out, b[2*i+1], b[2*i])
	}
	return strings.ToValidUTF8(strings.TrimSpace(strings.TrimRight(string(out), "\x00")), "\uFFFD")
}

// Bytes is the user-addressable capacity (0 if the drive did not say).
func (id *Identify) Bytes() uint64 { return id.Sectors * uint64(id.LogicalSectorSize) }

// Erase is the estimate for the normal or enhanced erase.
func (id *Identify) Erase(enhanced bool) EraseTime {
	if enhanced {
		return id.EnhancedErase
	}
	return id.NormalErase
}

// Timeouts for SECURITY ERASE UNIT. A kernel timeout in mid-erase makes
// libata reset the link while the drive still holds the temporary
// password, so every choice errs long.
const (
	eraseMargin     = 30 * time.Minute
	minEraseTimeout = time.Hour
	// slowestOverwrite is the rate assumed when the drive gives no usable
	// estimate: a slow disk overwriting every sector (bytes per second).
	slowestOverwrite = 50 << 20
	// unknownSizeTimeout covers a drive that reports neither a time nor
	// its capacity.
	unknownSizeTimeout = 24 * time.Hour
)

// EraseTimeout is how long to let SECURITY ERASE UNIT run: twice the
// drive's estimate plus a margin; when the estimate is missing or
// saturated, at least the time a slow overwrite of the whole capacity
// takes.
func (id *Identify) EraseTimeout(enhanced bool) time.Duration {
	est := id.Erase(enhanced)
	t := 2*est.Duration() + eraseMargin
	if !est.Reported || est.AtLeast {
		floor := unknownSizeTimeout
		if n := id.Bytes(); n > 0 {
			// Saturate: a capacity near 2^64 bytes would overflow the
			// Duration and wrap to a short (or negative) timeout.
			const maxSecs = uint64((math.MaxInt64 - eraseMargin) / time.Second)
			floor = time.Duration(min(n/slowestOverwrite, maxSecs))*time.Second + eraseMargin
		}
		t = max(t, floor)
	}
	return max(t, minEraseTimeout)
}

// Summary is a one-line account for evidence and logs.
func (id *Identify) Summary() string {
	return fmt.Sprintf("model %q serial %q firmware %q, %d x %d-byte sectors, word 82 %#04x, word 128 %#04x: %s, erase estimates normal %s / enhanced %s",
		id.Model, id.Serial, id.Firmware, id.Sectors, id.LogicalSectorSize, id.Word82, id.Word128, id.Security.State(), id.NormalErase, id.EnhancedErase)
}

// IdentifyDevice sends IDENTIFY DEVICE (ECh, PIO data-in, one block).
func IdentifyDevice(t Transport) (*Identify, error) {
	buf := make([]byte, SectorSize)
	r := &Request{Name: "IDENTIFY DEVICE", Command: CmdIdentifyDevice, Count: 1, Device: deviceObsolete,
		Protocol: ProtoPIODataIn, Data: buf, Timeout: 30 * time.Second}
	if err := Do(t, r); err != nil {
		return nil, err
	}
	id, err := ParseIdentify(buf)
	if err != nil {
		return nil, fmt.Errorf("ATA IDENTIFY DEVICE: %w", err)
	}
	return id, nil
}
