package suite

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"time"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/cpustress"
	"github.com/cure-oss/cure/tools/checks/fiocheck"
	"github.com/cure-oss/cure/tools/checks/iperfcheck"
	"github.com/cure-oss/cure/tools/checks/measure"
	"github.com/cure-oss/cure/tools/checks/memtest"
	"github.com/cure-oss/cure/tools/checks/netcheck"
	"github.com/cure-oss/cure/tools/checks/nvmehealth"
	"github.com/cure-oss/cure/tools/checks/storage"
	"github.com/cure-oss/cure/tools/checks/stresscheck"
	"github.com/cure-oss/cure/tools/checks/thermal"
)

// Kind is the type a check parameter takes in a suite.
type Kind string

// Parameter kinds (the params readers' own: each reader refuses a value
// of another kind, naming the field).
const (
	KindInt      Kind = "integer"
	KindFloat    Kind = "number"
	KindBool     Kind = "boolean"
	KindString   Kind = "string"
	KindStrings  Kind = "list of strings"
	KindInts     Kind = "list of integers"
	KindSize     Kind = "size"     // 4096 or "1GiB"
	KindDuration Kind = "duration" // "2s"
)

// Param is one parameter a check type takes.
type Param struct {
	Name string
	Kind Kind
}

// Spec declares one check type, as a hardware manager declares its steps:
// the parameters it takes, whether it may write to the node's disks, the
// tool-bundle programs it runs, and its builder.
type Spec struct {
	Type string
	// Params are the parameters the type takes; any other is an error
	// naming the field. With OpenParams the params go on as they are (to
	// the GPU helper, which declares its own, or to a site program) and
	// Params is empty.
	Params     []Param
	OpenParams bool
	// Writes: the check may write to disks (a scratch range). Its builder
	// sees Env.AllowDiskWrites; any other type's sees false, so only a
	// declared writer can ever write, and only in a mode that allows it.
	Writes bool
	// Tools are the tool-bundle programs the check may run
	// (manifests.CheckTools names the first; empty: built into the runner).
	Tools []string
	build builder
}

// builder configures c (Func, Sample, Interval) from the check's params
// and thresholds; problems go to p.
type builder func(c *checks.Check, mc manifests.Check, p *params, env Env)

// The scratch-write params the storage checks share (scratch): allowWrite
// first, then the range it allows.
var scratchParams = []Param{
	{"allowWrite", KindBool}, {"scratchDevice", KindString},
	{"scratchOffset", KindSize}, {"scratchLength", KindSize},
}

// specs is the registry: every check type manifests accepts, once.
var specs = []Spec{
	{Type: manifests.CheckMemory, build: buildMemory, Params: []Param{
		{"patterns", KindStrings}, {"fraction", KindFloat}, {"bytes", KindSize}, {"maxBytes", KindSize},
		{"seed", KindInt}, {"workers", KindInt}}},
	{Type: manifests.CheckCPU, build: buildCPU, Params: []Param{{"requireTelemetry", KindBool}}},
	{Type: manifests.CheckNVMeSMART, build: buildNVMe, Params: []Param{{"ignoreWarnings", KindInt}}},
	{Type: manifests.CheckStorageThroughput, build: buildStorageThroughput, Writes: true, Params: append([]Param{
		{"offset", KindSize}, {"length", KindSize}, {"blockSize", KindSize}, {"noVerify", KindBool}}, scratchParams...)},
	{Type: manifests.CheckStorageRandom, build: buildStorageRandom, Writes: true, Tools: []string{"fio"}, Params: append([]Param{
		{"blockSize", KindSize}, {"ioDepth", KindInt}, {"ioEngine", KindString}}, scratchParams...)},
	{Type: manifests.CheckCPUThroughput, build: buildCPUThroughput, Tools: []string{"stress-ng"},
		Params: []Param{{"method", KindString}}},
	{Type: manifests.CheckMemoryBandwidth, build: buildMemoryBandwidth, Tools: []string{"stress-ng"},
		Params: []Param{{"instances", KindInt}, {"l3Size", KindSize}}},
	{Type: manifests.CheckNICThroughput, build: buildNICThroughput, Tools: []string{"iperf3"}, Params: []Param{
		{"server", KindString}, {"reverse", KindBool}, {"streams", KindInt}, {"bind", KindString}}},
	{Type: manifests.CheckEthernet, build: buildEthernet, Params: []Param{{"includeVirtual", KindBool}}},
	{Type: manifests.CheckInfiniBand, build: buildInfiniBand, Params: []Param{{"linkLayer", KindString}}},
	{Type: manifests.CheckThermal, build: buildThermal, Params: []Param{{"marginC", KindFloat}, {"ignoreMax", KindBool}}},
	{Type: manifests.CheckSite, build: buildSite, OpenParams: true},
	{Type: manifests.CheckNodePair, build: buildNodePair, Tools: []string{"iperf3", "ib_write_bw", "ib_read_bw"}, Params: []Param{
		{"transport", KindString}, {"interfaces", KindStrings}, {"skuNics", KindInts}, {"rounds", KindInt},
		{"transfer", KindDuration}, {"setup", KindDuration}, {"gather", KindDuration}, {"basePort", KindInt}}},
	{Type: manifests.CheckGPU, build: buildGPU, OpenParams: true},
	{Type: manifests.CheckGPUBandwidth, build: buildGPU, OpenParams: true},
	{Type: manifests.CheckNCCLAllReduce, build: buildGPU, OpenParams: true},
}

// registry indexes specs by type; a type registered twice is a bug.
var registry = func() map[string]*Spec {
	m := map[string]*Spec{}
	for i := range specs {
		s := &specs[i]
		if m[s.Type] != nil {
			panic("suite: check type " + s.Type + " registered twice")
		}
		m[s.Type] = s
	}
	return m
}()

// Specs lists the registered check types.
func Specs() []Spec { return slices.Clone(specs) }

// Lookup returns the spec of a check type.
func Lookup(checkType string) (Spec, bool) {
	s, ok := registry[checkType]
	if !ok {
		return Spec{}, false
	}
	return *s, true
}

// param returns the declared parameter name, if the spec declares it.
func (s *Spec) param(name string) (Param, bool) {
	i := slices.IndexFunc(s.Params, func(p Param) bool { return p.Name == name })
	if i < 0 {
		return Param{}, false
	}
	return s.Params[i], true
}

// build configures c through its type's spec; an unregistered type is an
// error and a check that cannot run.
func build(c *checks.Check, mc manifests.Check, p *params, env Env) {
	s, ok := registry[mc.Type]
	if !ok {
		p.errorf("type", "%q has no implementation in this runner", mc.Type)
		c.Func = func(context.Context) ([]checks.Verdict, error) {
			return nil, errors.New("check type not implemented")
		}
		return
	}
	if !s.Writes {
		env.AllowDiskWrites = false
	}
	s.build(c, mc, p, env)
}

func buildMemory(c *checks.Check, _ manifests.Check, p *params, env Env) {
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
}

func buildCPU(c *checks.Check, _ manifests.Check, p *params, env Env) {
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
}

func buildNVMe(c *checks.Check, _ manifests.Check, p *params, env Env) {
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
}

func buildStorageThroughput(c *checks.Check, _ manifests.Check, p *params, env Env) {
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
	var note string
	o.Write, note = scratchWrite(p, env, "writeMBps")
	c.Sample = c.Duration > 0
	c.Func = func(ctx context.Context) ([]checks.Verdict, error) {
		vs, err := storage.Check(ctx, o)
		return withNote(vs, note), err
	}
}

func buildStorageRandom(c *checks.Check, mc manifests.Check, p *params, env Env) {
	o := fiocheck.Options{
		Root: env.Root, AppliesTo: c.AppliesTo, Runtime: c.Duration,
		BlockSize: int(p.size("blockSize")), IODepth: int(p.int("ioDepth", 0)), IOEngine: p.str("ioEngine"),
		ReadIOPS: p.limit("randReadIOPS"), ReadP99Us: p.limit("p99ReadLatencyUs"),
		WriteIOPS: p.limit("randWriteIOPS"), WriteP99Us: p.limit("p99WriteLatencyUs"),
	}
	if o.BlockSize%512 != 0 || o.BlockSize < 0 {
		p.errorf("params.blockSize", "%d is not a multiple of 512", o.BlockSize)
	}
	var note string
	o.Write, note = scratchWrite(p, env, "randWriteIOPS", "p99WriteLatencyUs")
	c.Func = func(ctx context.Context) ([]checks.Verdict, error) {
		// The runner's disks, boot medium marked: the helper runs fio on
		// what the runner sees.
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
}

func buildCPUThroughput(c *checks.Check, mc manifests.Check, p *params, env Env) {
	o := stresscheck.CPUOptions{Root: env.Root, Duration: c.Duration,
		Method: p.str("method"), BogoOpsPerSec: p.limit("cpuBogoOpsPerSec")}
	p.zeroOnly("verifyFailures", "a computation stress-ng's --verify finds wrong always fails")
	c.Func = func(ctx context.Context) ([]checks.Verdict, error) {
		return env.measure(ctx, measure.Request{Type: mc.Type, CPU: &o})
	}
}

func buildMemoryBandwidth(c *checks.Check, mc manifests.Check, p *params, env Env) {
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
}

func buildNICThroughput(c *checks.Check, mc manifests.Check, p *params, env Env) {
	o := iperfcheck.Options{Server: p.str("server"), Duration: c.Duration,
		Reverse: p.bool("reverse"), Streams: int(p.int("streams", 0)), Bind: p.str("bind"),
		ThroughputMbps: p.limit("throughputMbps"), Retransmits: p.limit("retransmits")}
	if _, _, err := iperfcheck.SplitServer(o.Server); err != nil {
		p.errorf("params.server", "the iperf3 server to measure against, host or host:port: %v", err)
	}
	c.Func = func(ctx context.Context) ([]checks.Verdict, error) {
		return env.measure(ctx, measure.Request{Type: mc.Type, NIC: &o})
	}
}

func buildEthernet(c *checks.Check, _ manifests.Check, p *params, env Env) {
	o := netcheck.EthernetOptions{
		SysRoot: env.Root, Operstate: p.text("operstate"),
		SpeedMbps: p.limit("speedMbps"), IncludeVirtual: p.bool("includeVirtual"),
	}
	c.Sample = true
	c.Func = func(ctx context.Context) ([]checks.Verdict, error) { return netcheck.Ethernet(ctx, o) }
}

func buildInfiniBand(c *checks.Check, _ manifests.Check, p *params, env Env) {
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
}

func buildThermal(c *checks.Check, _ manifests.Check, p *params, env Env) {
	o := thermal.Options{
		SysRoot: env.Root, MarginC: p.float("marginC", 0),
		IgnoreMax: p.bool("ignoreMax"), TempC: p.limit("tempC"),
	}
	c.Sample = true
	c.Func = func(ctx context.Context) ([]checks.Verdict, error) { return thermal.Check(ctx, o) }
}

func buildSite(c *checks.Check, mc manifests.Check, p *params, env Env) {
	c.Func = siteCheck(mc, c.Duration, p, env)
}

func buildNodePair(c *checks.Check, mc manifests.Check, p *params, env Env) {
	c.Func = pairCheck(mc, p, env)
}

// buildGPU hands a GPU check to Env.GPU (the NVML helper), which reads and
// checks its params and thresholds itself.
func buildGPU(c *checks.Check, mc manifests.Check, p *params, env Env) {
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
	// The GPU builder reads the check's own duration (how long gpu-burn or
	// the sampling runs): a check in a stage runs the stage's unless it
	// sets one.
	mc.Duration = manifests.Duration(c.Duration)
	f, err := env.GPU(mc)
	if err != nil {
		p.errorf("type", "%v", err)
	}
	c.Func = f
}

// scratchWrite reads a storage check's scratch-write params: the range to
// write when both the suite and the mode allow it, else nil and, when the
// suite asked but the mode forbids, the note saying the write was not run.
func scratchWrite(p *params, env Env, writeMetrics ...string) (*storage.Scratch, string) {
	sc := scratch(p, writeMetrics...)
	if sc == nil {
		return nil, ""
	}
	if !env.AllowDiskWrites {
		return nil, "scratch write not run: this mode never writes to disks"
	}
	return sc, ""
}
