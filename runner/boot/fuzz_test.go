package boot

import (
	"net"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// FuzzParseCmdline parses kernel command lines. /proc/cmdline carries what
// the iPXE script (plain HTTP on the provisioning network) said.
func FuzzParseCmdline(f *testing.F) {
	f.Add(`console=ttyS0 panic=-1 cure.coordinator=10.0.2.2:7443 cure.token=abc123 cure.node=node-1 cure.http=http://10.0.2.2:8080/ cure.debug=1 quiet note="a b"` + "\n")
	f.Add("BOOT_IMAGE=/vmlinuz root=UUID=1234 ro cure.token=\"x\" cure.debug=yes\x00")
	f.Add(`cure.token="unterminated cure.node=n1`)
	f.Add("cure.node=\xff\xfe cure.http=//// =value \"quoted key\"=v")
	f.Fuzz(func(t *testing.T, s string) {
		c := ParseCmdline(s)
		for k, v := range c.Params {
			if !utf8.ValidString(k) || !utf8.ValidString(v) || strings.Contains(v, `"`) {
				t.Fatalf("param %q = %q", k, v)
			}
			// Whitespace splits parameters unless quoted.
			if !strings.Contains(k, `"`) && strings.ContainsAny(k, " \t\r\n") {
				t.Fatalf("key %q holds unquoted whitespace", k)
			}
		}
		for name, v := range map[string]string{"cure.coordinator": c.Coordinator, "cure.token": c.Token, "cure.node": c.Node} {
			if p, ok := c.Params[name]; v != p || !ok && v != "" {
				t.Fatalf("%s = %q, params say %q", name, v, p)
			}
		}
		if strings.HasSuffix(c.HTTP, "/") || !strings.HasPrefix(c.Params["cure.http"], c.HTTP) {
			t.Fatalf("cure.http %q from %q", c.HTTP, c.Params["cure.http"])
		}
		if d := c.Params["cure.debug"]; c.Debug != (d == "1" || d == "true" || d == "yes") {
			t.Fatalf("debug %t from %q", c.Debug, d)
		}
		_ = c.Validate()

		// Re-encoding every parameter whose key needs no quoting, each value
		// quoted, parses back to the same values.
		var keys []string
		for k := range c.Params {
			if k != "" && !strings.ContainsAny(k, "\" \t\r\n") {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		var b strings.Builder
		for _, k := range keys {
			b.WriteString(k + `="` + c.Params[k] + `" `)
		}
		again := ParseCmdline(b.String())
		for _, k := range keys {
			if again.Params[k] != c.Params[k] {
				t.Fatalf("%q: %q re-encoded as %q parses to %q", k, c.Params[k], b.String(), again.Params[k])
			}
		}
		// With balanced quotes, a parameter appended last is read as given
		// (the kernel's "last one wins").
		if strings.Count(s, `"`)%2 == 0 {
			if got := ParseCmdline(s + " cure.token=zz9").Token; got != "zz9" {
				t.Fatalf("appended token read as %q", got)
			}
		}
	})
}

// FuzzLeaseFromACK decodes a DHCPv4 reply as any host on the provisioning
// network may send it and turns it into the lease the runner logs.
func FuzzLeaseFromACK(f *testing.F) {
	ack, err := dhcpv4.New(
		dhcpv4.WithMessageType(dhcpv4.MessageTypeAck),
		dhcpv4.WithYourIP(net.IPv4(10, 0, 2, 15)),
		dhcpv4.WithNetmask(net.CIDRMask(24, 32)),
		dhcpv4.WithRouter(net.IPv4(10, 0, 2, 2)),
		dhcpv4.WithServerIP(net.IPv4(10, 0, 2, 2)),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 0, 2, 2))),
		dhcpv4.WithOption(dhcpv4.OptBootFileName("http://10.0.2.2:8080/boot.ipxe")),
	)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ack.ToBytes())
	bad := ack.ToBytes()
	f.Add(append(bad[:len(bad)-1:len(bad)-1], 1, 200)) // an option running past the end
	f.Add(make([]byte, 240))
	mac := net.HardwareAddr{0x52, 0x54, 0, 0x12, 0x34, 0x56}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		m, err := dhcpv4.FromBytes(pkt)
		if err != nil {
			return
		}
		l := leaseFromACK("eth0", mac, m)
		if !l.IP.Equal(m.YourIPAddr) || l.MAC != mac.String() || l.Iface != "eth0" {
			t.Fatalf("lease %+v from %s", l, m.Summary())
		}
		if r := m.Router(); len(r) > 0 && !l.Gateway.Equal(r[0]) {
			t.Fatalf("gateway %v, routers %v", l.Gateway, r)
		}
		if !strings.HasPrefix(l.String(), "eth0 ") {
			t.Fatalf("lease string %q", l.String())
		}
	})
}
