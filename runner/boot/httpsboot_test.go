package boot

import (
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/tools/uefi"
)

// writeVar writes an efivarfs file: 4 attribute bytes, then the data.
func writeVar(t *testing.T, dir, name string, data []byte) {
	t.Helper()
	b := append([]byte{7, 0, 0, 0}, data...)
	if err := os.WriteFile(filepath.Join(dir, name+globalVar), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The boot option OVMF booted (as the virtual BMC writes it, and as EDK2's
// HTTP boot setup makes it) yields the URI, the NIC and the Secure Boot state.
func TestReadHTTPSBoot(t *testing.T) {
	dir := t.TempDir()
	mac, _ := net.ParseMAC("52:54:00:c0:de:01")
	dp := uefi.DevicePath(nil).PciRoot(0).Pci(1, 0).MAC(mac).IPv4DHCP().URI("https://10.0.2.2:8443/image/cure.efi")
	writeVar(t, dir, "Boot0100", uefi.LoadOption("CURE HTTPS boot", dp))
	cur := make([]byte, 2)
	binary.LittleEndian.PutUint16(cur, 0x100)
	writeVar(t, dir, "BootCurrent", cur)
	writeVar(t, dir, "SecureBoot", []byte{1})
	hb, err := ReadHTTPSBoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	if hb.Option != "Boot0100" || hb.URI != "https://10.0.2.2:8443/image/cure.efi" || hb.MAC.String() != "52:54:00:c0:de:01" || !hb.SecureBoot {
		t.Errorf("got %+v", hb)
	}
	if base, err := hb.BaseURL(); err != nil || base != "https://10.0.2.2:8443" {
		t.Errorf("BaseURL = %q, %v", base, err)
	}

	// A disk boot option has no URI: the image did not come over HTTPS.
	writeVar(t, dir, "Boot0100", uefi.LoadOption("disk", uefi.DevicePath(nil).PciRoot(0).Pci(3, 0)))
	if _, err := ReadHTTPSBoot(dir); err == nil || !strings.Contains(err.Error(), "not a URI boot option") {
		t.Errorf("disk option: err = %v", err)
	}
	// Plain http is refused as a boot server.
	if _, err := (HTTPSBoot{Option: "Boot0001", URI: "http://x/"}).BaseURL(); err == nil {
		t.Error("http:// accepted")
	}
}

func TestCmdlineHTTPSBoot(t *testing.T) {
	c := ParseCmdline("console=ttyS0 cure.boot=https")
	if !c.HTTPSBoot() || c.Validate() != nil {
		t.Errorf("signed image's command line: HTTPSBoot=%v Validate=%v", c.HTTPSBoot(), c.Validate())
	}
	if err := ParseCmdline("cure.boot=tftp").Validate(); err == nil {
		t.Error("cure.boot=tftp accepted")
	}
}
