package netboot

import (
	"net"
	"strconv"
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

// FuzzTFTPPacket feeds any bytes a peer can send to the TFTP ports through
// the parsers and the answer they lead to: no panic; a parsed request's
// blksize is 0 or within RFC 2348's range; the answer's block size never
// exceeds the cap; its OACK names only the options asked for, with the
// granted values; the DATA blocks cover the file exactly.
func FuzzTFTPPacket(f *testing.F) {
	for _, b := range [][]byte{
		rrq("snponly.efi", "tsize", "0", "blksize", "1468"), rrq("undionly.kpxe"), rrq("x", "BLKSIZE", "7", "blksize", "9000", "timeout", "1"),
		{0, 2, 'a', 0, 'o', 'c', 't', 'e', 't', 0}, {0, 4, 0, 1}, {0, 5, 0, 8, 0}, {0, 1, 0, 0}, {},
	} {
		f.Add(b, uint16(1468), uint32(173792))
	}
	f.Fuzz(func(t *testing.T, b []byte, maxBlk uint16, size uint32) {
		if p, err := parseTFTPClientPacket(b); err == nil && p.op != opACK && p.op != opERROR {
			t.Fatalf("client packet of opcode %d accepted", p.op)
		}
		r, err := parseTFTPRequest(b)
		if err != nil {
			return
		}
		if r.blksize != 0 && (r.blksize < minBlockSize || r.blksize > maxBlockSize) {
			t.Fatalf("blksize %d accepted", r.blksize)
		}
		lim := TFTPLimits{BlockSize: int(maxBlk)}
		lim.defaults()
		n := int(size % (1 << 20))
		plan := planTFTPRead(r, n, lim.BlockSize)
		if plan.blksize > lim.BlockSize || plan.blksize < minBlockSize {
			t.Fatalf("block size %d granted with cap %d", plan.blksize, lim.BlockSize)
		}
		if (plan.oack != nil) != (r.blksize > 0 || r.tsize) {
			t.Fatalf("OACK %q for blksize %d tsize %v", plan.oack, r.blksize, r.tsize)
		}
		if plan.oack != nil {
			fields := strings.Split(strings.TrimSuffix(string(plan.oack[2:]), "\x00"), "\x00")
			for i := 0; i+1 < len(fields); i += 2 {
				switch fields[i] {
				case "blksize":
					if fields[i+1] != strconv.Itoa(plan.blksize) {
						t.Fatalf("OACK blksize %s, granted %d", fields[i+1], plan.blksize)
					}
				case "tsize":
					if fields[i+1] != strconv.Itoa(n) {
						t.Fatalf("OACK tsize %s, size %d", fields[i+1], n)
					}
				default:
					t.Fatalf("OACK names %q", fields[i])
				}
			}
		}
		if plan.blksize >= 512 { // smaller blocks: too many to walk here
			data := make([]byte, n)
			var total int
			blocks := tftpBlocks(n, plan.blksize)
			for i := 1; i <= blocks; i++ {
				p := tftpData(nil, data, i, plan.blksize)
				if l := len(p) - 4; l > plan.blksize || i < blocks && l != plan.blksize || i == blocks && l == plan.blksize {
					t.Fatalf("block %d of %d: %d bytes, blksize %d", i, blocks, l, plan.blksize)
				}
				total += len(p) - 4
			}
			if total != n {
				t.Fatalf("blocks carry %d bytes, file %d", total, n)
			}
		}
	})
}
