package inventory

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/vishvananda/netlink"
)

// Link is a network interface as netlink reports it.
type Link struct {
	Name  string
	MAC   string
	Up    bool // carrier: operationally up
	Addrs []string
}

// NetlinkLinks lists interfaces (loopback excluded) with their addresses.
func NetlinkLinks() ([]Link, error) {
	ls, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("netlink: listing links: %w", err)
	}
	var out []Link
	for _, l := range ls {
		a := l.Attrs()
		if a.Flags&net.FlagLoopback != 0 {
			continue
		}
		link := Link{Name: a.Name, MAC: a.HardwareAddr.String(), Up: a.OperState == netlink.OperUp}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("netlink: addresses of %s: %w", a.Name, err)
		}
		for _, ad := range addrs {
			link.Addrs = append(link.Addrs, ad.IPNet.String())
		}
		out = append(out, link)
	}
	return out, nil
}

// nics joins netlink links with sysfs facts (driver, PCI address, speed).
// Virtual links without a device/ directory are left out.
func nics(o *Options) ([]*curev1.NetInterface, error) {
	links, err := o.Links()
	if err != nil {
		return nil, err
	}
	var out []*curev1.NetInterface
	for _, l := range links {
		dev := o.path("sys/class/net", l.Name, "device")
		if _, err := os.Stat(dev); err != nil {
			continue // bridges, tunnels: not hardware
		}
		n := &curev1.NetInterface{Name: l.Name, Mac: strings.ToLower(l.MAC), LinkUp: l.Up, Addresses: l.Addrs}
		if t, err := os.Readlink(filepath.Join(dev, "driver")); err == nil {
			n.Driver = filepath.Base(t)
		}
		if t, err := filepath.EvalSymlinks(dev); err == nil {
			n.PciAddress = pciAncestor(t)
		}
		// speed reads -1 or EINVAL without carrier.
		if s, err := readTrim(o.path("sys/class/net", l.Name, "speed")); err == nil {
			if v, err := strconv.Atoi(s); err == nil && v > 0 {
				n.SpeedMbps = uint32(v)
			}
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// pciAncestor is the PCI function a device path is, or sits under: a
// virtio NIC's device is virtio0, a child of its PCI function
// (.../0000:00:02.0/virtio0); a ConnectX port's is the function itself.
func pciAncestor(p string) string {
	for ; p != "/" && p != "." && p != ""; p = filepath.Dir(p) {
		if isPCIAddress(filepath.Base(p)) {
			return filepath.Base(p)
		}
	}
	return ""
}

// isPCIAddress matches 0000:00:03.0.
func isPCIAddress(s string) bool {
	var d, b, dev, fn int
	n, err := fmt.Sscanf(s, "%04x:%02x:%02x.%x", &d, &b, &dev, &fn)
	return err == nil && n == 4 && len(s) == 12
}

// LinksUp sets every hardware NIC port under root's sys/class/net (one with
// a device/ link) that is administratively down up, without an address,
// and waits up to wait for carrier on the ports it raised: a port reports
// its negotiated speed only with a link. It returns how many it raised.
// Ports already up are left alone (the boot port keeps its lease).
func LinksUp(ctx context.Context, root string, wait time.Duration) (int, error) {
	dir := filepath.Join(root, "sys/class/net")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("listing %s: %w", dir, err)
	}
	var raised []string
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if _, err := os.Stat(filepath.Join(dir, name, "device")); err != nil {
			continue // virtual
		}
		l, err := netlink.LinkByName(name)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		if l.Attrs().Flags&net.FlagUp != 0 {
			continue
		}
		if err := netlink.LinkSetUp(l); err != nil {
			errs = append(errs, fmt.Errorf("%s: link up: %w", name, err))
			continue
		}
		raised = append(raised, name)
	}
	deadline := time.Now().Add(wait)
	for _, name := range raised {
		for {
			if c, err := readTrim(filepath.Join(dir, name, "carrier")); err == nil && c == "1" {
				break
			}
			if time.Now().After(deadline) {
				break // reported as link down by the check
			}
			select {
			case <-ctx.Done():
				return len(raised), ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return len(raised), errors.Join(errs...)
}
