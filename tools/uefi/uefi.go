// Package uefi encodes the UEFI data a virtual BMC or a site hands to
// firmware: EFI_SIGNATURE_LISTs of X.509 certificates (EDK2's
// etc/edk2/https/cacerts, db entries), device paths and load options
// (Boot####), and variables appended to an EDK2 (OVMF) variable store file
// while the machine is off.
package uefi

import (
	"bytes"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"unicode/utf16"
)

// GUID is an EFI GUID in its in-memory (mixed-endian) byte order.
type GUID [16]byte

// MustGUID parses the text form "8be4df61-93ca-11d2-aa0d-00e098032b8c".
func MustGUID(s string) GUID {
	g, err := ParseGUID(s)
	if err != nil {
		panic(err)
	}
	return g
}

// ParseGUID parses the text form of a GUID into its in-memory byte order
// (the first three fields little-endian).
func ParseGUID(s string) (GUID, error) {
	var g GUID
	var b [16]byte
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return g, fmt.Errorf("GUID %q: want 8-4-4-4-12 hex digits", s)
	}
	hex := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:]
	for i := 0; i < 16; i++ {
		var v byte
		if _, err := fmt.Sscanf(hex[2*i:2*i+2], "%02x", &v); err != nil {
			return g, fmt.Errorf("GUID %q: %w", s, err)
		}
		b[i] = v
	}
	copy(g[:], b[:])
	g[0], g[1], g[2], g[3] = b[3], b[2], b[1], b[0]
	g[4], g[5] = b[5], b[4]
	g[6], g[7] = b[7], b[6]
	return g, nil
}

// Well-known GUIDs.
var (
	// GlobalVariable is EFI_GLOBAL_VARIABLE (Boot####, BootNext, SecureBoot).
	GlobalVariable = MustGUID("8be4df61-93ca-11d2-aa0d-00e098032b8c")
	// CertX509 is EFI_CERT_X509_GUID, a DER certificate signature type.
	CertX509 = MustGUID("a5c059a1-94e4-4aa7-87b5-ab155c2bf072")
)

// SignatureList encodes certs (DER) as EFI_SIGNATURE_LISTs, one list per
// certificate (an X.509 list holds signatures of one size), each signature
// owned by owner: the format of EDK2's TlsCaCertificate variable and of
// OVMF's fw_cfg file etc/edk2/https/cacerts.
func SignatureList(owner GUID, certs ...[]byte) ([]byte, error) {
	if len(certs) == 0 {
		return nil, errors.New("signature list: no certificates")
	}
	var out bytes.Buffer
	for i, der := range certs {
		if _, err := x509.ParseCertificate(der); err != nil {
			return nil, fmt.Errorf("signature list: certificate %d: %w", i, err)
		}
		sigSize := 16 + len(der)
		out.Write(CertX509[:])
		_ = binary.Write(&out, binary.LittleEndian, uint32(28+sigSize)) // SignatureListSize
		_ = binary.Write(&out, binary.LittleEndian, uint32(0))          // SignatureHeaderSize
		_ = binary.Write(&out, binary.LittleEndian, uint32(sigSize))    // SignatureSize
		out.Write(owner[:])
		out.Write(der)
	}
	return out.Bytes(), nil
}

// PEMCertificates are the DER certificates of a PEM file's CERTIFICATE
// blocks; anything else in it is an error naming the block.
func PEMCertificates(name string, b []byte) ([][]byte, error) {
	var out [][]byte
	for i := 1; ; i++ {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s: PEM block %d is %q, want CERTIFICATE", name, i, blk.Type)
		}
		out = append(out, blk.Bytes)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no PEM CERTIFICATE block", name)
	}
	return out, nil
}

// DevicePath is an encoded device path without its end node; Bytes adds it.
type DevicePath []byte

func node(typ, sub byte, data []byte) []byte {
	b := make([]byte, 4, 4+len(data))
	b[0], b[1] = typ, sub
	binary.LittleEndian.PutUint16(b[2:], uint16(4+len(data)))
	return append(b, data...)
}

// PciRoot is ACPI(PNP0A03, uid).
func (p DevicePath) PciRoot(uid uint32) DevicePath {
	d := make([]byte, 8)
	binary.LittleEndian.PutUint32(d, 0x0a0341d0) // EISA PNP0A03
	binary.LittleEndian.PutUint32(d[4:], uid)
	return append(p, node(2, 1, d)...)
}

// Pci is Pci(device, function).
func (p DevicePath) Pci(dev, fn byte) DevicePath { return append(p, node(1, 1, []byte{fn, dev})...) }

// MAC is MAC(addr, 0x1): an Ethernet interface.
func (p DevicePath) MAC(addr net.HardwareAddr) DevicePath {
	d := make([]byte, 33)
	copy(d, addr)
	d[32] = 1 // IfType: Ethernet (RFC 3232)
	return append(p, node(3, 11, d)...)
}

// IPv4DHCP is IPv4(0.0.0.0, DHCP): address from DHCP, as EDK2's HTTP boot
// options carry it.
func (p DevicePath) IPv4DHCP() DevicePath { return append(p, node(3, 12, make([]byte, 23))...) }

// URI is Uri(uri).
func (p DevicePath) URI(uri string) DevicePath { return append(p, node(3, 24, []byte(uri))...) }

// Bytes is the device path with its end node.
func (p DevicePath) Bytes() []byte {
	return append(append([]byte(nil), p...), 0x7f, 0xff, 4, 0)
}

// ucs2 is s as NUL-terminated UCS-2 little-endian.
func ucs2(s string) []byte {
	u := utf16.Encode([]rune(s))
	b := make([]byte, 2*len(u)+2)
	for i, c := range u {
		binary.LittleEndian.PutUint16(b[2*i:], c)
	}
	return b
}

// LoadOption is an active EFI_LOAD_OPTION (the data of a Boot####
// variable) booting path.
func LoadOption(description string, path DevicePath) []byte {
	dp := path.Bytes()
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, uint32(1)) // LOAD_OPTION_ACTIVE
	_ = binary.Write(&b, binary.LittleEndian, uint16(len(dp)))
	b.Write(ucs2(description))
	b.Write(dp)
	return b.Bytes()
}
