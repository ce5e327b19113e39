// Package suite turns a manifests.ValidationSuite into configured checks
// (tools/checks and its families) and runs them: the one place that knows
// both the manifest schema and the check packages.
package suite

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/artifact"
	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/measure"
	"github.com/cure-oss/cure/tools/checks/nvmehealth"
	"github.com/cure-oss/cure/tools/checks/siteprog"
	"github.com/cure-oss/cure/tools/checks/storage"
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
	for _, d := range scratchParams[1:] {
		if _, set := p.getAs(d.Name, d.Kind); set {
			p.errorf("params."+d.Name, "set without allowWrite: true")
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
