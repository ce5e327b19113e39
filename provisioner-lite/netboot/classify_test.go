package netboot

import (
	"bytes"
	"errors"
	"net"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

var (
	testMAC  = net.HardwareAddr{0x52, 0x54, 0x00, 0xc0, 0xde, 0x01}
	testGUID = append([]byte{0}, bytes.Repeat([]byte{0xab}, 16)...)
	testBoot = Boot{Files: DefaultFiles(""), ScriptURL: "http://10.77.0.1:8080/boot.ipxe", HTTPBase: "http://10.77.0.1:8080/ipxe-bin"}
)

// Request shapes as the firmwares send them (vendor class strings from
// OVMF, a BIOS PXE ROM and iPXE captures).
func ovmfDiscover(t testing.TB, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	t.Helper()
	m, err := dhcpv4.NewDiscovery(testMAC, append([]dhcpv4.Modifier{
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00007:UNDI:003000")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.EFI_X86_64)),
		dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, testGUID),
	}, mods...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func biosDiscover(t testing.TB) *dhcpv4.DHCPv4 {
	t.Helper()
	m, err := dhcpv4.NewDiscovery(testMAC,
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.INTEL_X86PC)))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func ipxeDiscover(t testing.TB, arch iana.Arch, rfc3004 bool) *dhcpv4.DHCPv4 {
	t.Helper()
	m, err := dhcpv4.NewDiscovery(testMAC,
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00007:UNDI:003010")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(arch)),
		dhcpv4.WithUserClass("iPXE", rfc3004))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestClassifyAndAnswer(t *testing.T) {
	with175, err := dhcpv4.NewDiscovery(testMAC,
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.INTEL_X86PC)),
		dhcpv4.WithGeneric(dhcpv4.GenericOptionCode(175), []byte{0x13, 1, 1})) // iPXE's encapsulated options (bus id)
	if err != nil {
		t.Fatal(err)
	}
	noOpt93, err := dhcpv4.NewDiscovery(testMAC, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00009:UNDI:003000")))
	if err != nil {
		t.Fatal(err)
	}
	httpClient, err := dhcpv4.NewDiscovery(testMAC,
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("HTTPClient:Arch:00016:UNDI:003001")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.EFI_X86_64_HTTP)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		m         *dhcpv4.DHCPv4
		stage     Stage
		arch      iana.Arch
		file      string
		vendor    string
		discovery bool
		guid      bool
	}{
		{"OVMF x86-64 UEFI PXE", ovmfDiscover(t), StageFirmware, iana.EFI_X86_64, "snponly.efi", VendorPXE, false, true},
		{"arch 9 from the vendor class alone", noOpt93, StageFirmware, iana.EFI_BC, "snponly.efi", VendorPXE, false, false},
		{"BIOS PXE ROM", biosDiscover(t), StageFirmware, iana.INTEL_X86PC, "undionly.kpxe", VendorPXE, true, false},
		{"iPXE user class raw", ipxeDiscover(t, iana.EFI_X86_64, false), StageIPXE, iana.EFI_X86_64, testBoot.ScriptURL, VendorPXE, false, false},
		{"iPXE user class RFC 3004", ipxeDiscover(t, iana.INTEL_X86PC, true), StageIPXE, iana.INTEL_X86PC, testBoot.ScriptURL, VendorPXE, false, false},
		{"iPXE option 175 only", with175, StageIPXE, iana.INTEL_X86PC, testBoot.ScriptURL, VendorPXE, false, false},
		{"UEFI HTTP boot", httpClient, StageHTTPFirmware, iana.EFI_X86_64_HTTP, "http://10.77.0.1:8080/ipxe-bin/snponly.efi", VendorHTTP, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Classify(tc.m)
			if err != nil {
				t.Fatal(err)
			}
			if c.Stage != tc.stage || c.Arch != tc.arch || c.MAC != testMAC.String() {
				t.Errorf("client = %+v, want stage %v arch %d mac %s", c, tc.stage, tc.arch, testMAC)
			}
			if (c.GUID != nil) != tc.guid {
				t.Errorf("GUID = %x, want present %v", c.GUID, tc.guid)
			}
			a, err := testBoot.Answer(c)
			if err != nil {
				t.Fatal(err)
			}
			if a.File != tc.file || a.Vendor != tc.vendor || a.DiscoveryControl != tc.discovery {
				t.Errorf("answer = %+v, want file %q vendor %s discovery control %v", a, tc.file, tc.vendor, tc.discovery)
			}
		})
	}
}

func TestClassifyIgnoresOthers(t *testing.T) {
	plain, _ := dhcpv4.NewDiscovery(testMAC) // an OS's DHCP client: no vendor class
	linux, _ := dhcpv4.NewDiscovery(testMAC, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("udhcp 1.36.1")))
	reply, _ := dhcpv4.NewReplyFromRequest(ovmfDiscover(t))
	ib := ovmfDiscover(t)
	ib.HWType = iana.HWTypeInfiniband
	for name, m := range map[string]*dhcpv4.DHCPv4{"no vendor class": plain, "linux dhcp": linux, "a reply": reply, "infiniband": ib} {
		if _, err := Classify(m); !errors.Is(err, ErrNotBootClient) {
			t.Errorf("%s: err = %v, want ErrNotBootClient", name, err)
		}
	}
}

func TestUnsupportedArchRefused(t *testing.T) {
	arm, _ := dhcpv4.NewDiscovery(testMAC,
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00011:UNDI:003000")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.EFI_ARM64)))
	c, err := Classify(arm)
	if err != nil {
		t.Fatal(err)
	}
	_, err = testBoot.Answer(c)
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("arm64 answer err = %v, want ErrUnsupported", err)
	}
	for _, want := range []string{"11", "EFI ARM64", "0→undionly.kpxe"} {
		if !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("refusal %q does not name %q", err, want)
		}
	}
	noArch, _ := dhcpv4.NewDiscovery(testMAC, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient")))
	if _, err := Classify(noArch); !errors.Is(err, ErrUnsupported) {
		t.Errorf("PXEClient without any architecture: err = %v, want ErrUnsupported", err)
	}
	// A UEFI HTTP client when no HTTP base is configured.
	b := testBoot
	b.HTTPBase = ""
	if _, err := b.Answer(Client{Vendor: VendorHTTP, Arch: iana.EFI_X86_64_HTTP, Stage: StageHTTPFirmware}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("HTTP client without HTTPBase: err = %v, want ErrUnsupported", err)
	}
	// A PXE (TFTP) client that claims an HTTP architecture is not sent a TFTP file.
	if _, err := testBoot.Answer(Client{Vendor: VendorPXE, Arch: iana.EFI_X86_64_HTTP, Stage: StageFirmware}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("PXE client with HTTP arch: err = %v, want ErrUnsupported", err)
	}
}

func TestReplyCarriesNoAddress(t *testing.T) {
	req := ovmfDiscover(t)
	c, _ := Classify(req)
	a, _ := testBoot.Answer(c)
	server := net.IPv4(10, 77, 0, 1)
	r, err := Reply(req, c, a, server, dhcpv4.MessageTypeOffer)
	if err != nil {
		t.Fatal(err)
	}
	// Through the wire format, as the client reads it.
	got, err := dhcpv4.FromBytes(r.ToBytes())
	if err != nil {
		t.Fatal(err)
	}
	if !got.YourIPAddr.IsUnspecified() {
		t.Errorf("yiaddr = %v: a proxy must not hand out an address", got.YourIPAddr)
	}
	if got.MessageType() != dhcpv4.MessageTypeOffer || got.OpCode != dhcpv4.OpcodeBootReply || got.TransactionID != req.TransactionID {
		t.Errorf("reply type %v op %v xid %v, want OFFER BOOTREPLY %v", got.MessageType(), got.OpCode, got.TransactionID, req.TransactionID)
	}
	if !got.ServerIPAddr.Equal(server) || !got.ServerIdentifier().Equal(server) {
		t.Errorf("siaddr %v, option 54 %v, want %v", got.ServerIPAddr, got.ServerIdentifier(), server)
	}
	if got.ClassIdentifier() != "PXEClient" || got.BootFileName != "snponly.efi" || got.ServerHostName != "10.77.0.1" {
		t.Errorf("option 60 %q file %q sname %q", got.ClassIdentifier(), got.BootFileName, got.ServerHostName)
	}
	if g := got.GetOneOption(dhcpv4.OptionClientMachineIdentifier); !bytes.Equal(g, testGUID) {
		t.Errorf("option 97 = %x, want the client's %x", g, testGUID)
	}
	if got.Options.Has(dhcpv4.OptionVendorSpecificInformation) {
		t.Error("UEFI offer carries option 43: several UEFI firmwares ignore such proxy offers")
	}
	for _, o := range []dhcpv4.OptionCode{dhcpv4.OptionIPAddressLeaseTime, dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter} {
		if got.Options.Has(o) {
			t.Errorf("proxy reply carries %v: only the site's DHCP configures addresses", o)
		}
	}
	if !got.IsBroadcast() {
		t.Error("OFFER to a client without an address is not flagged broadcast")
	}

	// BIOS: option 43 says "boot the file, skip discovery".
	breq := biosDiscover(t)
	bc, _ := Classify(breq)
	ba, _ := testBoot.Answer(bc)
	br, err := Reply(breq, bc, ba, server, dhcpv4.MessageTypeAck)
	if err != nil {
		t.Fatal(err)
	}
	if o := br.GetOneOption(dhcpv4.OptionVendorSpecificInformation); !bytes.Equal(o, []byte{6, 1, 8, 255}) {
		t.Errorf("BIOS option 43 = %x, want 060108ff", o)
	}
	// An overlong URL does not fit the file field.
	if _, err := Reply(req, c, Answer{Vendor: VendorPXE, File: "http://" + string(bytes.Repeat([]byte("a"), 130))}, server, dhcpv4.MessageTypeOffer); err == nil {
		t.Error("a 137-byte boot file was accepted into the 128-byte field")
	}
}

func TestDefaultFilesEFIChoice(t *testing.T) {
	if f := DefaultFiles("ipxe.efi"); f[iana.EFI_X86_64] != "ipxe.efi" || f[iana.EFI_BC] != "ipxe.efi" || f[iana.INTEL_X86PC] != "undionly.kpxe" {
		t.Errorf("DefaultFiles(ipxe.efi) = %v", f)
	}
	if _, ok := DefaultFiles("")[iana.EFI_IA32]; ok {
		t.Error("32-bit UEFI mapped, but Debian ships no 32-bit iPXE build")
	}
}
