// Package hostaddr finds the address nodes reach this host at: the address
// of the interface facing them. That is the interface named by
// --pxe-interface when given, else the one the IPv4 default route leaves by
// (read from /proc/net/route; procRoot is the seam tests replace).
package hostaddr

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// rtfUp is RTF_UP of <linux/route.h>.
const rtfUp = 0x1

// DefaultRouteInterface returns the interface of the IPv4 default route
// with the lowest metric in procRoot/net/route.
func DefaultRouteInterface(procRoot string) (string, error) {
	path := filepath.Join(procRoot, "net", "route")
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("default route: %w", err)
	}
	defer f.Close()
	best, bestMetric := "", int64(-1)
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		fs := strings.Fields(sc.Text())
		if line == 1 || len(fs) < 8 {
			continue // header, or a line this reader does not know
		}
		flags, err1 := strconv.ParseUint(fs[3], 16, 32)
		metric, err2 := strconv.ParseInt(fs[6], 10, 64)
		if err1 != nil || err2 != nil {
			return "", fmt.Errorf("default route: %s:%d: unreadable line %q", path, line, sc.Text())
		}
		if fs[1] != "00000000" || fs[7] != "00000000" || flags&rtfUp == 0 {
			continue
		}
		if bestMetric < 0 || metric < bestMetric {
			best, bestMetric = fs[0], metric
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("default route: %s: %w", path, err)
	}
	if best == "" {
		return "", fmt.Errorf("default route: none in %s", path)
	}
	return best, nil
}

// Pick returns the interface's address nodes would use: the first global
// unicast IPv4 address, else the first global unicast IPv6 one.
func Pick(addrs []net.Addr) (net.IP, error) {
	var v6 net.IP
	for _, a := range addrs {
		var ip net.IP
		switch x := a.(type) {
		case *net.IPNet:
			ip = x.IP
		case *net.IPAddr:
			ip = x.IP
		}
		if ip == nil || !ip.IsGlobalUnicast() {
			continue
		}
		if ip4 := ip.To4(); ip4 != nil {
			return ip4, nil
		}
		if v6 == nil {
			v6 = ip
		}
	}
	if v6 != nil {
		return v6, nil
	}
	return nil, errors.New("no global unicast address")
}

// InterfaceAddrs is the real addrsOf: the addresses of the named interface.
func InterfaceAddrs(name string) ([]net.Addr, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, err
	}
	return ifi.Addrs()
}

// Advertise returns the address nodes reach this host at, and how it was
// chosen (for the log): iface's address when iface is set, else the
// address of the default route's interface. The error says what to pass
// instead.
func Advertise(procRoot, iface string, addrsOf func(string) ([]net.Addr, error)) (addr, why string, err error) {
	why = "the address of --pxe-interface " + iface
	if iface == "" {
		if iface, err = DefaultRouteInterface(procRoot); err != nil {
			return "", "", fmt.Errorf("cannot choose the address nodes reach this host at (%v): pass --advertise ADDRESS or --pxe-interface IFACE", err)
		}
		why = "the address of " + iface + ", the default route's interface (--pxe-interface or --advertise choose another)"
	}
	addrs, err := addrsOf(iface)
	if err != nil {
		return "", "", fmt.Errorf("interface %s: %w: pass --advertise ADDRESS or another --pxe-interface", iface, err)
	}
	ip, err := Pick(addrs)
	if err != nil {
		return "", "", fmt.Errorf("interface %s: %w: pass --advertise ADDRESS or another --pxe-interface", iface, err)
	}
	return ip.String(), why, nil
}
