package opal

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Feature codes of Level 0 Discovery descriptors (Core Spec 2.01 Table 42,
// Opal SSC 2.02 3.1.1, Pyrite SSC 2.01, Ruby SSC 1.00, Feature Set
// specifications for Block SID and Data Removal Mechanism).
const (
	FeatureTPer         uint16 = 0x0001
	FeatureLocking      uint16 = 0x0002
	FeatureGeometry     uint16 = 0x0003
	FeatureEnterprise   uint16 = 0x0100
	FeatureOpalV1       uint16 = 0x0200
	FeatureSingleUser   uint16 = 0x0201
	FeatureDataStore    uint16 = 0x0202
	FeatureOpalV2       uint16 = 0x0203
	FeatureOpalite      uint16 = 0x0301
	FeaturePyriteV1     uint16 = 0x0302
	FeaturePyriteV2     uint16 = 0x0303
	FeatureRuby         uint16 = 0x0304
	FeatureBlockSID     uint16 = 0x0402
	FeatureDataRemoval  uint16 = 0x0404
	headerSize                 = 48
	descriptorHeaderLen        = 4
)

// Discovery is a parsed Level 0 Discovery response.
type Discovery struct {
	Revision uint32 // data structure revision from the header (1)
	Features []uint16

	TPer        *TPerFeature
	Locking     *LockingFeature
	Geometry    *GeometryFeature
	SSCs        []SSC // every SSC descriptor present, in response order
	BlockSID    *BlockSIDFeature
	DataRemoval *DataRemovalFeature
}

// TPerFeature is the TPer feature descriptor (0x0001).
type TPerFeature struct {
	Sync, Async, AckNak, BufferMgmt, Streaming, ComIDMgmt bool
}

// LockingFeature is the Locking feature descriptor (0x0002), byte 4.
type LockingFeature struct {
	Supported       bool // bit 0
	Enabled         bool // bit 1: a locking SP is activated and a range has locking enabled
	Locked          bool // bit 2: at least one range is locked
	MediaEncryption bool // bit 3
	MBREnabled      bool // bit 4: shadow MBR is enabled
	MBRDone         bool // bit 5: shadow MBR is done (real LBAs visible)
	MBRNotSupported bool // bit 6: shadow MBR not supported (Opal 2.02+)
}

// GeometryFeature is the Geometry Reporting descriptor (0x0003).
type GeometryFeature struct {
	Align                bool
	LogicalBlockSize     uint32
	AlignmentGranularity uint64
	LowestAlignedLBA     uint64
}

// SSC is one Security Subsystem Class descriptor.
type SSC struct {
	Code          uint16
	Name          string // "Opal 2", "Pyrite 2", "Ruby", ...
	BaseComID     uint16
	NumComIDs     uint16
	RangeCrossing bool // Opal/Ruby/Enterprise: range crossing behaviour bit
	// Opal 2 / Pyrite / Ruby only.
	AdminAuthorities, UserAuthorities uint16
	InitialPINIsMSID                  bool // Initial C_PIN_SID PIN indicator 0x00: C_PIN_SID = MSID
	RevertPINToMSID                   bool // behaviour of C_PIN_SID upon TPer revert 0x00: becomes MSID
}

// BlockSIDFeature is the Block SID Authentication descriptor (0x0402).
type BlockSIDFeature struct {
	SIDValueChanged bool // bit 0: C_PIN_SID differs from MSID (the drive is owned)
	SIDBlocked      bool // bit 1: SID authentication blocked until reset
	HardwareReset   bool // byte 5 bit 0
}

// DataRemovalFeature is the Data Removal Mechanism descriptor (0x0404).
type DataRemovalFeature struct {
	Processing  bool  // a data removal operation is in progress
	Interrupted bool  // the last one was interrupted
	Mechanisms  uint8 // bit 0 overwrite, 1 block erase, 2 crypto erase, 5 vendor
}

// Mechanism bits of DataRemovalFeature.Mechanisms.
const (
	RemovalOverwrite   = 1 << 0
	RemovalBlockErase  = 1 << 1
	RemovalCryptoErase = 1 << 2
	RemovalVendor      = 1 << 5
)

var sscNames = map[uint16]string{
	FeatureEnterprise: "Enterprise",
	FeatureOpalV1:     "Opal 1",
	FeatureOpalV2:     "Opal 2",
	FeatureOpalite:    "Opalite",
	FeaturePyriteV1:   "Pyrite 1",
	FeaturePyriteV2:   "Pyrite 2",
	FeatureRuby:       "Ruby",
}

// minLen is the smallest descriptor data length (after the 4-byte
// descriptor header) each parsed feature needs.
var minLen = map[uint16]int{
	FeatureTPer: 1, FeatureLocking: 1, FeatureGeometry: 28,
	FeatureEnterprise: 5, FeatureOpalV1: 5, FeatureOpalV2: 11, FeatureRuby: 11,
	FeatureOpalite: 11, FeaturePyriteV1: 11, FeaturePyriteV2: 11,
	FeatureBlockSID: 2, FeatureDataRemoval: 3,
}

// ParseDiscovery decodes a Level 0 Discovery response: a 48-byte header
// whose first field is the length of what follows it, then feature
// descriptors (code, version, length, data). All multi-byte fields are big
// endian. It fails on truncation, inconsistent lengths, or a response
// without the mandatory TPer feature (not a TCG device).
func ParseDiscovery(b []byte) (*Discovery, error) {
	if len(b) < headerSize {
		return nil, fmt.Errorf("response is %d bytes, shorter than the %d-byte header", len(b), headerSize)
	}
	be := binary.BigEndian
	paramLen := be.Uint32(b[0:])
	if paramLen == 0 {
		return nil, fmt.Errorf("%w: header length of parameter data is 0", ErrNoTCG)
	}
	total := uint64(paramLen) + 4 // the length field does not count itself
	if total < headerSize {
		return nil, fmt.Errorf("header says %d bytes of parameter data, less than the rest of the %d-byte header", paramLen, headerSize)
	}
	if total > uint64(len(b)) {
		return nil, fmt.Errorf("header says %d bytes in total but only %d were returned (truncated response)", total, len(b))
	}
	d := &Discovery{Revision: be.Uint32(b[4:])}
	off := headerSize
	for off < int(total) {
		if int(total)-off < descriptorHeaderLen {
			return nil, fmt.Errorf("feature descriptor at offset %d: %d bytes left, need a 4-byte descriptor header", off, int(total)-off)
		}
		code := be.Uint16(b[off:])
		n := int(b[off+3])
		end := off + descriptorHeaderLen + n
		if end > int(total) {
			return nil, fmt.Errorf("feature %#04x at offset %d: length %d runs past the end of the response (%d bytes)", code, off, n, total)
		}
		if want, ok := minLen[code]; ok && n < want {
			return nil, fmt.Errorf("feature %#04x at offset %d: length %d, the specification's layout needs at least %d", code, off, n, want)
		}
		d.parseFeature(code, b[off+descriptorHeaderLen:end])
		d.Features = append(d.Features, code)
		off = end
	}
	if d.TPer == nil {
		return nil, fmt.Errorf("%w: no TPer feature descriptor (0x0001) among %s", ErrNoTCG, codes(d.Features))
	}
	return d, nil
}

func (d *Discovery) parseFeature(code uint16, p []byte) {
	be := binary.BigEndian
	switch code {
	case FeatureTPer:
		f := p[0]
		d.TPer = &TPerFeature{Sync: f&1 != 0, Async: f&2 != 0, AckNak: f&4 != 0, BufferMgmt: f&8 != 0, Streaming: f&0x10 != 0, ComIDMgmt: f&0x40 != 0}
	case FeatureLocking:
		f := p[0]
		d.Locking = &LockingFeature{
			Supported: f&1 != 0, Enabled: f&2 != 0, Locked: f&4 != 0, MediaEncryption: f&8 != 0,
			MBREnabled: f&0x10 != 0, MBRDone: f&0x20 != 0, MBRNotSupported: f&0x40 != 0,
		}
	case FeatureGeometry:
		d.Geometry = &GeometryFeature{
			Align:                p[0]&1 != 0,
			LogicalBlockSize:     be.Uint32(p[8:]),
			AlignmentGranularity: be.Uint64(p[12:]),
			LowestAlignedLBA:     be.Uint64(p[20:]),
		}
	case FeatureEnterprise, FeatureOpalV1:
		d.SSCs = append(d.SSCs, SSC{Code: code, Name: sscNames[code], BaseComID: be.Uint16(p[0:]), NumComIDs: be.Uint16(p[2:]), RangeCrossing: p[4]&1 != 0})
	case FeatureOpalV2, FeatureRuby, FeatureOpalite, FeaturePyriteV1, FeaturePyriteV2:
		s := SSC{Code: code, Name: sscNames[code], BaseComID: be.Uint16(p[0:]), NumComIDs: be.Uint16(p[2:])}
		if code == FeatureOpalV2 || code == FeatureRuby {
			// Opalite and Pyrite have no locking ranges: bytes 8..12 reserved.
			s.RangeCrossing = p[4]&1 != 0
			s.AdminAuthorities = be.Uint16(p[5:])
			s.UserAuthorities = be.Uint16(p[7:])
		}
		s.InitialPINIsMSID = p[9] == 0x00
		s.RevertPINToMSID = p[10] == 0x00
		d.SSCs = append(d.SSCs, s)
	case FeatureBlockSID:
		d.BlockSID = &BlockSIDFeature{SIDValueChanged: p[0]&1 != 0, SIDBlocked: p[0]&2 != 0, HardwareReset: p[1]&1 != 0}
	case FeatureDataRemoval:
		d.DataRemoval = &DataRemovalFeature{Processing: p[1]&1 != 0, Interrupted: p[1]&4 != 0, Mechanisms: p[2]}
	}
}

// sscPreference orders SSCs when a drive reports several: the one whose
// revert semantics the wipe relies on comes first.
var sscPreference = []uint16{FeatureOpalV2, FeatureRuby, FeatureOpalV1, FeaturePyriteV2, FeaturePyriteV1, FeatureOpalite, FeatureEnterprise}

// PrimarySSC is the SSC the drive is driven as, or nil when it reports none.
func (d *Discovery) PrimarySSC() *SSC {
	for _, code := range sscPreference {
		for i := range d.SSCs {
			if d.SSCs[i].Code == code {
				return &d.SSCs[i]
			}
		}
	}
	return nil
}

// SSCName names the primary SSC, or "none".
func (d *Discovery) SSCName() string {
	if s := d.PrimarySSC(); s != nil {
		return s.Name
	}
	return "none"
}

// SupportsRevert reports whether the drive implements the Admin SP with
// RevertTPer by PSID/SID: Opal 1/2, Ruby, Pyrite and Opalite do; Enterprise
// uses a different model the kernel's sed-opal does not drive.
func (d *Discovery) SupportsRevert() bool {
	s := d.PrimarySSC()
	return s != nil && s.Code != FeatureEnterprise
}

// CryptoErasesOnRevert reports whether a revert destroys user data
// cryptographically: Opal and Ruby encrypt all media; Pyrite has no
// encryption, so its revert only removes the access controls (Pyrite 2
// may perform a data removal mechanism, reported separately).
func (d *Discovery) CryptoErasesOnRevert() bool {
	s := d.PrimarySSC()
	if s == nil {
		return false
	}
	switch s.Code {
	case FeatureOpalV1, FeatureOpalV2, FeatureRuby:
		return true
	case FeaturePyriteV2:
		return d.DataRemoval != nil && d.DataRemoval.Mechanisms&RemovalCryptoErase != 0
	}
	return false
}

// FactoryState reports whether the locking state looks like a drive fresh
// from the factory or just reverted: locking not enabled, nothing locked,
// no shadow MBR. The reason names the first difference.
func (d *Discovery) FactoryState() (bool, string) {
	l := d.Locking
	switch {
	case l == nil:
		return true, "no locking feature"
	case l.Enabled:
		return false, "locking is enabled"
	case l.Locked:
		return false, "a range is locked"
	case l.MBREnabled:
		return false, "shadow MBR is enabled"
	}
	if d.BlockSID != nil && d.BlockSID.SIDValueChanged {
		return false, "C_PIN_SID differs from MSID (drive still owned)"
	}
	return true, "locking disabled, unlocked, no shadow MBR"
}

// Summary is the one-line capability and lock state report.
func (d *Discovery) Summary() string {
	var parts []string
	parts = append(parts, "ssc="+d.SSCName())
	if s := d.PrimarySSC(); s != nil {
		parts = append(parts, fmt.Sprintf("comid=%#04x+%d", s.BaseComID, s.NumComIDs))
	}
	if l := d.Locking; l != nil {
		parts = append(parts, fmt.Sprintf("locking supported=%t enabled=%t locked=%t mbr enabled=%t done=%t",
			l.Supported, l.Enabled, l.Locked, l.MBREnabled, l.MBRDone))
	} else {
		parts = append(parts, "locking=absent")
	}
	if b := d.BlockSID; b != nil {
		parts = append(parts, fmt.Sprintf("sid-changed=%t sid-blocked=%t", b.SIDValueChanged, b.SIDBlocked))
	}
	return strings.Join(parts, " ")
}

func codes(cs []uint16) string {
	if len(cs) == 0 {
		return "no descriptors"
	}
	var s []string
	for _, c := range cs {
		s = append(s, fmt.Sprintf("%#04x", c))
	}
	return strings.Join(s, ", ")
}
