package invtest

import (
	"encoding/binary"
	"net"
)

// HostInterface is an SMBIOS type 42 record (a Redfish Host Interface,
// DSP0270): a USB v2 network interface with the given MAC and one Redfish
// over IP protocol record naming the BMC at ip:port (static) with hostname.
// The bytes are a whole structure, string set included: what the kernel
// exports as sys/firmware/dmi/entries/42-0/raw, and what QEMU's
// -smbios file= takes.
func HostInterface(mac net.HardwareAddr, ip net.IP, port uint16, hostname string) []byte {
	dev := make([]byte, 17) // USB v2: type, length, VID, PID, iSerial, MAC, characteristics, handle
	dev[0], dev[1] = 0x04, byte(len(dev))
	binary.LittleEndian.PutUint16(dev[2:], 0x046b) // AMI's virtual NIC
	binary.LittleEndian.PutUint16(dev[4:], 0xffb0)
	copy(dev[7:13], mac)
	proto := make([]byte, 0x5b+len(hostname))
	for i := range 16 {
		proto[i] = byte(0x10 + i) // service UUID
	}
	proto[0x10], proto[0x11] = 0x01, 0x01 // host IP static, IPv4
	copy(proto[0x12:], net.IPv4(169, 254, 0, 2).To4())
	copy(proto[0x22:], net.IPv4(255, 255, 0, 0).To4())
	proto[0x32], proto[0x33] = 0x01, 0x01 // service IP static, IPv4
	copy(proto[0x34:], ip.To4())
	copy(proto[0x44:], net.IPv4(255, 255, 255, 0).To4())
	binary.LittleEndian.PutUint16(proto[0x54:], port)
	proto[0x5a] = byte(len(hostname))
	copy(proto[0x5b:], hostname)
	b := []byte{42, 0, 0x2a, 0x00, 0x40, byte(len(dev))}
	b = append(b, dev...)
	b = append(b, 1, 0x04, byte(len(proto)))
	b = append(b, proto...)
	b[1] = byte(len(b))
	return append(b, 0, 0) // no strings
}
