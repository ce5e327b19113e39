package inventory

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/cure-oss/cure/runner/inventory/invtest"
)

// A Redfish Host Interface record yields the BMC's address, port, name and
// the host interface NIC's MAC; a machine without one reports none.
func TestHostInterfaces(t *testing.T) {
	root := t.TempDir()
	if his, err := HostInterfaces(root); err != nil || len(his) != 0 {
		t.Fatalf("no type 42: %v, %v", his, err)
	}
	mac, _ := net.ParseMAC("02:00:5e:10:00:01")
	raw := invtest.HostInterface(mac, net.IPv4(169, 254, 0, 17), 8443, "bmc-r12")
	invtest.Write(t, root, "sys/firmware/dmi/entries/42-0/raw", string(raw))
	his, err := HostInterfaces(root)
	if err != nil || len(his) != 1 {
		t.Fatalf("HostInterfaces = %v, %v", his, err)
	}
	h := his[0]
	if h.GetInterfaceType() != 0x40 || h.GetBmcIp() != "169.254.0.17" || h.GetBmcPort() != 8443 || h.GetBmcHostname() != "bmc-r12" ||
		h.GetBmcMac() != "02:00:5e:10:00:01" || h.GetHostIp() != "169.254.0.2" || h.GetBmcNetmask() != "255.255.255.0" ||
		h.GetIpDiscovery() != "static" || h.GetDevice() != "usb 046b:ffb0" || h.GetServiceUuid() != "13121110-1514-1716-1819-1a1b1c1d1e1f" {
		t.Fatalf("host interface %v", h)
	}
	// Truncated protocol data: refused, not read past.
	short := append([]byte(nil), raw[:40]...)
	short[1] = 40
	if _, err := ParseHostInterface(short); err == nil {
		t.Fatal("a protocol record past the structure was accepted")
	}
	if _, err := ParseHostInterface([]byte{1, 4, 0, 0}); err == nil {
		t.Fatal("type 1 taken for type 42")
	}
}

// FuzzHostInterface: whatever bytes the firmware wrote, parsing neither
// panics nor reads past them, and yields text a report can carry.
func FuzzHostInterface(f *testing.F) {
	mac, _ := net.ParseMAC("02:00:5e:10:00:01")
	raw := invtest.HostInterface(mac, net.IPv4(10, 0, 0, 1), 443, "bmc")
	f.Add(raw)
	f.Add(raw[:len(raw)/2])
	f.Add([]byte{42, 6, 0, 0, 0x40, 0})
	f.Add([]byte{42, 8, 0, 0, 0x40, 0, 1, 4})
	f.Add(bytes.Repeat([]byte{42}, 300))
	f.Fuzz(func(t *testing.T, b []byte) {
		his, err := ParseHostInterface(b)
		if err != nil {
			return
		}
		for _, h := range his {
			for _, s := range []string{h.GetDevice(), h.GetServiceUuid(), h.GetHostIp(), h.GetBmcIp(), h.GetBmcNetmask(), h.GetBmcHostname(), h.GetBmcMac()} {
				if !utf8.ValidString(s) {
					t.Fatalf("invalid UTF-8 %q", s)
				}
			}
		}
		root := t.TempDir()
		p := filepath.Join(root, "sys/firmware/dmi/entries/42-0")
		os.MkdirAll(p, 0o755)
		os.WriteFile(filepath.Join(p, "raw"), b, 0o644)
		if _, err := HostInterfaces(root); err != nil {
			t.Fatalf("HostInterfaces refused what ParseHostInterface took: %v", err)
		}
	})
}
