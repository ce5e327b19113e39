package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// trafficFloor is the traffic per link (bytes, both directions) above
// which a load counts as having used NVLink: gpu-burn sends nothing over
// it, nvbandwidth and NCCL send gigabytes.
const trafficFloor = 1 << 30

// idleShare: under an NVLink load a link that carried less than this share
// of the median link's traffic is not carrying its part. On an NVSwitch
// board every GPU's traffic is spread over all its links, so a healthy
// link is never near zero while its siblings are busy.
const idleShare = 0.01

func nvlinkWant(exp Expect) string {
	var parts []string
	switch {
	case exp.NVLinks > 0:
		parts = append(parts, fmt.Sprintf("%d links up", exp.NVLinks))
	default:
		parts = append(parts, "all links up")
	}
	if exp.NVSwitch {
		parts = append(parts, "each to an NVSwitch")
	}
	parts = append(parts, "no error counter growth")
	return strings.Join(parts, ", ")
}

// evalNVLink judges the links read before and after the run: every link
// up (as many as the SKU expects, each to an NVSwitch on an NVSwitch
// board), no growth of the generation's error counters (DCGM's NVLink
// checks fail on any: max_nvlink_recovery_errors and the critical NVLink
// fields are 0), and, when a load moved data over NVLink, traffic on every
// link. A GPU that answers Not Supported for NVLink passes (SKIP) only when
// the SKU expects none.
func evalNVLink(d *DeviceObservation, exp Expect, v mk) Verdict {
	want := nvlinkWant(exp)
	if bad, ok := nvlinkReadErr(d, exp, v, want); ok {
		return bad
	}
	pre := map[int]NVLink{}
	for _, l := range d.LinksPre.V {
		pre[l.Link] = l
	}
	post := map[int]NVLink{}
	for _, l := range d.LinksPost.V {
		post[l.Link] = l
	}
	t := linkTally{traffic: map[int]uint64{}}
	for _, l := range d.LinksPost.V {
		b, had := pre[l.Link]
		t.link(l, b, had, exp.NVSwitch)
	}
	for link := 0; link < exp.NVLinks; link++ {
		if _, ok := post[link]; !ok {
			t.problems = append(t.problems, fmt.Sprintf("link %d missing", link))
		}
	}
	total := max(len(d.LinksPost.V), exp.NVLinks)
	if total == 0 {
		return v(CheckNVLink, Skip, "no links", want, "the device reports no NVLink links")
	}
	obsv := fmt.Sprintf("%d/%d up", t.up, total)
	if d.Arch.Err == nil {
		obsv += ", " + d.Arch.V.String()
	}
	if t.source != "" {
		obsv += " " + t.source
	}
	if t.corrected > 0 {
		obsv += fmt.Sprintf(", %d FEC-corrected symbol errors", t.corrected)
	}
	if d.Loaded {
		if idle, median := idleLinks(t.traffic); median > 0 {
			obsv += fmt.Sprintf(", median link traffic %s", bytesText(median))
			for _, link := range idle {
				t.problems = append(t.problems, fmt.Sprintf("link %d carried %s under an NVLink load while the median link carried %s",
					link, bytesText(t.traffic[link]), bytesText(median)))
			}
		}
	}
	switch {
	case len(t.problems) > 0:
		return v(CheckNVLink, Fail, obsv+"; "+strings.Join(append(t.problems, t.unreadable...), "; "), want, "")
	case len(t.unreadable) > 0:
		return v(CheckNVLink, Error, obsv+"; "+strings.Join(t.unreadable, "; "), want, "")
	}
	return v(CheckNVLink, Pass, obsv, want, "")
}

// nvlinkReadErr is the verdict when either reading of the links failed
// (ok false when both were read).
func nvlinkReadErr(d *DeviceObservation, exp Expect, v mk, want string) (Verdict, bool) {
	for _, r := range []reading[[]NVLink]{d.LinksPre, d.LinksPost} {
		if r.Err == nil {
			continue
		}
		if errors.Is(r.Err, ErrNotSupported) {
			if exp.NVLinks > 0 || exp.NVSwitch || exp.Fabric {
				return v(CheckNVLink, Fail, "no NVLink (NVML: not supported)", want, fmt.Sprintf(
					"the SKU expects %s, but NVML answers Not Supported for every link of this GPU: it is not on an NVLink board "+
						"(a PCIe card, or one GPU passed through to a virtual machine), or the driver does not see its links (%v)", want, r.Err)), true
			}
			return v(CheckNVLink, Skip, "no NVLink", want, "NVML answers Not Supported for every link and the SKU expects no NVLink: "+r.Err.Error()), true
		}
		return errVerdict(v, CheckNVLink, want, "NVLink state", r.Err), true
	}
	return Verdict{}, false
}

// linkTally is what evalNVLink finds link by link.
type linkTally struct {
	problems, unreadable []string
	up                   int
	corrected            uint64
	traffic              map[int]uint64
	source               string
}

// link compares one link after the run (l) with its reading before (b,
// had false when it was not listed then).
func (t *linkTally) link(l, b NVLink, had, nvswitch bool) {
	switch {
	case !l.Up:
		t.problems = append(t.problems, fmt.Sprintf("link %d down", l.Link))
		return
	case had && !b.Up:
		t.problems = append(t.problems, fmt.Sprintf("link %d was down before the run", l.Link))
		return
	}
	t.up++
	if nvswitch && l.Remote != RemoteSwitch {
		to := l.Remote
		if to == "" {
			to = "a device NVML cannot name"
		} else {
			to = "a " + strings.ToUpper(to)
		}
		t.problems = append(t.problems, fmt.Sprintf("link %d leads to %s, not an NVSwitch", l.Link, to))
	}
	if l.Counters != "" {
		t.source = l.Counters
	}
	if !had {
		return
	}
	if l.CountersErr != nil || b.CountersErr != nil {
		t.unreadable = append(t.unreadable, fmt.Sprintf("link %d error counters unreadable (%v)", l.Link, errors.Join(b.CountersErr, l.CountersErr)))
		return
	}
	for _, name := range sortedNames(l.Errors) {
		was, is := b.Errors[name], l.Errors[name]
		switch {
		case is > was:
			t.problems = append(t.problems, fmt.Sprintf("link %d %s +%d", l.Link, name, is-was))
		case is < was:
			t.unreadable = append(t.unreadable, fmt.Sprintf("link %d %s went backwards (%d -> %d)", l.Link, name, was, is))
		}
	}
	for name, is := range l.Corrected {
		if was := b.Corrected[name]; is > was {
			t.corrected += is - was
		}
	}
	if l.Traffic && b.Traffic && l.TxBytes >= b.TxBytes && l.RxBytes >= b.RxBytes {
		t.traffic[l.Link] = l.TxBytes - b.TxBytes + l.RxBytes - b.RxBytes
	}
}

// idleLinks returns the links that carried less than idleShare of the
// median link's traffic, when the median link carried more than
// trafficFloor (an NVLink load ran); median is 0 when none did.
func idleLinks(traffic map[int]uint64) (idle []int, median uint64) {
	if len(traffic) < 2 {
		return nil, 0
	}
	var vals []uint64
	for _, b := range traffic {
		vals = append(vals, b)
	}
	slices.Sort(vals)
	median = vals[len(vals)/2]
	if median < trafficFloor {
		return nil, 0
	}
	for link, b := range traffic {
		if float64(b) < float64(median)*idleShare {
			idle = append(idle, link)
		}
	}
	slices.Sort(idle)
	return idle, median
}

func bytesText(b uint64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%d B", b)
}

func sortedNames(m map[string]uint64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// fabricClique is the clique most of the node's registered GPUs are in.
type fabricClique struct {
	id      uint32
	cluster string
	n       int // GPUs in it
	others  int // registered GPUs in another clique
}

func fabricMajority(devs []DeviceObservation) fabricClique {
	type key struct {
		id      uint32
		cluster string
	}
	count := map[key]int{}
	for _, d := range devs {
		if d.Err == nil && d.Fabric.Err == nil && d.Fabric.V.State == FabricCompleted && d.Fabric.V.Status == nil {
			count[key{d.Fabric.V.CliqueID, d.Fabric.V.ClusterUUID}]++
		}
	}
	var best fabricClique
	total := 0
	for k, n := range count {
		total += n
		if n > best.n || (n == best.n && k.id < best.id) {
			best = fabricClique{id: k.id, cluster: k.cluster, n: n}
		}
	}
	best.others = total - best.n
	return best
}

// evalFabric judges the GPU's registration with the NVLink fabric. Where
// the SKU requires it (an NVSwitch board), anything but a completed,
// successful, healthy registration in the node's clique fails, Not
// Supported included; elsewhere only a registration that failed does.
func evalFabric(d *DeviceObservation, exp Expect, v mk, clique fabricClique) Verdict {
	want := "not required by the SKU"
	if exp.Fabric {
		want = "registered (state completed, status success, healthy), one clique per node"
	}
	if d.Fabric.Err != nil {
		if errors.Is(d.Fabric.Err, ErrNotSupported) && exp.Fabric {
			return v(CheckFabric, Fail, "not supported", want, "the SKU requires NVLink fabric registration, but NVML cannot report it for this GPU: "+d.Fabric.Err.Error())
		}
		return errVerdict(v, CheckFabric, want, "nvmlDeviceGetGpuFabricInfo", d.Fabric.Err)
	}
	f := d.Fabric.V
	obsv := "state " + f.State.String()
	switch {
	case f.State == FabricNotSupported:
		if exp.Fabric {
			return v(CheckFabric, Fail, obsv, want, "the SKU requires NVLink fabric registration, but the GPU reports state Not Supported: "+
				"it is not on an NVSwitch board, or is passed through alone")
		}
		return v(CheckFabric, Skip, obsv, want, "no NVLink fabric on this GPU")
	case f.State != FabricCompleted:
		msg := "the GPU is not registered with the NVLink fabric yet (the fabric manager has not finished with it)"
		if exp.Fabric {
			return v(CheckFabric, Fail, obsv, want, msg)
		}
		return v(CheckFabric, Skip, obsv, want, msg)
	case f.Status != nil:
		return v(CheckFabric, Fail, obsv+", status "+f.Status.Error(), want, "fabric registration failed: "+f.Status.Error())
	}
	obsv += fmt.Sprintf(", clique %d", f.CliqueID)
	if bad := f.Unhealthy(); len(bad) > 0 {
		return v(CheckFabric, Fail, obsv+", "+strings.Join(bad, ", "), want, "the fabric reports this GPU unhealthy: "+strings.Join(bad, ", "))
	}
	if exp.Fabric && clique.others > 0 && (f.CliqueID != clique.id || f.ClusterUUID != clique.cluster) {
		return v(CheckFabric, Fail, obsv, want, fmt.Sprintf("in clique %d while %d other GPUs of the node are in clique %d: the fabric split the node",
			f.CliqueID, clique.n, clique.id))
	}
	return v(CheckFabric, Pass, obsv, want, "")
}

// evalMemoryTemperature bars the HBM temperature peak.
func evalMemoryTemperature(d *DeviceObservation, exp Expect, v mk) Verdict {
	want := fmt.Sprintf("peak < %d C", exp.MaxMemoryTemperatureC)
	peak, ok := d.MemoryPeakC()
	if !ok {
		var lastErr error
		for _, s := range d.Samples {
			if s.MemC.Err != nil {
				lastErr = s.MemC.Err
			}
		}
		if lastErr == nil {
			return v(CheckMemoryTemp, Error, "", want, "no HBM temperature sample")
		}
		return errVerdict(v, CheckMemoryTemp, want, "NVML_FI_DEV_MEMORY_TEMP", lastErr)
	}
	obsv := fmt.Sprintf("peak %d C", peak)
	if int(peak) >= exp.MaxMemoryTemperatureC {
		return v(CheckMemoryTemp, Fail, obsv, want, fmt.Sprintf("HBM reached %d C", peak))
	}
	return v(CheckMemoryTemp, Pass, obsv, want, "")
}
