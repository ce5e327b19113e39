package nvme

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"strings"
)

// IdentifySize is the size of every Identify data structure.
const IdentifySize = 4096

// CNS values for the Identify command (NVMe 2.0, Figure 273).
const (
	cnsNamespace  = 0x00
	cnsController = 0x01
)

// defaultTimeoutMs bounds admin commands that do not set their own timeout;
// zero would mean the driver's admin_timeout (60 s by default).
const defaultTimeoutMs = 30_000

// Controller is the decoded Identify Controller data structure (CNS 01h).
// Offsets follow NVMe Base Specification 2.0, Figure 275.
type Controller struct {
	VID      uint16 // PCI vendor ID, bytes 1:0
	SSVID    uint16 // PCI subsystem vendor ID, bytes 3:2
	SN       string // serial number, bytes 23:4
	MN       string // model number, bytes 63:24
	FR       string // firmware revision, bytes 71:64
	RAB      uint8  // recommended arbitration burst, byte 72
	IEEE     uint32 // IEEE OUI, bytes 75:73 (little endian)
	CMIC     uint8  // multi-path I/O and namespace sharing, byte 76
	MDTS     uint8  // maximum data transfer size (2^n pages, 0 = unlimited), byte 77
	CNTLID   uint16 // controller ID, bytes 79:78
	VER      uint32 // version, bytes 83:80 (MJR<<16 | MNR<<8 | TER)
	CTRATT   uint32 // controller attributes, bytes 99:96
	CNTRLTYP uint8  // controller type, byte 111 (1 I/O, 2 discovery, 3 admin)

	OACS    uint16 // optional admin command support, bytes 257:256
	ACL     uint8  // abort command limit, byte 258
	AERL    uint8  // async event request limit, byte 259
	FRMW    uint8  // firmware updates, byte 260 (see the Firmware* methods)
	LPA     uint8  // log page attributes, byte 261
	ELPE    uint8  // error log page entries, byte 262
	NPSS    uint8  // number of power states support (zero-based), byte 263
	WCTEMP  uint16 // warning composite temperature threshold (K), bytes 267:266
	CCTEMP  uint16 // critical composite temperature threshold (K), bytes 269:268
	MTFA    uint16 // max time for firmware activation (100 ms units), bytes 271:270
	TNVMCAP *big.Int
	UNVMCAP *big.Int
	FWUG    uint8  // firmware update granularity (4 KiB units; 0 unknown, 0xff none), byte 319
	SANICAP uint32 // sanitize capabilities, bytes 331:328

	SQES   uint8  // byte 512
	CQES   uint8  // byte 513
	MAXCMD uint16 // bytes 515:514
	NN     uint32 // number of namespaces, bytes 519:516
	ONCS   uint16 // optional NVM command support, bytes 521:520
	FNA    uint8  // format NVM attributes, byte 524
	VWC    uint8  // volatile write cache, byte 525
	SGLS   uint32 // bytes 539:536
	SUBNQN string // NVM subsystem NQN, bytes 1023:768
}

// OACS bits (Figure 275, bytes 257:256).
const (
	OACSSecurity      = 1 << 0 // Security Send/Receive (TCG Opal lives here)
	OACSFormat        = 1 << 1 // Format NVM
	OACSFirmware      = 1 << 2 // Firmware Commit / Image Download
	OACSNSManagement  = 1 << 3
	OACSSelfTest      = 1 << 4
	OACSDirectives    = 1 << 5
	OACSNVMeMI        = 1 << 6
	OACSVirtMgmt      = 1 << 7
	OACSDoorbellBuf   = 1 << 8
	OACSGetLBAStatus  = 1 << 9
	OACSCmdFeatLockdn = 1 << 10
)

// SANICAP bits (Figure 275, bytes 331:328).
const (
	SANICAPCryptoErase = 1 << 0
	SANICAPBlockErase  = 1 << 1
	SANICAPOverwrite   = 1 << 2
)

// FNA bits (Figure 275, byte 524).
const (
	FNAFormatAllNamespaces = 1 << 0 // format applies to every namespace
	FNAEraseAllNamespaces  = 1 << 1 // secure erase applies to every namespace
	FNACryptoErase         = 1 << 2 // crypto erase supported by Format NVM
)

// FirmwareSlots is the number of firmware slots (FRMW bits 3:1, 1..7).
func (c *Controller) FirmwareSlots() int { return int(c.FRMW>>1) & 0x7 }

// FirmwareSlot1ReadOnly reports FRMW bit 0: slot 1 holds a read-only image.
func (c *Controller) FirmwareSlot1ReadOnly() bool { return c.FRMW&1 != 0 }

// FirmwareActivateWithoutReset reports FRMW bit 4: commit action 3 can
// activate an image without a reset.
func (c *Controller) FirmwareActivateWithoutReset() bool { return c.FRMW&(1<<4) != 0 }

// Version renders VER as "1.4.0".
func (c *Controller) Version() string {
	return fmt.Sprintf("%d.%d.%d", c.VER>>16, (c.VER>>8)&0xff, c.VER&0xff)
}

// ParseController decodes a 4096-byte Identify Controller structure.
func ParseController(b []byte) (*Controller, error) {
	if len(b) != IdentifySize {
		return nil, fmt.Errorf("identify controller: expected %d bytes, got %d", IdentifySize, len(b))
	}
	le := binary.LittleEndian
	c := &Controller{
		VID:      le.Uint16(b[0:]),
		SSVID:    le.Uint16(b[2:]),
		SN:       asciiField(b[4:24]),
		MN:       asciiField(b[24:64]),
		FR:       asciiField(b[64:72]),
		RAB:      b[72],
		IEEE:     uint32(b[73]) | uint32(b[74])<<8 | uint32(b[75])<<16,
		CMIC:     b[76],
		MDTS:     b[77],
		CNTLID:   le.Uint16(b[78:]),
		VER:      le.Uint32(b[80:]),
		CTRATT:   le.Uint32(b[96:]),
		CNTRLTYP: b[111],
		OACS:     le.Uint16(b[256:]),
		ACL:      b[258],
		AERL:     b[259],
		FRMW:     b[260],
		LPA:      b[261],
		ELPE:     b[262],
		NPSS:     b[263],
		WCTEMP:   le.Uint16(b[266:]),
		CCTEMP:   le.Uint16(b[268:]),
		MTFA:     le.Uint16(b[270:]),
		TNVMCAP:  le128(b[280:296]),
		UNVMCAP:  le128(b[296:312]),
		FWUG:     b[319],
		SANICAP:  le.Uint32(b[328:]),
		SQES:     b[512],
		CQES:     b[513],
		MAXCMD:   le.Uint16(b[514:]),
		NN:       le.Uint32(b[516:]),
		ONCS:     le.Uint16(b[520:]),
		FNA:      b[524],
		VWC:      b[525],
		SGLS:     le.Uint32(b[536:]),
		SUBNQN:   nulTerminated(b[768:1024]),
	}
	return c, nil
}

// LBAFormat is one LBA Format Data Structure (NVMe 2.0 NVM Command Set,
// Figure 116).
type LBAFormat struct {
	MS    uint16 // metadata bytes per LBA
	LBADS uint8  // LBA data size as a power of two
	RP    uint8  // relative performance (0 best .. 3 degraded)
}

// Size is the LBA data size in bytes.
func (f LBAFormat) Size() uint32 {
	if f.LBADS < 9 || f.LBADS > 31 {
		return 0 // the format is not in use (LBADS 0) or not valid
	}
	return 1 << f.LBADS
}

// Namespace is the decoded Identify Namespace structure (CNS 00h) for the
// NVM command set (NVM Command Set Specification 1.0, Figure 97).
type Namespace struct {
	NSID       uint32
	NSZE       uint64 // namespace size in logical blocks, bytes 7:0
	NCAP       uint64 // capacity in logical blocks, bytes 15:8
	NUSE       uint64 // utilization in logical blocks, bytes 23:16
	NSFEAT     uint8  // byte 24
	NLBAF      uint8  // number of LBA formats (zero-based), byte 25
	FLBAS      uint8  // formatted LBA size, byte 26
	MC         uint8  // metadata capabilities, byte 27
	DPC        uint8  // byte 28
	DPS        uint8  // byte 29
	NMIC       uint8  // byte 30
	FPI        uint8  // byte 32
	DLFEAT     uint8  // byte 33
	NGUID      [16]byte
	EUI64      [8]byte
	LBAFormats []LBAFormat // NLBAF+1 entries from byte 128
}

// FormatIndex is the LBA format in use: FLBAS bits 3:0, extended by bits
// 6:5 when more than 16 formats are reported.
func (n *Namespace) FormatIndex() int {
	i := int(n.FLBAS & 0x0f)
	if n.NLBAF >= 16 {
		i |= int(n.FLBAS>>5&0x3) << 4
	}
	return i
}

// LBAFormat is the format in use.
func (n *Namespace) LBAFormat() LBAFormat {
	i := n.FormatIndex()
	if i >= len(n.LBAFormats) {
		return LBAFormat{}
	}
	return n.LBAFormats[i]
}

// LBASize is the logical block size in bytes of the format in use.
func (n *Namespace) LBASize() uint32 { return n.LBAFormat().Size() }

// SizeBytes is NSZE times the logical block size.
func (n *Namespace) SizeBytes() uint64 { return n.NSZE * uint64(n.LBASize()) }

// ParseNamespace decodes a 4096-byte Identify Namespace structure.
func ParseNamespace(nsid uint32, b []byte) (*Namespace, error) {
	if len(b) != IdentifySize {
		return nil, fmt.Errorf("identify namespace %d: expected %d bytes, got %d", nsid, IdentifySize, len(b))
	}
	le := binary.LittleEndian
	n := &Namespace{
		NSID:   nsid,
		NSZE:   le.Uint64(b[0:]),
		NCAP:   le.Uint64(b[8:]),
		NUSE:   le.Uint64(b[16:]),
		NSFEAT: b[24],
		NLBAF:  b[25],
		FLBAS:  b[26],
		MC:     b[27],
		DPC:    b[28],
		DPS:    b[29],
		NMIC:   b[30],
		FPI:    b[32],
		DLFEAT: b[33],
	}
	copy(n.NGUID[:], b[104:120])
	copy(n.EUI64[:], b[120:128])
	if n.NLBAF > 63 {
		return nil, fmt.Errorf("identify namespace %d: NLBAF %d exceeds the 64 formats the structure holds", nsid, n.NLBAF)
	}
	for i := 0; i <= int(n.NLBAF); i++ {
		v := le.Uint32(b[128+4*i:])
		n.LBAFormats = append(n.LBAFormats, LBAFormat{
			MS:    uint16(v),
			LBADS: uint8(v >> 16),
			RP:    uint8(v>>24) & 0x3,
		})
	}
	if n.FormatIndex() > int(n.NLBAF) {
		return nil, fmt.Errorf("identify namespace %d: FLBAS selects format %d but NLBAF reports %d formats", nsid, n.FormatIndex(), int(n.NLBAF)+1)
	}
	// SizeBytes multiplies: a size that does not fit 64 bits is not a
	// namespace, and must not wrap into a small one.
	if size := uint64(n.LBASize()); size > 0 && n.NSZE > math.MaxUint64/size {
		return nil, fmt.Errorf("identify namespace %d: NSZE %d blocks of %d bytes: more than 2^64 bytes", nsid, n.NSZE, size)
	}
	return n, nil
}

// IdentifyController issues Identify (CNS 01h) and decodes the result.
func IdentifyController(a Admin) (*Controller, error) {
	buf := make([]byte, IdentifySize)
	_, err := a.AdminCommand(&Command{Opcode: OpIdentify, CDW10: cnsController, Data: buf, TimeoutMs: defaultTimeoutMs})
	if err != nil {
		return nil, fmt.Errorf("identify controller: %w", err)
	}
	return ParseController(buf)
}

// IdentifyNamespace issues Identify (CNS 00h) for nsid and decodes it.
func IdentifyNamespace(a Admin, nsid uint32) (*Namespace, error) {
	if nsid == 0 || nsid == 0xffffffff {
		return nil, fmt.Errorf("identify namespace: nsid %#x is not a single namespace", nsid)
	}
	buf := make([]byte, IdentifySize)
	_, err := a.AdminCommand(&Command{Opcode: OpIdentify, NSID: nsid, CDW10: cnsNamespace, Data: buf, TimeoutMs: defaultTimeoutMs})
	if err != nil {
		return nil, fmt.Errorf("identify namespace %d: %w", nsid, err)
	}
	ns, err := ParseNamespace(nsid, buf)
	if err != nil {
		return nil, err
	}
	if ns.NSZE == 0 {
		// An inactive NSID returns a zero-filled structure rather than an error.
		return nil, fmt.Errorf("identify namespace %d: namespace is not active (NSZE 0)", nsid)
	}
	return ns, nil
}

// asciiField decodes a space-padded ASCII identify field. The bytes are
// the device's: anything that is not UTF-8 becomes U+FFFD, since these
// strings go into protobuf messages, which refuse invalid UTF-8.
func asciiField(b []byte) string {
	return validUTF8(strings.TrimSpace(strings.TrimRight(string(b), "\x00")))
}

func nulTerminated(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return validUTF8(strings.TrimSpace(string(b)))
}

func validUTF8(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

func le128(b []byte) *big.Int {
	be := make([]byte, len(b))
	for i := range b {
		be[len(b)-1-i] = b[i]
	}
	return new(big.Int).SetBytes(be)
}
