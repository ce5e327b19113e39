package nvme

import "fmt"

// OpFormatNVM is the Format NVM admin opcode (NVMe 2.0 Figure 28).
const OpFormatNVM uint8 = 0x80

// SecureErase is the Format NVM Secure Erase Settings field (CDW10 bits
// 11:9, NVMe 2.0 Figure 286).
type SecureErase uint8

const (
	SESNone     SecureErase = 0 // no secure erase requested
	SESUserData SecureErase = 1 // user data erase
	SESCrypto   SecureErase = 2 // cryptographic erase (FNA bit 2 says if supported)
)

func (s SecureErase) String() string {
	switch s {
	case SESNone:
		return "no secure erase"
	case SESUserData:
		return "user data erase"
	case SESCrypto:
		return "cryptographic erase"
	}
	return fmt.Sprintf("SES %d", uint8(s))
}

// FormatOptions are the CDW10 fields of Format NVM. To erase without
// changing the namespace's geometry, copy LBAF/MSET/PI/PIL from Identify
// Namespace (see FormatOptionsFor).
type FormatOptions struct {
	LBAF uint8 // LBA format index 0..63 (LBAFL bits 3:0, LBAFU bits 13:12)
	MSET bool  // metadata transferred as part of an extended LBA (bit 4)
	PI   uint8 // protection information type 0..3 (bits 7:5)
	PIL  bool  // PI in the first bytes of metadata (bit 8)
	SES  SecureErase
}

// CDW10 encodes the options (NVMe 2.0 Figure 286).
func (o FormatOptions) CDW10() (uint32, error) {
	if o.LBAF > 63 {
		return 0, fmt.Errorf("format nvm: LBA format %d out of range 0..63", o.LBAF)
	}
	if o.PI > 7 {
		return 0, fmt.Errorf("format nvm: protection information %d out of range 0..7", o.PI)
	}
	if o.SES > 7 {
		return 0, fmt.Errorf("format nvm: secure erase setting %d out of range 0..7", o.SES)
	}
	v := uint32(o.LBAF&0x0f) | uint32(o.LBAF>>4)<<12 | uint32(o.PI)<<5 | uint32(o.SES)<<9
	if o.MSET {
		v |= 1 << 4
	}
	if o.PIL {
		v |= 1 << 8
	}
	return v, nil
}

// FormatOptionsFor keeps the namespace's current LBA format, metadata and
// protection settings, so the only effect of the format is the erase.
func FormatOptionsFor(ns *Namespace, ses SecureErase) FormatOptions {
	return FormatOptions{
		LBAF: uint8(ns.FormatIndex()),
		MSET: ns.FLBAS&(1<<4) != 0, // FLBAS bit 4: metadata at the end of the LBA
		PI:   ns.DPS & 0x7,         // DPS bits 2:0: PI type enabled
		PIL:  ns.DPS&(1<<3) != 0,   // DPS bit 3: PI first in metadata
		SES:  ses,
	}
}

// FormatTimeoutMs bounds Format NVM: a user-data erase on a large drive
// can take many minutes, and the controller holds the command until done.
const FormatTimeoutMs = 60 * 60 * 1000

// FormatNVM formats namespace nsid (0xffffffff for all namespaces).
func FormatNVM(a Admin, nsid uint32, o FormatOptions) error {
	if nsid == 0 {
		return fmt.Errorf("format nvm: nsid 0 names no namespace")
	}
	cdw10, err := o.CDW10()
	if err != nil {
		return err
	}
	_, err = a.AdminCommand(&Command{
		Opcode:    OpFormatNVM,
		NSID:      nsid,
		CDW10:     cdw10,
		TimeoutMs: FormatTimeoutMs,
	})
	if err != nil {
		return fmt.Errorf("format nvm nsid %#x (lbaf %d, %s): %w", nsid, o.LBAF, o.SES, err)
	}
	return nil
}
