package main

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
	base := netbootFlags{ipxeDir: dir, ipxeEFI: "snponly.efi", netboot: "pxe", bootMode: "auto"}
	for name, tc := range map[string]struct {
		edit func(*netbootFlags)
		err  string
	}{
		"proxy without interface": {func(n *netbootFlags) { n.proxyDHCP = true }, "--pxe-interface"},
		"bad netboot":             {func(n *netbootFlags) { n.netboot = "ipxe" }, "--netboot"},
		"bad boot mode":           {func(n *netbootFlags) { n.bootMode = "bios" }, "--boot-mode"},
		"http in legacy":          {func(n *netbootFlags) { n.netboot, n.bootMode = "uefi-http", "legacy" }, "UEFI HTTP boot needs UEFI"},
		"bad efi build":           {func(n *netbootFlags) { n.ipxeEFI = "../x.efi" }, "--ipxe-efi"},
		"tftp off with proxy":     {func(n *netbootFlags) { n.proxyDHCP, n.pxeInterface, n.tftpListen = true, "lo", "off" }, "--tftp-listen off"},
		"no builds":               {func(n *netbootFlags) { n.tftpListen, n.ipxeDir = ":0", t.TempDir() }, "no iPXE build"},
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
	n.netboot = "uefi-http"
	p, err = n.prepare(log)
	if err != nil || p.target != redfish.BootUefiHttp || p.files == nil {
		t.Fatalf("uefi-http: %+v, %v", p, err)
	}
	if u := p.httpBootURI("http://10.77.0.1:8080/"); u != "http://10.77.0.1:8080/ipxe-bin/snponly.efi" {
		t.Errorf("HttpBootUri = %q", u)
	}
}
