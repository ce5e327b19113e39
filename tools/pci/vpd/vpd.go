// Package vpd reads PCI Vital Product Data as an adapter returns it
// (sysfs .../vpd): the identifier string and the read-only keywords
// (PCI Local Bus 3.0 §6.4, PCIe base specification "VPD"). The bytes come
// from the device: every string is made valid UTF-8, and a malformed
// resource ends the parse, keeping what was read before it.
package vpd

import (
	"strings"
	"unicode"
)

// Resource tags (large resources: bit 7 set, then a 16-bit length).
const (
	tagIdentifier = 0x82 // identifier string
	tagReadOnly   = 0x90 // VPD-R: keywords, each 2 bytes, a length byte, the value
	// tagEnd (0x78) and any other small resource end the parse.
)

// Fields are what CURE reads of an adapter's VPD: the identifier string
// ("NVIDIA ConnectX-7 HHHL Adapter Card") and the part number (the PN
// keyword of VPD-R, "MCX75310AAS-NEAT"); "" where absent.
type Fields struct {
	Name, PartNumber string
}

// Parse reads b. It never fails: VPD is advisory (it selects manifest
// entries by glob), so what cannot be read is left empty.
func Parse(b []byte) Fields {
	var f Fields
	for len(b) >= 3 {
		tag := b[0]
		if tag&0x80 == 0 { // small resource: the end tag or unknown
			return f
		}
		n := int(b[1]) | int(b[2])<<8
		if 3+n > len(b) {
			return f
		}
		data := b[3 : 3+n]
		switch tag {
		case tagIdentifier:
			f.Name = text(data)
		case tagReadOnly:
			for len(data) >= 3 {
				k, l := string(data[:2]), int(data[2])
				if 3+l > len(data) {
					break
				}
				if k == "PN" {
					f.PartNumber = text(data[3 : 3+l])
				}
				data = data[3+l:]
			}
		}
		b = b[3+n:]
	}
	return f
}

// text trims a VPD string field. What is not UTF-8 becomes U+FFFD, since
// the name ends up in protobuf strings. Padding is spaces or NULs, in
// either order.
func text(b []byte) string {
	s := strings.TrimFunc(string(b), func(r rune) bool { return r == 0 || unicode.IsSpace(r) })
	return strings.ToValidUTF8(s, "\uFFFD")
}

// Encode builds the VPD of an adapter with this identifier string and part
// number (VPD-R with PN and an RV checksum keyword whose value is not
// computed, then the end tag): fixtures for tests of code that reads VPD.
// Strings longer than a resource holds are cut.
func Encode(f Fields) []byte {
	name, pn := f.Name[:min(len(f.Name), 0xffff)], f.PartNumber[:min(len(f.PartNumber), 0xff-4-3)]
	b := []byte{tagIdentifier, byte(len(name)), byte(len(name) >> 8)}
	b = append(b, name...)
	ro := append([]byte("PN"), byte(len(pn)))
	ro = append(ro, pn...)
	ro = append(ro, 'R', 'V', 1, 0)
	b = append(b, tagReadOnly, byte(len(ro)), 0)
	b = append(b, ro...)
	return append(b, 0x78)
}
