package nvme

import "fmt"

// Security command opcodes (NVMe 2.0 Figure 28). They tunnel a security
// protocol such as TCG (SECP 01h) to the controller.
const (
	OpSecuritySend    uint8 = 0x81
	OpSecurityReceive uint8 = 0x82
)

// securityCDW10 packs SECP (31:24), SPSP1 (23:16), SPSP0 (15:8) and NSSF
// (7:0, NVMe-specific field, zero for TCG). The 16-bit SPSP (the TCG ComID)
// therefore sits in bits 23:8 most-significant byte first (NVMe 2.0
// Figures 306 and 310).
func securityCDW10(secp uint8, spsp uint16) uint32 {
	return uint32(secp)<<24 | uint32(spsp)<<8
}

// SecurityReceive issues Security Receive for protocol secp and protocol
// specific field spsp on namespace nsid (0 for controller-wide protocols
// like TCG), filling buf (allocation length = len(buf)).
func SecurityReceive(a Admin, nsid uint32, secp uint8, spsp uint16, buf []byte) error {
	if len(buf) == 0 {
		return fmt.Errorf("security receive secp %#02x spsp %#04x: empty buffer", secp, spsp)
	}
	_, err := a.AdminCommand(&Command{
		Opcode:    OpSecurityReceive,
		NSID:      nsid,
		CDW10:     securityCDW10(secp, spsp),
		CDW11:     uint32(len(buf)), // AL: allocation length in bytes
		Data:      buf,
		TimeoutMs: defaultTimeoutMs,
	})
	if err != nil {
		return fmt.Errorf("security receive secp %#02x spsp %#04x: %w", secp, spsp, err)
	}
	return nil
}

// SecuritySend issues Security Send carrying payload.
func SecuritySend(a Admin, nsid uint32, secp uint8, spsp uint16, payload []byte) error {
	if len(payload) == 0 {
		return fmt.Errorf("security send secp %#02x spsp %#04x: empty payload", secp, spsp)
	}
	_, err := a.AdminCommand(&Command{
		Opcode:    OpSecuritySend,
		NSID:      nsid,
		CDW10:     securityCDW10(secp, spsp),
		CDW11:     uint32(len(payload)), // TL: transfer length in bytes
		Data:      payload,
		TimeoutMs: defaultTimeoutMs,
	})
	if err != nil {
		return fmt.Errorf("security send secp %#02x spsp %#04x: %w", secp, spsp, err)
	}
	return nil
}
