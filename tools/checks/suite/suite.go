// Package suite turns a manifests.ValidationSuite into configured checks
// (tools/checks and its families) and runs them: the one place that knows
// both the manifest schema and the check packages.
package suite

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/artifact"
	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/cpustress"
	"github.com/cure-oss/cure/tools/checks/fiocheck"
	"github.com/cure-oss/cure/tools/checks/iperfcheck"
	"github.com/cure-oss/cure/tools/checks/measure"
	"github.com/cure-oss/cure/tools/checks/memtest"
	"github.com/cure-oss/cure/tools/checks/netcheck"
	"github.com/cure-oss/cure/tools/checks/nvmehealth"
	"github.com/cure-oss/cure/tools/checks/siteprog"
	"github.com/cure-oss/cure/tools/checks/storage"
	"github.com/cure-oss/cure/tools/checks/stresscheck"
	"github.com/cure-oss/cure/tools/checks/thermal"
)

// Env is what the checks need from the node; the zero value (Root "/"
// aside) uses the real devices.
type Env struct {
	// Root is where sys/, proc/ and dev/ are found ("/" on a node).
	Root string
	// OpenNVMe opens NVMe controllers; nil means the admin ioctl.
	OpenNVMe nvmehealth.Opener
	// Disks lists disks with the boot medium marked (runner/inventory);
	// nil means blockdev under Root.
	Disks func() ([]blockdev.Disk, error)
	// OpenBlock opens block devices; nil means O_DIRECT.
	OpenBlock func(path string, write bool) (storage.File, error)
	// AllowDiskWrites is the mode's permission (burn-in yes, diagnostic
	// no). A suite's scratch write runs only when both allow it.
	AllowDiskWrites bool
	// MemoryCap caps the memory test size in bytes (0: no cap).
	MemoryCap uint64
	// GPU builds GPU checks (NVML lives in a separate cgo helper); nil
	// makes them SKIP with a message saying so.
	GPU func(c manifests.Check) (checks.Func, error)
	// Measure runs the checks that drive a tool-bundle program
	// (manifests.CheckTools): on a node, cure-measure from the bundle
	// (measure.Exec); in tests, measure.Run in process. Nil makes those
	// checks ERROR, saying so.
	Measure func(ctx context.Context, r measure.Request) ([]checks.Verdict, error)
	// Site runs a site check's program (siteprog.Runner.Run on a node,
	// with the program's URL resolved against the artifact server). Nil
	// makes site checks ERROR, saying so.
	Site func(ctx context.Context, p siteprog.Program) ([]checks.Verdict, error)
	// Pair runs a node-pair check: ports offered to the coordinator, the
	// batch's schedule awaited, this node's slots measured (through
	// Measure), the batch's judgement of this node returned. Nil makes
	// node-pair checks ERROR, saying so.
	Pair func(ctx context.Context, c PairConfig) ([]checks.Verdict, error)
}

// DefaultIBWindow is the InfiniBand counter window when a suite bars
// counters but sets no interval.
const DefaultIBWindow = 10 * time.Second

// Build configures every check of s. Unknown params or threshold metrics,
// wrong types and unsafe write requests are errors naming the check.
func Build(s *manifests.ValidationSuite, env Env) ([]checks.Check, error) {
	if env.Root == "" {
		env.Root = "/"
	}
	var out []checks.Check
	var errs []string
	for i, mc := range s.Spec.Checks {
		p := newParams(i, mc)
		c := checks.Check{
			Name: mc.Name, Type: mc.Type, Stage: mc.Stage, AppliesTo: mc.AppliesTo, Optional: mc.OptionalReason(),
			Duration: CheckDuration(&s.Spec, mc), Interval: time.Duration(mc.Interval),
			Count: p.limit("components"),
		}
		build(&c, mc, p, env)
		errs = append(errs, p.done()...)
		if mc.Type == manifests.CheckNodePair {
			errs = append(errs, pairFits(i, mc, time.Duration(s.Spec.Duration))...)
		}
		out = append(out, c)
	}
	errs = append(errs, telemetryErrors(s)...)
	if len(errs) > 0 {
		return nil, fmt.Errorf("suite %s: %d problem(s):\n  %s", s.Metadata.Name, len(errs), strings.Join(errs, "\n  "))
	}
	return out, nil
}

// CheckDuration is how long c runs: its own duration, else its stage's
// (a stage loads the node for its whole length), else zero (one shot).
func CheckDuration(spec *manifests.ValidationSuiteSpec, c manifests.Check) time.Duration {
	if c.Duration > 0 || c.Stage == "" {
		return time.Duration(c.Duration)
	}
	for _, st := range spec.Stages {
		if st.Name == c.Stage {
			return time.Duration(st.Duration)
		}
	}
	return 0
}

// Run builds and runs s with o.FailFast taken from the suite: stages one
// after another, the checks of a stage at the same time (checks.Run), the
// checks in o.Done (ended before a node reset) not again.
func Run(ctx context.Context, s *manifests.ValidationSuite, env Env, o checks.Options) ([]checks.Verdict, error) {
	cs, err := Build(s, env)
	if err != nil {
		return nil, err
	}
	o.FailFast = s.Spec.FailFast
	if s.Spec.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(s.Spec.Duration))
		defer cancel()
	}
	return checks.Run(ctx, cs, o), nil
}

func build(c *checks.Check, mc manifests.Check, p *params, env Env) {
	switch mc.Type {
	case manifests.CheckMemory:
		pats := p.strs("patterns")
		o := memtest.Options{
			Root:       env.Root,
			Fraction:   p.float("fraction", 0),
			Bytes:      p.size("bytes"),
			MaxBytes:   p.size("maxBytes"),
			Seed:       uint64(p.int("seed", 1)),
			Workers:    int(p.int("workers", 0)),
			Duration:   c.Duration,
			Mismatches: p.limit("mismatches"),
		}
		if env.MemoryCap > 0 && (o.MaxBytes == 0 || o.MaxBytes > env.MemoryCap) {
			o.MaxBytes = env.MemoryCap
		}
		for i, s := range pats {
			if !slices.Contains(memtest.Patterns, memtest.Pattern(s)) {
				p.errorf(fmt.Sprintf("params.patterns[%d]", i), "%q is not a pattern (want %v)", s, memtest.Patterns)
			}
			o.Patterns = append(o.Patterns, memtest.Pattern(s))
		}
		if o.Bytes == 0 && (o.Fraction <= 0 || o.Fraction > 1) {
			p.errorf("params.fraction", "expected a fraction of MemAvailable in (0, 1] (or params.bytes), found %v", o.Fraction)
		}
		c.Func = func(ctx context.Context) ([]checks.Verdict, error) { return memtest.Check(ctx, o) }

	case manifests.CheckCPU:
		if c.Duration <= 0 {
			p.errorf("duration", "a cpu stress needs a duration")
		}
		o := cpustress.Options{
			Root: env.Root, Duration: c.Duration, SampleEvery: c.Interval,
			Throttle:         p.limit("throttleEvents"),
			BaseFreqRatio:    p.limit("baseFreqRatio"),
			RequireTelemetry: p.bool("requireTelemetry"),
		}
		p.zeroOnly("computeErrors", "a wrong result always fails")
		c.Func = func(ctx context.Context) ([]checks.Verdict, error) { return cpustress.Check(ctx, o) }

	case manifests.CheckNVMeSMART:
		o := nvmehealth.Options{
			Root: env.Root, Open: env.OpenNVMe,
			PercentageUsed: p.limit("percentageUsed"),
			MediaErrors:    p.limit("mediaErrors"),
			AvailableSpare: p.limit("availableSpare"),
			TempC:          p.limit("tempC"),
			IgnoreWarnings: uint8(p.int("ignoreWarnings", 0)),
		}
		p.zeroOnly("criticalWarning", "any set bit fails (params.ignoreWarnings masks bits)")
		c.Sample = true
		c.Func = func(ctx context.Context) ([]checks.Verdict, error) { return nvmehealth.Check(ctx, o) }

	case manifests.CheckStorageThroughput:
		o := storage.Options{
			Root: env.Root, Disks: env.Disks, Open: env.OpenBlock,
			Offset: p.size("offset"), Length: p.size("length"),
			BlockSize: int(p.size("blockSize")),
			Verify:    !p.bool("noVerify"),
			ReadMBps:  p.limit("readMBps"),
			WriteMBps: p.limit("writeMBps"),
		}
		p.zeroOnly("readbackMismatches", "a readback that differs always fails")
		if c.AppliesTo != "" {
			glob := c.AppliesTo
			o.Select = func(comp string) bool { ok, _ := path.Match(glob, comp); return ok }
		}
		note := ""
		if sc := scratch(p, "writeMBps"); sc != nil {
			if env.AllowDiskWrites {
				o.Write = sc
			} else {
				note = "scratch write not run: this mode never writes to disks"
			}
		}
		c.Sample = c.Duration > 0
		c.Func = func(ctx context.Context) ([]checks.Verdict, error) {
			vs, err := storage.Check(ctx, o)
			return withNote(vs, note), err
		}

	case manifests.CheckStorageRandom:
		o := fiocheck.Options{
			Root: env.Root, AppliesTo: c.AppliesTo, Runtime: c.Duration,
			BlockSize: int(p.size("blockSize")), IODepth: int(p.int("ioDepth", 0)), IOEngine: p.str("ioEngine"),
			ReadIOPS: p.limit("randReadIOPS"), ReadP99Us: p.limit("p99ReadLatencyUs"),
			WriteIOPS: p.limit("randWriteIOPS"), WriteP99Us: p.limit("p99WriteLatencyUs"),
		}
		if o.BlockSize%512 != 0 || o.BlockSize < 0 {
			p.errorf("params.blockSize", "%d is not a multiple of 512", o.BlockSize)
		}
		note := ""
		if sc := scratch(p, "randWriteIOPS", "p99WriteLatencyUs"); sc != nil {
			if env.AllowDiskWrites {
				o.Write = sc
			} else {
				note = "scratch write not run: this mode never writes to disks"
			}
		}
		c.Func = func(ctx context.Context) ([]checks.Verdict, error) {
			// The runner's disks, boot medium marked: the helper
			// runs fio on what the runner sees.
			disks, markErr := storage.ListDisks(env.Root, env.Disks)
			if disks == nil && markErr != nil {
				return nil, markErr
			}
			if o.Write != nil {
				if err := storage.CheckScratch(disks, markErr, *o.Write); err != nil {
					return nil, err
				}
			}
			vs, err := env.measure(ctx, measure.Request{Type: mc.Type, Storage: &o, Disks: disks})
			return withNote(vs, note), err
		}

	case manifests.CheckCPUThroughput:
		o := stresscheck.CPUOptions{Root: env.Root, Duration: c.Duration,
			Method: p.str("method"), BogoOpsPerSec: p.limit("cpuBogoOpsPerSec")}
		p.zeroOnly("verifyFailures", "a computation stress-ng's --verify finds wrong always fails")
		c.Func = func(ctx context.Context) ([]checks.Verdict, error) {
			return env.measure(ctx, measure.Request{Type: mc.Type, CPU: &o})
		}

	case manifests.CheckMemoryBandwidth:
		o := stresscheck.MemoryOptions{Root: env.Root, Duration: c.Duration,
			Instances: int(p.int("instances", 0)), L3Bytes: p.size("l3Size"),
			ReadMiBps: p.limit("memReadMiBps"), WriteMiBps: p.limit("memWriteMiBps")}
		p.zeroOnly("verifyFailures", "a stream array stress-ng's --verify finds wrong always fails")
		if c.Duration > 0 && c.Duration < stresscheck.MinStreamDuration {
			p.errorf("duration", "%s is too short: stress-ng's stream reports no memory rate under %s", c.Duration, stresscheck.MinStreamDuration)
		}
		c.Func = func(ctx context.Context) ([]checks.Verdict, error) {
			return env.measure(ctx, measure.Request{Type: mc.Type, Memory: &o})
		}

	case manifests.CheckNICThroughput:
		o := iperfcheck.Options{Server: p.str("server"), Duration: c.Duration,
			Reverse: p.bool("reverse"), Streams: int(p.int("streams", 0)), Bind: p.str("bind"),
			ThroughputMbps: p.limit("throughputMbps"), Retransmits: p.limit("retransmits")}
		if _, _, err := iperfcheck.SplitServer(o.Server); err != nil {
			p.errorf("params.server", "the iperf3 server to measure against, host or host:port: %v", err)
		}
		c.Func = func(ctx context.Context) ([]checks.Verdict, error) {
			return env.measure(ctx, measure.Request{Type: mc.Type, NIC: &o})
		}

	case manifests.CheckEthernet:
		o := netcheck.EthernetOptions{
			SysRoot: env.Root, Operstate: p.text("operstate"),
			SpeedMbps: p.limit("speedMbps"), IncludeVirtual: p.bool("includeVirtual"),
		}
		c.Sample = true
		c.Func = func(ctx context.Context) ([]checks.Verdict, error) { return netcheck.Ethernet(ctx, o) }

	case manifests.CheckInfiniBand:
		o := netcheck.InfiniBandOptions{
			SysRoot: env.Root, State: p.text("state"), PhysState: p.text("physState"),
			RateGbps: p.limit("rateGbps"), LinkLayer: p.str("linkLayer"),
			Counters: map[string]checks.Limit{},
		}
		for _, k := range p.rest() {
			if !slices.Contains(netcheck.IBCounters, k) {
				continue // reported as unknown by done()
			}
			o.Counters[k] = p.limit(k)
		}
		if len(o.Counters) > 0 {
			o.Window = c.Interval
			if o.Window <= 0 {
				o.Window = DefaultIBWindow
			}
			// Each sample already spans one window: sample back to back.
			c.Interval = time.Nanosecond
		}
		c.Sample = true
		c.Func = func(ctx context.Context) ([]checks.Verdict, error) { return netcheck.InfiniBand(ctx, o) }

	case manifests.CheckThermal:
		o := thermal.Options{
			SysRoot: env.Root, MarginC: p.float("marginC", 0),
			IgnoreMax: p.bool("ignoreMax"), TempC: p.limit("tempC"),
		}
		c.Sample = true
		c.Func = func(ctx context.Context) ([]checks.Verdict, error) { return thermal.Check(ctx, o) }

	case manifests.CheckSite:
		c.Func = siteCheck(mc, c.Duration, p, env)

	case manifests.CheckNodePair:
		c.Func = pairCheck(mc, p, env)

	case manifests.CheckGPU, manifests.CheckGPUBandwidth, manifests.CheckNCCLAllReduce:
		// Params and thresholds belong to the GPU builder: mark them used.
		for k := range mc.Params {
			p.get(k)
		}
		for k := range mc.Thresholds {
			p.usedT[k] = true
		}
		if env.GPU == nil {
			c.Func = func(context.Context) ([]checks.Verdict, error) {
				return []checks.Verdict{{Component: "gpu", Status: checks.Skip,
					Message: "GPU checks need the NVML helper, which this runner was built without"}}, nil
			}
			return
		}
		// The GPU builder reads the check's own duration (how long
		// gpu-burn or the sampling runs): a check in a stage runs the
		// stage's unless it sets one.
		mc.Duration = manifests.Duration(c.Duration)
		f, err := env.GPU(mc)
		if err != nil {
			p.errorf("type", "%v", err)
		}
		c.Func = f

	default:
		p.errorf("type", "%q has no implementation in this runner", mc.Type)
		c.Func = func(context.Context) ([]checks.Verdict, error) {
			return nil, errors.New("check type not implemented")
		}
	}
}

// siteCheck plans a site check: the program's pin, its time limit (the
// program's timeout, else the check's duration, else the default) and its
// params, which go to the program as they are (it judges itself: the
// suite gives it no thresholds).
func siteCheck(mc manifests.Check, dur time.Duration, p *params, env Env) checks.Func {
	if mc.Program == nil {
		p.errorf("program", "a site check needs its program")
		return nil
	}
	sp := siteprog.Program{
		Check: mc.Name, Description: mc.Program.Description, URL: mc.Program.URL,
		Want:  artifact.Want{SHA256: mc.Program.SHA256, Size: mc.Program.Size},
		Limit: time.Duration(mc.Program.Timeout), Params: map[string]any{},
		Network: mc.Program.Network == manifests.SiteNetworkNode,
	}
	if sp.Limit <= 0 {
		sp.Limit = dur
	}
	if sp.Limit <= 0 {
		sp.Limit = time.Duration(manifests.DefaultSiteTimeout)
	}
	for k := range mc.Params {
		v, _ := p.get(k)
		sp.Params[k] = v
	}
	if _, err := siteprog.Environ(sp); err != nil {
		p.errorf("params", "%v", err)
	}
	return func(ctx context.Context) ([]checks.Verdict, error) {
		if env.Site == nil {
			return nil, fmt.Errorf("site check %s: this runner cannot run site programs", mc.Name)
		}
		return env.Site(ctx, sp)
	}
}

// scratch reads the scratch-write params the storage checks share: a
// range on one disk, only with allowWrite (the mode must allow writes
// too); a write threshold without allowWrite is an error.
func scratch(p *params, writeMetrics ...string) *storage.Scratch {
	if p.bool("allowWrite") {
		sc := &storage.Scratch{Device: p.str("scratchDevice"), Offset: p.size("scratchOffset"), Length: p.size("scratchLength")}
		if sc.Device == "" || sc.Length == 0 {
			p.errorf("params.allowWrite", "needs scratchDevice (one disk name) and a non-zero scratchLength")
		}
		return sc
	}
	for _, k := range []string{"scratchDevice", "scratchOffset", "scratchLength"} {
		if _, set := p.get(k); set {
			p.errorf("params."+k, "set without allowWrite: true")
		}
	}
	for _, m := range writeMetrics {
		if !p.limit(m).IsZero() {
			p.errorf("thresholds."+m, "set without params.allowWrite: true")
		}
	}
	return nil
}

func withNote(vs []checks.Verdict, note string) []checks.Verdict {
	if note != "" {
		for i := range vs {
			vs[i].Message = strings.TrimPrefix(vs[i].Message+"; "+note, "; ")
		}
	}
	return vs
}

// measure runs a tool-bundle check through env.Measure.
func (env Env) measure(ctx context.Context, r measure.Request) ([]checks.Verdict, error) {
	if env.Measure == nil {
		return nil, fmt.Errorf("%w: %s checks run %s from the tool bundle, and this runner has none", checks.ErrToolMissing, r.Type, r.Tool())
	}
	return env.Measure(ctx, r)
}
