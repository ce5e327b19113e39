package netboot

import (
	"errors"
	"maps"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

// TestArm64ClientGetsArm64IPXE: with the site's arm64 iPXE build, a UEFI
// client saying option 93 = 0x0b (arm64) gets it, never the x86-64 build,
// and an arm64 HTTP boot client (0x13) gets its URL; then its iPXE asks
// for the per-MAC script with ?arch=arm64 (bootserver boots the arm64
// image). Without the build it is refused as before.
func TestArm64ClientGetsArm64IPXE(t *testing.T) {
	files := DefaultFiles("")
	maps.Copy(files, ARM64Files())
	b := Boot{Files: files, ScriptURL: testBoot.ScriptURL, HTTPBase: testBoot.HTTPBase}
	arm, _ := dhcpv4.NewDiscovery(testMAC, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00011:UNDI:003000")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.EFI_ARM64)))
	c, err := Classify(arm)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := b.Answer(c); err != nil || a.File != ARM64EFI || a.DiscoveryControl {
		t.Fatalf("arm64 PXE client: %+v, %v", a, err)
	}
	x86, _ := dhcpv4.NewDiscovery(testMAC, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00007:UNDI:003000")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.EFI_X86_64)))
	if c, _ := Classify(x86); func() string { a, _ := b.Answer(c); return a.File }() != "snponly.efi" {
		t.Error("an x86-64 client no longer gets snponly.efi beside the arm64 build")
	}
	httpArm, _ := dhcpv4.NewDiscovery(testMAC, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("HTTPClient:Arch:00019:UNDI:003000")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.EFI_ARM64_HTTP)))
	c, err = Classify(httpArm)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := b.Answer(c); err != nil || a.File != testBoot.HTTPBase+"/"+ARM64EFI || a.Vendor != VendorHTTP {
		t.Fatalf("arm64 HTTP boot client: %+v, %v", a, err)
	}
	if c, _ = Classify(arm); func() error { _, err := testBoot.Answer(c); return err }() == nil {
		t.Error("an arm64 client was answered without an arm64 iPXE build")
	} else if _, err := testBoot.Answer(c); !errors.Is(err, ErrUnsupported) {
		t.Errorf("without the build: %v, want ErrUnsupported", err)
	}
}
