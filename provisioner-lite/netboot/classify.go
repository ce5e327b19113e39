// Package netboot answers a node's network boot before any HTTP: a proxy
// DHCP server (UDP 67 and 4011) that tells PXE firmware which iPXE build to
// fetch and tells iPXE where the boot script is, and a read-only TFTP server
// for the iPXE builds. The site's own DHCP server keeps handing out the
// addresses; a proxy reply never carries one (no yiaddr, no lease).
//
// The chain: NIC firmware (PXE, option 60 "PXEClient") → TFTP iPXE build
// chosen by client architecture (option 93) → iPXE (user class "iPXE" or
// option 175) → HTTP boot.ipxe → per-MAC script. UEFI HTTP boot clients
// (option 60 "HTTPClient") get the iPXE build's HTTP URL instead of TFTP.
//
// Classify and Answer decide (pure, fuzzed); ProxyDHCP and TFTP only speak
// the protocols.
package netboot

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

// Stage is where a booting client is in the chain.
type Stage int

const (
	// StageFirmware is the NIC's PXE firmware: it gets an iPXE build over TFTP.
	StageFirmware Stage = iota
	// StageHTTPFirmware is UEFI HTTP boot: it gets the iPXE build's HTTP URL.
	StageHTTPFirmware
	// StageIPXE is iPXE itself: it gets the boot script's HTTP URL, never a
	// binary again (that would loop).
	StageIPXE
)

func (s Stage) String() string {
	switch s {
	case StageFirmware:
		return "pxe-firmware"
	case StageHTTPFirmware:
		return "uefi-http-firmware"
	case StageIPXE:
		return "ipxe"
	}
	return "stage(" + strconv.Itoa(int(s)) + ")"
}

// Vendor class identifiers (option 60) of network boot clients, and the
// value a proxy reply carries back.
const (
	VendorPXE  = "PXEClient"
	VendorHTTP = "HTTPClient"
)

// Errors of Classify and Answer.
var (
	// ErrNotBootClient: not a PXE or UEFI HTTP boot request (an OS's DHCP,
	// a reply, a relay's noise). The proxy stays silent.
	ErrNotBootClient = errors.New("not a network boot client")
	// ErrUnsupported: a boot client the proxy cannot serve (an architecture
	// with no iPXE build configured). The proxy stays silent and logs why,
	// so firmware falls through to its next boot option.
	ErrUnsupported = errors.New("unsupported boot client")
)

// Client is what a boot request says about its sender.
type Client struct {
	MAC    string    // chaddr, lowercase colon-separated
	Vendor string    // VendorPXE or VendorHTTP (the prefix of option 60)
	Arch   iana.Arch // option 93 (first), or the Arch field of option 60
	Stage  Stage
	// GUID is option 97 (client machine identifier), echoed in replies as
	// the PXE specification asks.
	GUID []byte
}

// Classify reads a DHCP request as a network boot client. Only what a
// client may send is read, and nothing in it is trusted beyond choosing
// which public file or URL to name.
func Classify(m *dhcpv4.DHCPv4) (Client, error) {
	if m.OpCode != dhcpv4.OpcodeBootRequest {
		return Client{}, fmt.Errorf("%w: op %v is not a BOOTREQUEST", ErrNotBootClient, m.OpCode)
	}
	if m.HWType != iana.HWTypeEthernet || len(m.ClientHWAddr) != 6 {
		return Client{}, fmt.Errorf("%w: hardware type %v, address length %d: want Ethernet, 6", ErrNotBootClient, m.HWType, len(m.ClientHWAddr))
	}
	c := Client{MAC: m.ClientHWAddr.String()}
	vci := m.ClassIdentifier()
	switch {
	case strings.HasPrefix(vci, VendorPXE):
		c.Vendor = VendorPXE
	case strings.HasPrefix(vci, VendorHTTP):
		c.Vendor = VendorHTTP
	default:
		return Client{}, fmt.Errorf("%w: vendor class %q", ErrNotBootClient, printable(vci))
	}
	arch, ok := clientArch(m, vci)
	if !ok {
		return Client{}, fmt.Errorf("%w: %s from %s names no client architecture (option 93 or %s:Arch:NNNNN)", ErrUnsupported, c.Vendor, c.MAC, c.Vendor)
	}
	c.Arch = arch
	switch {
	case isIPXE(m):
		c.Stage = StageIPXE
	case c.Vendor == VendorHTTP:
		c.Stage = StageHTTPFirmware
	default:
		c.Stage = StageFirmware
	}
	if g := m.GetOneOption(dhcpv4.OptionClientMachineIdentifier); len(g) > 0 && len(g) <= 17 {
		c.GUID = bytes.Clone(g)
	}
	return c, nil
}

// clientArch is option 93's first entry, else the Arch field of the vendor
// class ("PXEClient:Arch:00007:UNDI:003016").
func clientArch(m *dhcpv4.DHCPv4, vci string) (iana.Arch, bool) {
	if a := m.ClientArch(); len(a) > 0 {
		return a[0], true
	}
	parts := strings.Split(vci, ":")
	for i := 0; i+1 < len(parts); i++ {
		if parts[i] == "Arch" {
			n, err := strconv.ParseUint(parts[i+1], 10, 16)
			if err != nil {
				return 0, false
			}
			return iana.Arch(n), true
		}
	}
	return 0, false
}

// isIPXE: iPXE sends user class "iPXE" (option 77, raw, not RFC 3004
// length-prefixed) and its own encapsulated options (175).
func isIPXE(m *dhcpv4.DHCPv4) bool {
	if m.Options.Has(dhcpv4.GenericOptionCode(175)) {
		return true
	}
	raw := m.GetOneOption(dhcpv4.OptionUserClassInformation)
	if string(raw) == "iPXE" {
		return true
	}
	for _, uc := range m.UserClass() {
		if uc == "iPXE" {
			return true
		}
	}
	return false
}

// Boot is what the proxy hands out.
type Boot struct {
	// Files maps client architectures to the iPXE build (a file name the
	// TFTP server serves). Architectures not in it are refused.
	Files map[iana.Arch]string
	// ScriptURL is where iPXE fetches its script, e.g.
	// http://10.0.0.1:8080/boot.ipxe.
	ScriptURL string
	// HTTPBase is where UEFI HTTP boot clients fetch the iPXE builds
	// (HTTPBase + "/" + file); empty: HTTP boot clients are refused.
	HTTPBase string
}

// DefaultFiles is the architecture → iPXE build map for Debian's ipxe
// package. x86-64 UEFI gets snponly.efi: it drives only the NIC the
// firmware booted from, through the firmware's own UEFI driver (SNP), so
// it works on whatever NIC the server's firmware can PXE from (ConnectX,
// BlueField, E810: iPXE's native drivers in Debian's 2019 build cover few of
// them) and never wanders to another port; it is also a fifth of
// ipxe.efi's size over TFTP. --ipxe-efi ipxe.efi picks the build with
// native drivers instead.
func DefaultFiles(efi string) map[iana.Arch]string {
	if efi == "" {
		efi = "snponly.efi"
	}
	return map[iana.Arch]string{
		iana.INTEL_X86PC: "undionly.kpxe",
		// RFC 4578 named 7 "EFI BC" and 9 "EFI x86-64"; IANA's registry and
		// every x86-64 UEFI firmware in the field send 7. Both are x86-64.
		iana.EFI_X86_64:      efi,
		iana.EFI_BC:          efi,
		iana.EFI_X86_64_HTTP: efi,
	}
}

// ARM64EFI is the arm64 iPXE build's name in --ipxe-dir. Debian ships no
// arm64 iPXE, so a site with Arm nodes supplies one (iPXE's
// bin-arm64-efi/snponly.efi); without it arm64 UEFI clients are refused,
// logged (docs/ARM.md).
const ARM64EFI = "snponly-arm64.efi"

// ARM64Files maps the arm64 UEFI client architectures (option 93 = 0x0b,
// HTTP boot 0x13) to ARM64EFI, to add to DefaultFiles where it exists.
func ARM64Files() map[iana.Arch]string {
	return map[iana.Arch]string{iana.EFI_ARM64: ARM64EFI, iana.EFI_ARM64_HTTP: ARM64EFI}
}

// Answer is the proxy's reply, decided.
type Answer struct {
	Vendor string // option 60 of the reply: VendorPXE or VendorHTTP
	File   string // boot file: a TFTP file name or an http URL
	// DiscoveryControl adds PXE option 43 with "boot the file, skip boot
	// server discovery"; BIOS PXE ROMs want it, several UEFI firmwares
	// ignore a proxy offer that carries it.
	DiscoveryControl bool
}

// Answer decides what client c gets, or why it gets nothing.
func (b Boot) Answer(c Client) (Answer, error) {
	switch c.Stage {
	case StageIPXE:
		if b.ScriptURL == "" {
			return Answer{}, fmt.Errorf("%w: no boot script URL configured", ErrUnsupported)
		}
		// Any arch: iPXE speaks HTTP itself.
		return Answer{Vendor: VendorPXE, File: b.ScriptURL}, nil
	case StageHTTPFirmware:
		f, ok := b.Files[c.Arch]
		if !ok || !httpArch(c.Arch) {
			return Answer{}, fmt.Errorf("%w: UEFI HTTP boot client architecture %d (%s): no iPXE build for it", ErrUnsupported, uint16(c.Arch), c.Arch)
		}
		if b.HTTPBase == "" {
			return Answer{}, fmt.Errorf("%w: UEFI HTTP boot client: no HTTP base URL for iPXE builds configured", ErrUnsupported)
		}
		return Answer{Vendor: VendorHTTP, File: strings.TrimRight(b.HTTPBase, "/") + "/" + f}, nil
	case StageFirmware:
		f, ok := b.Files[c.Arch]
		if !ok || httpArch(c.Arch) {
			return Answer{}, fmt.Errorf("%w: PXE client architecture %d (%s): no iPXE build for it (have %s)", ErrUnsupported, uint16(c.Arch), c.Arch, b.archList())
		}
		return Answer{Vendor: VendorPXE, File: f, DiscoveryControl: c.Arch == iana.INTEL_X86PC}, nil
	}
	return Answer{}, fmt.Errorf("%w: stage %v", ErrUnsupported, c.Stage)
}

func httpArch(a iana.Arch) bool {
	switch a {
	case iana.EFI_X86_HTTP, iana.EFI_X86_64_HTTP, iana.EFI_BC_HTTP, iana.EFI_ARM32_HTTP, iana.EFI_ARM64_HTTP,
		iana.INTEL_X86PC_HTTP, iana.UBOOT_ARM32_HTTP, iana.UBOOT_ARM64_HTTP, iana.EFI_RISCV32_HTTP,
		iana.EFI_RISCV64_HTTP, iana.EFI_RISCV128_HTTP:
		return true
	}
	return false
}

func (b Boot) archList() string {
	var s []string
	for _, a := range []iana.Arch{iana.INTEL_X86PC, iana.EFI_IA32, iana.EFI_X86_64, iana.EFI_BC, iana.EFI_ARM32, iana.EFI_ARM64} {
		if f, ok := b.Files[a]; ok {
			s = append(s, fmt.Sprintf("%d→%s", uint16(a), f))
		}
	}
	return strings.Join(s, ", ")
}

// Reply builds the proxy's DHCP reply (OFFER on port 67, ACK on 4011) for
// req: no address (yiaddr 0), next-server serverIP, the boot file, option
// 60 so the client knows it is a PXE (or HTTP boot) answer, option 54, and
// the client's GUID (option 97) echoed.
func Reply(req *dhcpv4.DHCPv4, c Client, a Answer, serverIP net.IP, mt dhcpv4.MessageType) (*dhcpv4.DHCPv4, error) {
	ip := serverIP.To4()
	if ip == nil {
		return nil, fmt.Errorf("server IP %v is not IPv4", serverIP)
	}
	if len(a.File) > 127 {
		// The BOOTP file field is 128 bytes with its NUL.
		return nil, fmt.Errorf("boot file %q is longer than the 127 bytes the DHCP file field holds", a.File)
	}
	mods := []dhcpv4.Modifier{
		dhcpv4.WithMessageType(mt),
		dhcpv4.WithServerIP(ip),
		dhcpv4.WithYourIP(net.IPv4zero),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(ip)),
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier(a.Vendor)),
	}
	if len(c.GUID) > 0 {
		mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, c.GUID))
	}
	if a.DiscoveryControl {
		// PXE vendor options: tag 6 PXE_DISCOVERY_CONTROL = 8 (use the
		// boot file name, skip boot server discovery), then End.
		mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionVendorSpecificInformation, []byte{6, 1, 8, 255}))
	}
	r, err := dhcpv4.NewReplyFromRequest(req, mods...)
	if err != nil {
		return nil, err
	}
	r.BootFileName = a.File
	if a.Vendor == VendorPXE && !strings.Contains(a.File, "://") {
		r.ServerHostName = ip.String()
	}
	if mt == dhcpv4.MessageTypeOffer && req.GatewayIPAddr.IsUnspecified() {
		// The client has no address yet: the answer is broadcast.
		r.SetBroadcast()
	}
	return r, nil
}

// printable bounds a peer's string for logs: printable ASCII, 64 bytes.
func printable(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}
