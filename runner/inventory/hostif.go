package inventory

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// SMBIOS type 42, the Management Controller Host Interface (DSP0134), with
// the network host interface and Redfish over IP protocol data of DSP0270:
// how the host reaches its BMC's Redfish service (the BMC's address, port,
// VLAN and name) and, in the v2 device descriptors, the MAC of the
// host-side NIC the BMC exposes. An enlisting machine reports it so that
// approving it needs no BMC address typed in.

const (
	smbiosHostInterface = 42
	ifaceNetwork        = 0x40 // network host interface (DSP0270)
	protoRedfishOverIP  = 0x04
	redfishFixedLen     = 0x5b // protocol data up to the hostname
	maxHostIfaceRecords = 8
)

// ErrNotHostInterface: the bytes are not an SMBIOS type 42 structure.
var ErrNotHostInterface = errors.New("not an SMBIOS type 42 structure")

// HostInterfaces reads every type 42 record the kernel exports under root
// (sys/firmware/dmi/entries/42-*/raw), one HostInterface per Redfish over
// IP protocol record (one without protocol data for an interface that has
// none). No record is no error: most machines have none.
func HostInterfaces(root string) ([]*curev1.HostInterface, error) {
	paths, err := filepath.Glob(filepath.Join(root, "sys/firmware/dmi/entries/42-*/raw"))
	if err != nil {
		return nil, fmt.Errorf("smbios type 42: %w", err)
	}
	sort.Strings(paths)
	var out []*curev1.HostInterface
	var errs []error
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("smbios type 42: %w", err))
			continue
		}
		his, err := ParseHostInterface(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		out = append(out, his...)
		if len(out) >= maxHostIfaceRecords {
			return out[:maxHostIfaceRecords], errors.Join(errs...)
		}
	}
	return out, errors.Join(errs...)
}

// ParseHostInterface parses one type 42 structure (its formatted area;
// the string set after it is not read). Fields past what the structure
// holds are left empty; a protocol record longer than the structure is an
// error.
func ParseHostInterface(raw []byte) ([]*curev1.HostInterface, error) {
	if len(raw) < 4 || raw[0] != smbiosHostInterface {
		return nil, ErrNotHostInterface
	}
	n := int(raw[1])
	if n < 6 || n > len(raw) {
		return nil, fmt.Errorf("%w: length %d of %d bytes", ErrNotHostInterface, n, len(raw))
	}
	b := raw[:n]
	base := &curev1.HostInterface{InterfaceType: uint32(b[4])}
	dataLen := int(b[5])
	if 6+dataLen > len(b) {
		return nil, fmt.Errorf("interface data of %d bytes past the structure's %d", dataLen, n)
	}
	if base.InterfaceType == ifaceNetwork {
		parseDevice(base, b[6:6+dataLen])
	}
	rest := b[6+dataLen:]
	if len(rest) == 0 {
		return []*curev1.HostInterface{base}, nil
	}
	count := int(rest[0])
	rest = rest[1:]
	var out []*curev1.HostInterface
	for i := 0; i < count; i++ {
		if len(rest) < 2 || 2+int(rest[1]) > len(rest) {
			return nil, fmt.Errorf("protocol record %d of %d past the structure", i+1, count)
		}
		typ, data := rest[0], rest[2:2+int(rest[1])]
		rest = rest[2+int(rest[1]):]
		if typ != protoRedfishOverIP {
			continue
		}
		hi := &curev1.HostInterface{InterfaceType: base.InterfaceType, Device: base.Device, BmcMac: base.BmcMac}
		parseRedfishOverIP(hi, data)
		out = append(out, hi)
	}
	if len(out) == 0 {
		out = []*curev1.HostInterface{base}
	}
	return out, nil
}

// parseDevice reads the network host interface's device descriptor:
// USB and PCI ids, and the MAC of the v2 descriptors.
func parseDevice(hi *curev1.HostInterface, d []byte) {
	if len(d) < 1 {
		return
	}
	le := binary.LittleEndian
	switch d[0] {
	case 0x02: // USB: idVendor, idProduct
		if len(d) >= 5 {
			hi.Device = fmt.Sprintf("usb %04x:%04x", le.Uint16(d[1:]), le.Uint16(d[3:]))
		}
	case 0x03: // PCI: vendor, device
		if len(d) >= 5 {
			hi.Device = fmt.Sprintf("pci %04x:%04x", le.Uint16(d[1:]), le.Uint16(d[3:]))
		}
	case 0x04: // USB v2: length, idVendor, idProduct, iSerialNumber, MAC
		if len(d) >= 6 {
			hi.Device = fmt.Sprintf("usb %04x:%04x", le.Uint16(d[2:]), le.Uint16(d[4:]))
		}
		if len(d) >= 13 {
			hi.BmcMac = net.HardwareAddr(d[7:13]).String()
		}
	case 0x05: // PCI v2: length, vendor, device, subsystem vendor, subsystem, MAC
		if len(d) >= 6 {
			hi.Device = fmt.Sprintf("pci %04x:%04x", le.Uint16(d[2:]), le.Uint16(d[4:]))
		}
		if len(d) >= 16 {
			hi.BmcMac = net.HardwareAddr(d[10:16]).String()
		}
	}
}

// parseRedfishOverIP reads the Redfish over IP protocol data (DSP0270):
// service UUID, the host's and the service's addresses, port, VLAN, name.
func parseRedfishOverIP(hi *curev1.HostInterface, d []byte) {
	if len(d) >= 16 {
		hi.ServiceUuid = smbiosUUID(d[:16])
	}
	if len(d) < redfishFixedLen {
		return
	}
	hi.HostIp = ipOf(d[0x11], d[0x12:0x22])
	hi.IpDiscovery = discoveryName(d[0x32])
	hi.BmcIp = ipOf(d[0x33], d[0x34:0x44])
	hi.BmcNetmask = ipOf(d[0x33], d[0x44:0x54])
	hi.BmcPort = uint32(binary.LittleEndian.Uint16(d[0x54:]))
	hi.Vlan = binary.LittleEndian.Uint32(d[0x56:])
	if hn := int(d[0x5a]); redfishFixedLen+hn <= len(d) {
		hi.BmcHostname = clean(strings.TrimRight(string(d[redfishFixedLen:redfishFixedLen+hn]), "\x00"))
	}
}

// ipOf is an address of the given format (1 IPv4 in the first 4 bytes,
// 2 IPv6), "" for an unknown format or an unset address.
func ipOf(format byte, b []byte) string {
	var ip net.IP
	switch format {
	case 0x01:
		ip = net.IP(append([]byte(nil), b[:4]...))
	case 0x02:
		ip = net.IP(append([]byte(nil), b[:16]...))
	default:
		return ""
	}
	if ip.IsUnspecified() {
		return ""
	}
	return ip.String()
}

func discoveryName(t byte) string {
	switch t {
	case 1:
		return "static"
	case 2:
		return "dhcp"
	case 3:
		return "autoconf"
	case 4:
		return "host-selected"
	}
	return ""
}

// smbiosUUID formats a UUID as SMBIOS stores it (the first three fields
// little-endian).
func smbiosUUID(b []byte) string {
	le := binary.LittleEndian
	return fmt.Sprintf("%08x-%04x-%04x-%x-%x", le.Uint32(b), le.Uint16(b[4:]), le.Uint16(b[6:]), b[8:10], b[10:16])
}
