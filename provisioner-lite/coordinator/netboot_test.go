package coordinator

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/provisioner-lite/redfish"
)

func TestNetbootFlags(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"undionly.kpxe", "snponly.efi"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.DiscardHandler)
	base := NetbootConfig{IPXEDir: dir, IPXEEFI: "snponly.efi", Mode: "pxe", BootMode: "auto"}
	for name, tc := range map[string]struct {
		edit func(*NetbootConfig)
		err  string
	}{
		"proxy without interface": {func(n *NetbootConfig) { n.ProxyDHCP = true }, "--pxe-interface"},
		"bad netboot":             {func(n *NetbootConfig) { n.Mode = "ipxe" }, "--netboot"},
		"bad boot mode":           {func(n *NetbootConfig) { n.BootMode = "bios" }, "--boot-mode"},
		"http in legacy":          {func(n *NetbootConfig) { n.Mode, n.BootMode = "uefi-http", "legacy" }, "UEFI HTTP boot needs UEFI"},
		"bad efi build":           {func(n *NetbootConfig) { n.IPXEEFI = "../x.efi" }, "--ipxe-efi"},
		"tftp off with proxy":     {func(n *NetbootConfig) { n.ProxyDHCP, n.pxeInterface, n.TFTPListen = true, "lo", "off" }, "--tftp-listen off"},
		"no builds":               {func(n *NetbootConfig) { n.TFTPListen, n.IPXEDir = ":0", t.TempDir() }, "no iPXE build"},
	} {
		n := base
		tc.edit(&n)
		if _, err := n.prepare(log); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: err = %v, want one naming %q", name, err, tc.err)
		}
	}
	// Site DHCP chaining to boot.ipxe: nothing loaded, PXE override, auto mode.
	p, err := base.prepare(log)
	if err != nil || p.files != nil || p.target != redfish.BootPxe || p.mode != redfish.BootModeAuto || p.builds() != nil {
		t.Errorf("plain: %+v, %v", p, err)
	}
	n := base
	n.Mode = "uefi-http"
	p, err = n.prepare(log)
	if err != nil || p.target != redfish.BootUefiHttp || p.files == nil {
		t.Fatalf("uefi-http: %+v, %v", p, err)
	}
	if u := p.httpBootURI("http://10.77.0.1:8080/"); u != "http://10.77.0.1:8080/ipxe-bin/snponly.efi" {
		t.Errorf("HttpBootUri = %q", u)
	}
}
