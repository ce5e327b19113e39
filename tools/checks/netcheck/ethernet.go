// Package netcheck judges network ports from sysfs: Ethernet link speed and
// operational state (/sys/class/net), and InfiniBand port state, physical
// state, rate and error-counter deltas (/sys/class/infiniband).
package netcheck

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/cure-oss/cure/tools/checks"
)

// arphrdEther is ARPHRD_ETHER (include/uapi/linux/if_arp.h), the "type" of
// Ethernet interfaces; IPoIB is ARPHRD_INFINIBAND (32) and judged by the
// InfiniBand check instead.
const arphrdEther = 1

// EthernetOptions configure the Ethernet check.
type EthernetOptions struct {
	SysRoot string
	// Operstate is the expected /sys/class/net/<if>/operstate ("up" when empty).
	Operstate string
	// SpeedMbps bars the negotiated speed in Mb/s (the kernel's unit).
	SpeedMbps checks.Limit
	// IncludeVirtual also judges interfaces with no backing device (lo,
	// bridges, veth, bonds); physical NICs only by default.
	IncludeVirtual bool
}

// Ethernet returns one verdict per Ethernet interface, component nic/<ifname>.
func Ethernet(ctx context.Context, o EthernetOptions) ([]checks.Verdict, error) {
	want := o.Operstate
	if want == "" {
		want = "up"
	}
	class := filepath.Join(o.SysRoot, "sys/class/net")
	entries, err := os.ReadDir(class)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list network interfaces: %w", err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	var out []checks.Verdict
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		dir := filepath.Join(class, name)
		typ, err := checks.ReadInt(filepath.Join(dir, "type"))
		if err != nil {
			return out, fmt.Errorf("interface %s: type: %w", name, err)
		}
		if typ != arphrdEther {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "device")); err != nil && !o.IncludeVirtual {
			continue // no backing device: virtual interface
		}
		comp := "nic/" + name
		op, err := checks.ReadString(filepath.Join(dir, "operstate"))
		if err != nil {
			out = append(out, checks.Verdict{Component: comp, Status: checks.Error, Message: fmt.Sprintf("reading operstate: %v", err)})
			continue
		}
		rs := []checks.Reading{checks.Text("operstate", op, want)}
		// speed reads -1 (or fails with EINVAL) when there is no link or the
		// driver cannot tell: that is "not reported", which fails a set bar.
		speed, err := checks.ReadInt(filepath.Join(dir, "speed"))
		if err != nil || speed < 0 {
			rs = append(rs, checks.Missing("speedMbps", o.SpeedMbps))
		} else {
			rs = append(rs, checks.Value("speedMbps", float64(speed), o.SpeedMbps).In("Mb/s"))
		}
		if d, err := checks.ReadString(filepath.Join(dir, "duplex")); err == nil && d != "" {
			rs = append(rs, checks.Text("duplex", d, ""))
		}
		out = append(out, checks.Judge(comp, rs...))
	}
	return out, nil
}
