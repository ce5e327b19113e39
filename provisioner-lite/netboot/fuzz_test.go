package netboot

import (
	"net"
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

// FuzzProxyRequest feeds any bytes a peer can send to port 67 or 4011
// through what the proxy does with them: parse (the library), classify,
// decide, build the reply. Whatever comes in, a reply never carries an
// address, always answers the request's transaction, and names only a
// configured build or URL.
func FuzzProxyRequest(f *testing.F) {
	for _, m := range []*dhcpv4.DHCPv4{ovmfDiscover(f), biosDiscover(f), ipxeDiscover(f, iana.EFI_X86_64, false), ipxeDiscover(f, iana.INTEL_X86PC, true)} {
		f.Add(m.ToBytes())
	}
	http, _ := dhcpv4.NewDiscovery(testMAC, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("HTTPClient:Arch:00016")))
	f.Add(http.ToBytes())
	f.Add([]byte{})
	allowed := map[string]bool{testBoot.ScriptURL: true}
	for _, file := range testBoot.Files {
		allowed[file] = true
		allowed[testBoot.HTTPBase+"/"+file] = true
	}
	server := net.IPv4(10, 77, 0, 1)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := dhcpv4.FromBytes(b)
		if err != nil {
			return
		}
		c, err := Classify(m)
		if err != nil {
			return
		}
		if !strings.HasPrefix(m.ClassIdentifier(), c.Vendor) {
			t.Fatalf("vendor %q from option 60 %q", c.Vendor, m.ClassIdentifier())
		}
		a, err := testBoot.Answer(c)
		if err != nil {
			return
		}
		if !allowed[a.File] {
			t.Fatalf("answer names %q, not a configured build or URL", a.File)
		}
		for _, mt := range []dhcpv4.MessageType{dhcpv4.MessageTypeOffer, dhcpv4.MessageTypeAck} {
			r, err := Reply(m, c, a, server, mt)
			if err != nil {
				t.Fatal(err)
			}
			got, err := dhcpv4.FromBytes(r.ToBytes())
			if err != nil {
				t.Fatalf("reply does not parse: %v", err)
			}
			if !got.YourIPAddr.IsUnspecified() || got.TransactionID != m.TransactionID || got.BootFileName != a.File ||
				got.OpCode != dhcpv4.OpcodeBootReply || !got.ServerIdentifier().Equal(server) || got.MessageType() != mt {
				t.Fatalf("reply yiaddr %v xid %v/%v file %q op %v sid %v type %v", got.YourIPAddr, got.TransactionID, m.TransactionID,
					got.BootFileName, got.OpCode, got.ServerIdentifier(), got.MessageType())
			}
		}
	})
}

// FuzzTFTPName: whatever name a TFTP client asks for, only a loaded build
// is found, under its own name.
func FuzzTFTPName(f *testing.F) {
	files := &Files{m: map[string][]byte{"snponly.efi": {1}, "undionly.kpxe": {2}}}
	for _, s := range []string{"snponly.efi", "/undionly.kpxe", "../etc/passwd", "//snponly.efi", "snponly.efi/../undionly.kpxe", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, req string) {
		name, b, ok := files.Lookup(req)
		if !ok {
			return
		}
		if req != name && req != "/"+name {
			t.Fatalf("request %q resolved to %q", req, name)
		}
		if want := files.m[name]; len(want) != len(b) || &want[0] != &b[0] {
			t.Fatalf("request %q: content is not the build's", req)
		}
	})
}
