package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// powerReadingTolerance: NVML documents nvmlDeviceGetPowerUsage as accurate
// to within ±5% of the draw, so a peak up to 5% over the enforced limit is
// measurement, not a broken power cap.
const powerReadingTolerance = 0.05

// Evaluate turns an observation into verdicts. Pure: same input, same
// verdicts, in a stable order (system checks first, then per GPU in
// component order, checks in a fixed order).
func Evaluate(obs *Observation, exp Expect) []Verdict {
	exp = exp.Defaults()
	var out []Verdict
	if obs.Count.Err != nil {
		return []Verdict{{Component: "gpu", Check: CheckCount, Status: Error,
			Expected: countExpected(exp), Message: "nvmlDeviceGetCount: " + obs.Count.Err.Error()}}
	}
	want := exp.Count
	if want == 0 {
		want = len(exp.BusIDs)
	}
	cv := Verdict{Component: "gpu", Check: CheckCount, Observed: strconv.Itoa(obs.Count.V), Expected: countExpected(exp)}
	switch {
	case want == 0:
		cv.Status = Pass
	case obs.Count.V == want:
		cv.Status = Pass
	default:
		cv.Status = Fail
		cv.Message = fmt.Sprintf("NVML sees %d GPUs, the node should have %d", obs.Count.V, want)
	}
	out = append(out, cv)
	if obs.LoadErr != nil {
		out = append(out, Verdict{Component: "gpu", Check: "load", Status: Error, Message: "the workload failed: " + obs.LoadErr.Error()})
	}
	critical := map[uint64]bool{}
	for _, x := range exp.CriticalXids {
		critical[x] = true
	}
	clique := fabricMajority(obs.Devices)
	for i := range obs.Devices {
		out = append(out, evalDevice(&obs.Devices[i], exp, critical, clique)...)
	}
	return out
}

func countExpected(exp Expect) string {
	switch {
	case exp.Count > 0:
		return strconv.Itoa(exp.Count)
	case len(exp.BusIDs) > 0:
		return strconv.Itoa(len(exp.BusIDs))
	}
	return "any"
}

func evalDevice(d *DeviceObservation, exp Expect, critical map[uint64]bool, clique fabricClique) []Verdict {
	c := d.Component
	v := func(check string, st Status, observed, expected, msg string) Verdict {
		return Verdict{Component: c, Check: check, Status: st, Observed: observed, Expected: expected, Message: msg}
	}
	if d.Err != nil {
		st := Error
		if d.NVMLIndex < 0 || errors.Is(d.Err, ErrGPULost) {
			st = Fail // missing or fallen off the bus: that is the finding
		}
		return []Verdict{v(CheckPresent, st, "absent", "present"+at(d.BusID), d.Err.Error())}
	}
	out := []Verdict{v(CheckPresent, Pass, "present"+at(d.BusID), "present", "")}
	out = append(out, evalModel(d, exp, v))
	out = append(out, evalECC(d, exp, v))
	out = append(out, evalMemoryRepair(d, exp, v)...)
	out = append(out, evalXid(d, critical, v))
	out = append(out, evalClocks(d, exp, v))
	out = append(out, evalTemperature(d, exp, v))
	out = append(out, evalPCIeLink(d, exp, v))
	out = append(out, evalPCIeReplay(d, exp, v))
	out = append(out, evalNVLink(d, exp, v))
	out = append(out, evalFabric(d, exp, v, clique))
	if exp.MaxMemoryTemperatureC > 0 {
		out = append(out, evalMemoryTemperature(d, exp, v))
	}
	out = append(out, evalPower(d, exp, v))
	return out
}

type mk func(check string, st Status, observed, expected, msg string) Verdict

func at(bus string) string {
	if bus == "" {
		return ""
	}
	return " at " + bus
}

// errVerdict maps a failed query: not supported is a SKIP, a lost GPU a
// FAIL, anything else an ERROR.
func errVerdict(v mk, check, expected, what string, err error) Verdict {
	switch {
	case errors.Is(err, ErrNotSupported):
		return v(check, Skip, "", expected, what+": not supported by this device")
	case errors.Is(err, ErrGPULost):
		return v(check, Fail, "GPU lost", expected, what+": "+err.Error())
	}
	return v(check, Error, "", expected, what+": "+err.Error())
}

func evalModel(d *DeviceObservation, exp Expect, v mk) Verdict {
	if d.Name.Err != nil {
		return errVerdict(v, CheckModel, exp.Model, "nvmlDeviceGetName", d.Name.Err)
	}
	obsv := d.Name.V
	if d.PCI.Err == nil {
		obsv += fmt.Sprintf(" [%08X]", d.PCI.V.DeviceID)
	}
	var want []string
	if exp.Model != "" {
		want = append(want, exp.Model)
	}
	if exp.PCIDeviceID != 0 {
		want = append(want, fmt.Sprintf("[%08X]", exp.PCIDeviceID))
	}
	if len(want) == 0 {
		return v(CheckModel, Skip, obsv, "", "no model in the expectations")
	}
	var bad []string
	if exp.Model != "" && d.Name.V != exp.Model {
		bad = append(bad, fmt.Sprintf("name %q, expected %q", d.Name.V, exp.Model))
	}
	if exp.PCIDeviceID != 0 {
		if d.PCI.Err != nil {
			return errVerdict(v, CheckModel, strings.Join(want, " "), "nvmlDeviceGetPciInfo", d.PCI.Err)
		}
		if d.PCI.V.DeviceID != exp.PCIDeviceID {
			bad = append(bad, fmt.Sprintf("PCI device id %08X, expected %08X", d.PCI.V.DeviceID, exp.PCIDeviceID))
		}
	}
	if len(bad) > 0 {
		return v(CheckModel, Fail, obsv, strings.Join(want, " "), strings.Join(bad, "; "))
	}
	return v(CheckModel, Pass, obsv, strings.Join(want, " "), "")
}

func evalECC(d *DeviceObservation, exp Expect, v mk) Verdict {
	want := fmt.Sprintf("<= %d", exp.MaxUncorrectedECC)
	if d.ECC.Err != nil {
		return errVerdict(v, CheckECC, want, "nvmlDeviceGetTotalEccErrors(uncorrected, volatile)", d.ECC.Err)
	}
	obsv := strconv.FormatUint(d.ECC.V, 10)
	if d.ECC.V > exp.MaxUncorrectedECC {
		return v(CheckECC, Fail, obsv, want, fmt.Sprintf("%d uncorrectable ECC errors since the driver loaded", d.ECC.V))
	}
	return v(CheckECC, Pass, obsv, want, "")
}

// evalMemoryRepair: row remapping on Ampere and later; page retirement
// before that (NVIDIA: row remapping replaces page retirement from Ampere).
func evalMemoryRepair(d *DeviceObservation, exp Expect, v mk) []Verdict {
	if d.Remap.Err == nil {
		r := d.Remap.V
		obsv := fmt.Sprintf("correctable=%d uncorrectable=%d pending=%t failure=%t", r.Correctable, r.Uncorrectable, r.Pending, r.Failure)
		want := "failure=false"
		if exp.FailOnRemapPending {
			want += " pending=false"
		}
		switch {
		case r.Failure:
			// NVIDIA A100/H100 memory error management, RMA policy: a
			// remapping failure (bank out of spare rows) is an RMA event.
			return []Verdict{v(CheckRemappedRows, Fail, obsv, want, "row remapping failed: a memory bank has no spare rows left")}
		case r.Pending && exp.FailOnRemapPending:
			return []Verdict{v(CheckRemappedRows, Fail, obsv, want, "a row remap is pending; it takes effect at the next GPU reset")}
		case r.Pending:
			return []Verdict{v(CheckRemappedRows, Pass, obsv, want, "a row remap is pending; it takes effect at the next GPU reset")}
		}
		return []Verdict{v(CheckRemappedRows, Pass, obsv, want, "")}
	}
	if !errors.Is(d.Remap.Err, ErrNotSupported) {
		return []Verdict{errVerdict(v, CheckRemappedRows, "failure=false", "nvmlDeviceGetRemappedRows", d.Remap.Err)}
	}
	if d.Retired == nil {
		return nil
	}
	want := fmt.Sprintf("<= %d retired pages", exp.MaxRetiredPages)
	if d.Retired.Err != nil {
		return []Verdict{errVerdict(v, CheckRetiredPages, want, "nvmlDeviceGetRetiredPages", d.Retired.Err)}
	}
	p := d.Retired.V
	obsv := fmt.Sprintf("dbe=%d sbe=%d pending=%t", p.DoubleBit, p.SingleBit, p.Pending)
	if total := p.DoubleBit + p.SingleBit; total > exp.MaxRetiredPages {
		return []Verdict{v(CheckRetiredPages, Fail, obsv, want, fmt.Sprintf("%d pages retired", total))}
	}
	msg := ""
	if p.Pending {
		msg = "page retirement pending; takes effect at the next driver reload"
	}
	return []Verdict{v(CheckRetiredPages, Pass, obsv, want, msg)}
}

func evalXid(d *DeviceObservation, critical map[uint64]bool, v mk) Verdict {
	const want = "no critical Xid"
	if d.XidErr != nil && len(d.Xids) == 0 {
		return errVerdict(v, CheckXid, want, "watching Xid events", d.XidErr)
	}
	if len(d.Xids) == 0 {
		return v(CheckXid, Pass, "none", want, "")
	}
	counts := map[uint64]int{}
	var order []uint64
	for _, x := range d.Xids {
		if counts[x] == 0 {
			order = append(order, x)
		}
		counts[x]++
	}
	slices.Sort(order)
	var seen, crit []string
	for _, x := range order {
		info := LookupXid(x)
		s := fmt.Sprintf("%d x%d", x, counts[x])
		seen = append(seen, s)
		if info.Class == XidCritical || critical[x] {
			crit = append(crit, fmt.Sprintf("Xid %d (%s)", x, info.Name))
		}
	}
	obsv := "xid " + strings.Join(seen, ", ")
	if len(crit) > 0 {
		return v(CheckXid, Fail, obsv, want, "critical: "+strings.Join(crit, ", "))
	}
	var names []string
	for _, x := range order {
		info := LookupXid(x)
		names = append(names, fmt.Sprintf("Xid %d %s (%s)", x, info.Class, info.Name))
	}
	return v(CheckXid, Pass, obsv, want, strings.Join(names, ", "))
}

func evalClocks(d *DeviceObservation, exp Expect, v mk) Verdict {
	want := "none of " + strings.Join(ReasonNames(exp.FailClocksReasons), ",")
	var seen uint64
	var n int
	var lastErr error
	for _, s := range d.Samples {
		if s.Reasons.Err != nil {
			lastErr = s.Reasons.Err
			continue
		}
		n++
		seen |= s.Reasons.V
	}
	if n == 0 {
		if lastErr == nil {
			return v(CheckClocks, Error, "", want, "no samples taken")
		}
		return errVerdict(v, CheckClocks, want, "nvmlDeviceGetCurrentClocksEventReasons", lastErr)
	}
	obsv := "none"
	if seen != 0 {
		obsv = strings.Join(ReasonNames(seen), ",")
	}
	if bad := seen & exp.FailClocksReasons; bad != 0 {
		return v(CheckClocks, Fail, obsv, want, fmt.Sprintf("clocks held back by %s in %d samples", strings.Join(ReasonNames(bad), ","), n))
	}
	return v(CheckClocks, Pass, obsv, want, "")
}

func evalTemperature(d *DeviceObservation, exp Expect, v mk) Verdict {
	peak, ok, lastErr := uint32(0), false, error(nil)
	for _, s := range d.Samples {
		if s.TempC.Err != nil {
			lastErr = s.TempC.Err
			continue
		}
		ok = true
		peak = max(peak, s.TempC.V)
	}
	limit, why := 0, ""
	if d.SlowdownC.Err == nil && d.SlowdownC.V > 0 {
		limit = int(d.SlowdownC.V) - exp.TempMarginC
		why = fmt.Sprintf("slowdown %d C", d.SlowdownC.V)
		if exp.TempMarginC > 0 {
			why += fmt.Sprintf(" - %d C margin", exp.TempMarginC)
		}
	}
	if exp.MaxTemperatureC > 0 && (limit == 0 || exp.MaxTemperatureC < limit) {
		limit, why = exp.MaxTemperatureC, "suite maximum"
	}
	want := ""
	if limit > 0 {
		want = fmt.Sprintf("< %d C (%s)", limit, why)
	}
	if !ok {
		if lastErr == nil {
			return v(CheckTemperature, Error, "", want, "no samples taken")
		}
		return errVerdict(v, CheckTemperature, want, "nvmlDeviceGetTemperature", lastErr)
	}
	obsv := fmt.Sprintf("peak %d C", peak)
	if mem, ok := d.MemoryPeakC(); ok {
		obsv += fmt.Sprintf(", HBM peak %d C", mem)
	}
	if limit == 0 {
		msg := "no threshold: slowdown temperature unreadable and no suite maximum"
		if d.SlowdownC.Err != nil {
			msg += " (" + d.SlowdownC.Err.Error() + ")"
		}
		return v(CheckTemperature, Skip, obsv, "", msg)
	}
	if int(peak) >= limit {
		return v(CheckTemperature, Fail, obsv, want, fmt.Sprintf("peaked at %d C, limit %d C", peak, limit))
	}
	return v(CheckTemperature, Pass, obsv, want, "")
}

// evalPCIeLink uses the best link seen across samples: GPUs drop link speed
// when idle to save power (NVML: the current generation "may be reduced when
// the GPU is not in use"), so only a link that never trains up under load
// is a finding.
func evalPCIeLink(d *DeviceObservation, exp Expect, v mk) Verdict {
	var best PCIeLink
	ok, lastErr := false, error(nil)
	for _, s := range d.Samples {
		if s.Link.Err != nil {
			lastErr = s.Link.Err
			continue
		}
		ok = true
		best.CurGen = max(best.CurGen, s.Link.V.CurGen)
		best.CurWidth = max(best.CurWidth, s.Link.V.CurWidth)
		best.MaxGen = max(best.MaxGen, s.Link.V.MaxGen)
		best.MaxWidth = max(best.MaxWidth, s.Link.V.MaxWidth)
	}
	if !ok {
		if lastErr == nil {
			return v(CheckPCIeLink, Error, "", "", "no samples taken")
		}
		return errVerdict(v, CheckPCIeLink, "", "nvmlDeviceGetCurrPcieLinkGeneration/Width", lastErr)
	}
	wantGen, wantWidth := best.MaxGen, best.MaxWidth
	if exp.PCIeGen > 0 {
		wantGen = exp.PCIeGen
	}
	if exp.PCIeWidth > 0 {
		wantWidth = exp.PCIeWidth
	}
	obsv := fmt.Sprintf("gen%d x%d", best.CurGen, best.CurWidth)
	want := fmt.Sprintf("gen%d x%d", wantGen, wantWidth)
	var bad []string
	if best.CurGen < wantGen {
		bad = append(bad, fmt.Sprintf("link trained at gen%d, expected gen%d (device+slot max gen%d)", best.CurGen, wantGen, best.MaxGen))
	}
	if best.CurWidth < wantWidth {
		bad = append(bad, fmt.Sprintf("link width x%d, expected x%d (device+slot max x%d)", best.CurWidth, wantWidth, best.MaxWidth))
	}
	if len(bad) > 0 {
		return v(CheckPCIeLink, Fail, obsv, want, strings.Join(bad, "; "))
	}
	return v(CheckPCIeLink, Pass, obsv, want, "")
}

func evalPCIeReplay(d *DeviceObservation, exp Expect, v mk) Verdict {
	want := fmt.Sprintf("delta <= %d", exp.MaxPCIeReplayDelta)
	for _, r := range []reading[uint64]{d.ReplayPre, d.ReplayPost} {
		if r.Err != nil {
			return errVerdict(v, CheckPCIeReplay, want, "nvmlDeviceGetPcieReplayCounter", r.Err)
		}
	}
	if d.ReplayPost.V < d.ReplayPre.V {
		return v(CheckPCIeReplay, Error, fmt.Sprintf("%d -> %d", d.ReplayPre.V, d.ReplayPost.V), want, "replay counter went backwards (driver reloaded or GPU reset during the run?)")
	}
	delta := d.ReplayPost.V - d.ReplayPre.V
	obsv := fmt.Sprintf("delta %d (%d -> %d)", delta, d.ReplayPre.V, d.ReplayPost.V)
	if delta > exp.MaxPCIeReplayDelta {
		return v(CheckPCIeReplay, Fail, obsv, want, fmt.Sprintf("%d PCIe replays during the run: link errors", delta))
	}
	return v(CheckPCIeReplay, Pass, obsv, want, "")
}

func evalPower(d *DeviceObservation, exp Expect, v mk) Verdict {
	if d.LimitMW.Err != nil {
		return errVerdict(v, CheckPower, "", "nvmlDeviceGetEnforcedPowerLimit", d.LimitMW.Err)
	}
	limitW := float64(d.LimitMW.V) / 1000
	var peakW float64
	ok, lastErr := false, error(nil)
	for _, s := range d.Samples {
		if s.PowerMW.Err != nil {
			lastErr = s.PowerMW.Err
			continue
		}
		ok = true
		peakW = max(peakW, float64(s.PowerMW.V)/1000)
	}
	var wants []string
	if exp.PowerLimitW > 0 {
		wants = append(wants, fmt.Sprintf("limit %d W", exp.PowerLimitW))
	}
	wants = append(wants, fmt.Sprintf("peak <= %.0f W", limitW*(1+powerReadingTolerance)))
	if exp.MinLoadPowerW > 0 && d.Loaded {
		wants = append(wants, fmt.Sprintf("peak >= %d W under load", exp.MinLoadPowerW))
	}
	want := strings.Join(wants, ", ")
	if !ok {
		if lastErr == nil {
			return v(CheckPower, Error, "", want, "no samples taken")
		}
		return errVerdict(v, CheckPower, want, "nvmlDeviceGetPowerUsage", lastErr)
	}
	obsv := fmt.Sprintf("limit %.0f W, peak %.0f W", limitW, peakW)
	var bad []string
	if exp.PowerLimitW > 0 && int(limitW+0.5) != exp.PowerLimitW {
		bad = append(bad, fmt.Sprintf("enforced power limit %.0f W, expected %d W", limitW, exp.PowerLimitW))
	}
	if peakW > limitW*(1+powerReadingTolerance) {
		bad = append(bad, fmt.Sprintf("drew %.0f W over its %.0f W limit", peakW, limitW))
	}
	if exp.MinLoadPowerW > 0 && d.Loaded && peakW < float64(exp.MinLoadPowerW) {
		bad = append(bad, fmt.Sprintf("peaked at %.0f W under load, expected at least %d W", peakW, exp.MinLoadPowerW))
	}
	if len(bad) > 0 {
		return v(CheckPower, Fail, obsv, want, strings.Join(bad, "; "))
	}
	return v(CheckPower, Pass, obsv, want, "")
}
