package netcheck

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cure-oss/cure/tools/checks"
)

// IBCounters are the standard port counters the kernel's ib_core exposes
// under ports/<n>/counters (IBA PortCounters / PortCountersExtended); only
// these may carry delta bars, so a typo in a suite is an error, not a pass.
var IBCounters = []string{
	"VL15_dropped", "excessive_buffer_overrun_errors", "link_downed", "link_error_recovery",
	"local_link_integrity_errors", "multicast_rcv_packets", "multicast_xmit_packets",
	"port_rcv_constraint_errors", "port_rcv_data", "port_rcv_errors", "port_rcv_packets",
	"port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_constraint_errors",
	"port_xmit_data", "port_xmit_discards", "port_xmit_packets", "port_xmit_wait",
	"symbol_error", "unicast_rcv_packets", "unicast_xmit_packets",
}

// InfiniBandOptions configure the InfiniBand check.
type InfiniBandOptions struct {
	SysRoot string
	// State is the expected logical port state ("ACTIVE" when empty): the
	// text after "N: " in ports/<n>/state.
	State string
	// PhysState is the expected physical state ("LinkUp" when empty).
	PhysState string
	// RateGbps bars the port rate, the number leading ports/<n>/rate.
	RateGbps checks.Limit
	// LinkLayer keeps only ports whose link_layer matches ("InfiniBand" or
	// "Ethernet" for RoCE); empty keeps all.
	LinkLayer string
	// Counters bar how much each named counter (one of IBCounters) may grow
	// over Window.
	Counters map[string]checks.Limit
	// Window is the interval over which counter deltas are taken; zero
	// reads states only.
	Window time.Duration
	// Wait waits out the window; nil means checks.Sleep (tests advance
	// fixture counters here).
	Wait func(ctx context.Context, d time.Duration) error
}

type ibPort struct {
	comp string
	dir  string
}

// InfiniBand returns one verdict per port, component ib/<device>/<port>.
func InfiniBand(ctx context.Context, o InfiniBandOptions) ([]checks.Verdict, error) {
	for name := range o.Counters {
		if !slices.Contains(IBCounters, name) {
			return nil, fmt.Errorf("infiniband: counter %q is not a standard port counter (want one of %s)", name, strings.Join(IBCounters, ", "))
		}
	}
	ports, err := listIB(o.SysRoot, o.LinkLayer)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(o.Counters))
	for n := range o.Counters {
		names = append(names, n)
	}
	sort.Strings(names)
	before := make([]map[string]uint64, len(ports))
	if o.Window > 0 && len(names) > 0 {
		for i, p := range ports {
			before[i] = readCounters(p.dir, names)
		}
		wait := o.Wait
		if wait == nil {
			wait = checks.Sleep
		}
		if err := wait(ctx, o.Window); err != nil {
			return nil, err
		}
	}
	var out []checks.Verdict
	for i, p := range ports {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		out = append(out, judgeIB(p, o, names, before[i]))
	}
	return out, nil
}

func listIB(root, linkLayer string) ([]ibPort, error) {
	class := filepath.Join(root, "sys/class/infiniband")
	devs, err := os.ReadDir(class)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list infiniband devices: %w", err)
	}
	var out []ibPort
	for _, d := range devs {
		pdir := filepath.Join(class, d.Name(), "ports")
		ps, err := os.ReadDir(pdir)
		if err != nil {
			return nil, fmt.Errorf("infiniband %s: list ports: %w", d.Name(), err)
		}
		nums := []int{}
		for _, p := range ps {
			if n, err := strconv.Atoi(p.Name()); err == nil {
				nums = append(nums, n)
			}
		}
		sort.Ints(nums)
		for _, n := range nums {
			dir := filepath.Join(pdir, strconv.Itoa(n))
			if linkLayer != "" {
				ll, err := checks.ReadString(filepath.Join(dir, "link_layer"))
				if err == nil && !strings.EqualFold(ll, linkLayer) {
					continue
				}
			}
			out = append(out, ibPort{comp: fmt.Sprintf("ib/%s/%d", d.Name(), n), dir: dir})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].comp < out[j].comp })
	return out, nil
}

// readCounters reads the named counters; an unreadable one is left out and
// later reported as not reported.
func readCounters(dir string, names []string) map[string]uint64 {
	m := map[string]uint64{}
	for _, n := range names {
		if v, err := checks.ReadUint(filepath.Join(dir, "counters", n)); err == nil {
			m[n] = v
		}
	}
	return m
}

func judgeIB(p ibPort, o InfiniBandOptions, names []string, before map[string]uint64) checks.Verdict {
	state, err := stateName(filepath.Join(p.dir, "state"))
	if err != nil {
		return checks.Verdict{Component: p.comp, Status: checks.Error, Message: err.Error()}
	}
	phys, err := stateName(filepath.Join(p.dir, "phys_state"))
	if err != nil {
		return checks.Verdict{Component: p.comp, Status: checks.Error, Message: err.Error()}
	}
	rs := []checks.Reading{
		checks.Text("state", state, orDefault(o.State, "ACTIVE")),
		checks.Text("physState", phys, orDefault(o.PhysState, "LinkUp")),
	}
	if rate, err := readRate(filepath.Join(p.dir, "rate")); err != nil {
		rs = append(rs, checks.Missing("rateGbps", o.RateGbps))
	} else {
		rs = append(rs, checks.Value("rateGbps", rate, o.RateGbps).In("Gb/s"))
	}
	var notes []string
	if before != nil {
		after := readCounters(p.dir, names)
		for _, n := range names {
			b, okb := before[n]
			a, oka := after[n]
			if !okb || !oka {
				rs = append(rs, checks.Missing(n, o.Counters[n]))
				continue
			}
			d := a - b
			if a < b {
				// Someone cleared the counters (perfquery -R) mid-window:
				// everything counted since the reset is the lower bound.
				d = a
				notes = append(notes, n+" was reset during the window")
			}
			rs = append(rs, checks.Value(n, float64(d), o.Counters[n]))
		}
		notes = append(notes, fmt.Sprintf("counter deltas over %s", o.Window))
	}
	v := checks.Judge(p.comp, rs...)
	for _, n := range notes {
		if v.Message != "" {
			v.Message += "; "
		}
		v.Message += n
	}
	return v
}

// stateName turns "4: ACTIVE" / "5: LinkUp" into "ACTIVE" / "LinkUp".
func stateName(path string) (string, error) {
	s, err := checks.ReadString(path)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	if _, after, ok := strings.Cut(s, ":"); ok {
		return strings.TrimSpace(after), nil
	}
	return s, nil
}

// readRate parses "400 Gb/sec (4X NDR)" into 400.
func readRate(path string) (float64, error) {
	s, err := checks.ReadString(path)
	if err != nil {
		return 0, err
	}
	f := strings.Fields(s)
	if len(f) < 2 || !strings.HasPrefix(f[1], "Gb/s") {
		return 0, fmt.Errorf("%s: expected \"<n> Gb/sec (...)\", found %q", path, s)
	}
	return strconv.ParseFloat(f[0], 64)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
