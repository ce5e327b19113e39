package hostaddr

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func procWithRoute(t *testing.T, route string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "net"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "net", "route"), []byte(route), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

const header = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"

func TestDefaultRouteInterface(t *testing.T) {
	// Two default routes: the lower metric wins; a route that is down and
	// the on-link /24 do not count.
	root := procWithRoute(t, header+
		"wlan0\t00000000\t0101A8C0\t0003\t0\t0\t600\t00000000\t0\t0\t0\n"+
		"eno1\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"+
		"bond0\t00000000\t010200C0\t0002\t0\t0\t0\t00000000\t0\t0\t0\n"+
		"eno1\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n")
	got, err := DefaultRouteInterface(root)
	if err != nil || got != "eno1" {
		t.Fatalf("got %q, %v; want eno1", got, err)
	}
	if _, err := DefaultRouteInterface(procWithRoute(t, header+"eno1\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n")); err == nil || !strings.Contains(err.Error(), "none") {
		t.Fatalf("no default route: %v", err)
	}
	if _, err := DefaultRouteInterface(procWithRoute(t, header+"eno1\t00000000\t0\tzz\t0\t0\tx\t00000000\n")); err == nil || !strings.Contains(err.Error(), "route:2: unreadable") {
		t.Fatalf("bad line: %v", err)
	}
}

func cidr(s string) net.Addr {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	n.IP = ip
	return n
}

func TestAdvertise(t *testing.T) {
	root := procWithRoute(t, header+"eno1\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n")
	addrs := map[string][]net.Addr{
		"eno1":  {cidr("fe80::1/64"), cidr("2001:db8::5/64"), cidr("192.0.2.10/24")},
		"prov0": {cidr("127.0.0.1/8"), cidr("fe80::2/64"), cidr("2001:db8:1::7/64")},
		"empty": {cidr("169.254.3.4/16")},
	}
	of := func(name string) ([]net.Addr, error) {
		a, ok := addrs[name]
		if !ok {
			return nil, errors.New("no such interface")
		}
		return a, nil
	}
	if a, why, err := Advertise(root, "", of); err != nil || a != "192.0.2.10" || !strings.Contains(why, "eno1, the default route's interface") {
		t.Fatalf("default route: %q %q %v", a, why, err)
	}
	if a, why, err := Advertise(root, "prov0", of); err != nil || a != "2001:db8:1::7" || !strings.Contains(why, "--pxe-interface prov0") {
		t.Fatalf("--pxe-interface: %q %q %v", a, why, err)
	}
	for _, iface := range []string{"empty", "nope"} {
		if _, _, err := Advertise(root, iface, of); err == nil || !strings.Contains(err.Error(), "pass --advertise") {
			t.Fatalf("%s: %v", iface, err)
		}
	}
	if _, _, err := Advertise(t.TempDir(), "", of); err == nil || !strings.Contains(err.Error(), "pass --advertise ADDRESS or --pxe-interface") {
		t.Fatalf("no route file: %v", err)
	}
}
