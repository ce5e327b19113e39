//go:build cgo

// Command cure-nvml runs the GPU checks of tools/gpu through NVML and prints
// the verdicts as one JSON document on stdout. The runner (cgo-free) execs
// it: NVML needs cgo and the site's libnvidia-ml.so.1, which the busybox
// cannot carry.
//
// JSON contract (stdout, one document, also on failure to start NVML):
//
//	{
//	  "driver":   "560.28.03",          // nvmlSystemGetDriverVersion, "" if unknown
//	  "verdicts": [                      // gpu.Verdict, in a stable order
//	    {"component": "gpu/3", "check": "ecc", "status": "FAIL",
//	     "observed": "1", "expected": "<= 0", "message": "...",
//	     "measurements": [{"metric": "h2dGBps", "value": 55.4, "unit": "GB/s"}]}  // bandwidth runs only
//	  ],
//	  "devices": [                       // gpu.Identity, one per GPU that answered
//	    {"component": "gpu/3", "busId": "0000:1b:00.0", "name": "NVIDIA H200",
//	     "uuid": "GPU-...", "serial": "1654024085493", "vbios": "96.00.A5.00.1A",
//	     "boardPartNumber": "692-2G520-0282-000", "memoryTempPeakC": 47}
//	  ]
//	}
//
// status is PASS, FAIL, ERROR or SKIP; component is "gpu" for system-level
// checks and "gpu/<n>" per GPU (n = position in expect.busIDs when given,
// else the NVML index). Exit status: 0 every verdict PASS or SKIP; 1 some
// verdict FAIL or ERROR; 2 bad flags or expectations (nothing run, message
// on stderr, no JSON); 3 NVML could not be initialised (the document holds
// one ERROR verdict, check "nvml"). A load the flags ask for (-burn,
// -dcgm-load, -dcgm-level) whose program the image lacks is an ERROR
// verdict naming it, never a SKIP: idle GPUs must not pass a burn-in.
//
// Usage:
//
//	cure-nvml -expect expect.json [-burn 10m [-gpu-burn PATH] [-gpu-burn-kernel compare.ptx]] [-interval 5s]
//	cure-nvml -expect expect.json [-dcgm-load targeted_stress -dcgm-load-for 10m] [-dcgm-level 2] [-dcgmi PATH] [-nv-hostengine PATH]
//	cure-nvml -expect expect.json [-nvbandwidth PATH] [-all-reduce-perf PATH]   (expect.bandwidth set)
//	cure-nvml -sample [-interval 10s] [-count N]
//
// -sample is a stage's GPU telemetry: every interval one JSON line (a
// gpu.TelemetryLine: time, and per GPU temperature, SM clock and its base,
// power, clocks-event reasons), until -count lines, SIGTERM or a closed
// stdout; exit 0, or 3 when NVML cannot start (why on stderr).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cure-oss/cure/tools/gpu"
	"github.com/cure-oss/cure/tools/gpu/nvmlsource"
	"github.com/cure-oss/cure/tools/version"
)

type report struct {
	Driver   string         `json:"driver"`
	Verdicts []gpu.Verdict  `json:"verdicts"`
	Devices  []gpu.Identity `json:"devices,omitempty"`
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is what the flags ask for.
type config struct {
	burn             time.Duration
	burnPath         string
	burnKernel       string
	dcgmLevel        int
	dcgmPath         string
	hostEnginePath   string
	nvvsDir          string
	workDir          string
	dcgmTimeout      time.Duration
	dcgmLoad         string
	dcgmLoadFor      time.Duration
	nvbandwidthPath  string
	allReducePath    string
	bandwidthTimeout time.Duration
	duration         time.Duration
	interval         time.Duration
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cure-nvml", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	expectPath := fs.String("expect", "", "expectations as JSON (gpu.Expect field names); empty: defaults only")
	libPath := fs.String("lib", "", "path to libnvidia-ml.so.1 (default: the dynamic loader's search)")
	fs.DurationVar(&c.burn, "burn", 0, "run gpu-burn this long as the load (0: no gpu-burn)")
	fs.StringVar(&c.burnPath, "gpu-burn", "", "gpu-burn binary (default: gpu_burn, then gpu-burn, on PATH)")
	fs.StringVar(&c.burnKernel, "gpu-burn-kernel", "", "gpu-burn's compare kernel, compare.ptx (default: gpu_burn's own, compare.ptx in its working directory)")
	fs.IntVar(&c.dcgmLevel, "dcgm-level", 0, "run `dcgmi diag -r N -j` as (part of) the load; 0: off")
	fs.StringVar(&c.dcgmPath, "dcgmi", "dcgmi", "dcgmi binary")
	fs.StringVar(&c.hostEnginePath, "nv-hostengine", "nv-hostengine", "nv-hostengine binary: dcgmi diag runs against a host engine of its own")
	fs.StringVar(&c.nvvsDir, "nvvs-dir", "", "directory of DCGM's nvvs when it is not at DCGM's default (NVVS_BIN_PATH)")
	fs.StringVar(&c.workDir, "work-dir", "", "where the host engine's socket and logs go (default: the temporary directory)")
	fs.DurationVar(&c.dcgmTimeout, "dcgm-timeout", 2*time.Hour, "limit for dcgmi diag (-r 4 takes over an hour)")
	fs.StringVar(&c.dcgmLoad, "dcgm-load", "", "run this DCGM test (targeted_stress or targeted_power) as the GPU load for -dcgm-load-for")
	fs.DurationVar(&c.dcgmLoadFor, "dcgm-load-for", 0, "how long the -dcgm-load test runs")
	fs.StringVar(&c.nvbandwidthPath, "nvbandwidth", "nvbandwidth", "nvbandwidth binary, for expectations with a bandwidth run")
	fs.StringVar(&c.allReducePath, "all-reduce-perf", "all_reduce_perf", "nccl-tests' all_reduce_perf binary, for expectations with a bandwidth run")
	fs.DurationVar(&c.bandwidthTimeout, "bandwidth-timeout", time.Hour, "limit for each bandwidth program run")
	fs.DurationVar(&c.duration, "duration", 0, "without a load: how long to sample")
	fs.DurationVar(&c.interval, "interval", 5*time.Second, "sampling interval")
	sample := fs.Bool("sample", false, "print GPU telemetry as JSON lines, one every -interval, instead of checking")
	count := fs.Int("count", 0, "with -sample: how many lines (0: until SIGTERM or stdout closes)")
	printVersion := version.Flag(fs, "cure-nvml")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if printVersion(stdout) {
		return 0
	}
	if *sample {
		return runSample(*libPath, c.interval, *count, stdout, stderr)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	var exp gpu.Expect
	if *expectPath != "" {
		data, err := os.ReadFile(*expectPath)
		if err != nil {
			fmt.Fprintf(stderr, "cure-nvml: reading expectations: %v\n", err)
			return 2
		}
		dec := json.NewDecoder(bytesReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&exp); err != nil {
			fmt.Fprintf(stderr, "cure-nvml: %s: %v\n", *expectPath, err)
			return 2
		}
	}
	if err := exp.Validate(); err != nil {
		fmt.Fprintf(stderr, "cure-nvml: %s: %v\n", *expectPath, err)
		return 2
	}
	if err := c.validate(); err != nil {
		fmt.Fprintf(stderr, "cure-nvml: %v\n", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	src, err := nvmlsource.Open(*libPath)
	if err != nil {
		emit(stdout, report{Verdicts: []gpu.Verdict{{Component: "gpu", Check: "nvml", Status: gpu.Error,
			Message: err.Error() + " (the NVIDIA driver and libnvidia-ml.so.1 must be in the image)"}}})
		return 3
	}
	defer func() {
		if err := src.Close(); err != nil {
			log.Warn("cure-nvml: NVML shutdown", "err", err)
		}
	}()
	return check(ctx, src, c, exp, exec.LookPath, stdout, log)
}

func (c config) validate() error {
	switch {
	case c.dcgmLevel < 0 || c.dcgmLevel > 4:
		return fmt.Errorf("-dcgm-level %d: must be 0-4", c.dcgmLevel)
	case c.dcgmLoad != "" && !slices.Contains(gpu.DCGMLoadTests, c.dcgmLoad):
		return fmt.Errorf("-dcgm-load %q: want %s", c.dcgmLoad, strings.Join(gpu.DCGMLoadTests, " or "))
	case (c.dcgmLoad != "") != (c.dcgmLoadFor > 0):
		return errors.New("-dcgm-load and a positive -dcgm-load-for go together")
	case c.burn > 0 && c.dcgmLoad != "":
		return errors.New("-burn and -dcgm-load: one GPU load at a time")
	}
	return nil
}

// nvmlSource is what check needs of NVML: the devices and the driver's
// version (nvmlsource.Source; go-nvml's mocks behind it in tests).
type nvmlSource interface {
	gpu.Library
	DriverVersion() (string, error)
}

// check runs the loads the flags ask for while Collect samples src, and
// prints the report; its exit status is run's.
func check(ctx context.Context, src nvmlSource, c config, exp gpu.Expect, look func(string) (string, error), stdout io.Writer, log *slog.Logger) int {
	rep := report{}
	var err error
	if rep.Driver, err = src.DriverVersion(); err != nil {
		log.Warn("cure-nvml: driver version", "err", err)
	}
	l := planLoads(c, src, exp, look, log)
	opt := gpu.Options{Duration: c.duration, Interval: c.interval, Log: log}
	if len(l.runs) > 0 {
		opt.Load = l.run
	}
	obs := gpu.Collect(ctx, src, exp, opt)
	rep.Verdicts = append(gpu.Evaluate(obs, exp), l.verdicts...)
	rep.Devices = gpu.Identities(obs)
	emit(stdout, rep)
	if gpu.Failed(rep.Verdicts) {
		return 1
	}
	return 0
}

// loads are the programs that run while Collect samples, and what they
// and their absence reported.
type loads struct {
	runs     []func(context.Context) error
	verdicts []gpu.Verdict
}

func (l *loads) run(ctx context.Context) error {
	for _, r := range l.runs {
		if err := r(ctx); err != nil {
			return err
		}
	}
	return nil
}

// add runs f as a load, its verdicts kept.
func (l *loads) add(f func(context.Context) ([]gpu.Verdict, error)) {
	l.runs = append(l.runs, func(ctx context.Context) error {
		vs, err := f(ctx)
		l.verdicts = append(l.verdicts, vs...)
		return err
	})
}

// howToDeliver says where each GPU program comes from, for a missing one.
const howToDeliver = "docs/VALIDATION.md, \"Site GPU tools\""

// planLoads finds the programs the flags ask for. A load asked for whose
// program is missing is an ERROR naming it and how an image gets it: the
// GPUs would otherwise be judged idle as if they had been loaded.
func planLoads(c config, src gpu.Library, exp gpu.Expect, look func(string) (string, error), log *slog.Logger) *loads {
	l := &loads{}
	missingErr := func(check, expected, msg string) {
		l.verdicts = append(l.verdicts, gpu.Verdict{Component: "gpu", Check: check, Status: gpu.Error, Expected: expected, Message: msg})
	}
	if c.burn > 0 {
		path, err := c.burnPath, error(nil)
		if path == "" {
			path, err = lookFirst(look, "gpu_burn", "gpu-burn")
		} else {
			path, err = look(path)
		}
		if err != nil {
			missingErr(gpu.CheckGPUBurn, "gpu-burn in the image", fmt.Sprintf("the suite asks for a %s GPU load and this image has no gpu-burn (%v): build it into the driver bundle with "+
				"cure-build --build-gpu-burn SRC --cuda CUDA --into BUNDLE, or give the bundle DCGM for a DCGM load (%s)", c.burn, err, howToDeliver))
		} else {
			l.add(func(ctx context.Context) ([]gpu.Verdict, error) {
				return gpu.RunGPUBurn(ctx, gpu.OSExec, path, c.burnKernel, c.burn)
			})
		}
	}
	var dcgm *gpu.DCGM
	if c.dcgmLevel > 0 || c.dcgmLoad != "" {
		dcgmi, err := look(c.dcgmPath)
		he, herr := look(c.hostEnginePath)
		if err != nil || herr != nil {
			what := fmt.Sprintf("dcgmi diag -r %d", c.dcgmLevel)
			if c.dcgmLoad != "" {
				what = fmt.Sprintf("a %s DCGM %s load", c.dcgmLoadFor, c.dcgmLoad)
			}
			missingErr(gpu.CheckDCGMDiag, "DCGM in the image", fmt.Sprintf("the suite asks for %s, but this image lacks %s: DCGM comes with the site's driver bundle (%s)",
				what, strings.Join(missing(map[string]error{c.dcgmPath: err, c.hostEnginePath: herr}), " and "), howToDeliver))
		} else {
			dcgm = &gpu.DCGM{HostEngine: he, Dcgmi: dcgmi, NVVSDir: c.nvvsDir, WorkDir: c.workDir, Log: log}
		}
	}
	if dcgm != nil {
		targets := gpu.TargetsFor(src, exp)
		if c.dcgmLoad != "" {
			l.add(func(ctx context.Context) ([]gpu.Verdict, error) {
				return dcgm.RunLoad(ctx, c.dcgmLoad, c.dcgmLoadFor, targets)
			})
		}
		if c.dcgmLevel > 0 {
			l.add(func(ctx context.Context) ([]gpu.Verdict, error) {
				return dcgm.RunDiag(ctx, c.dcgmLevel, c.dcgmTimeout, targets)
			})
		}
	}
	if b := exp.Bandwidth; b != nil {
		lookErr := map[string]error{}
		nvb, ar := "", ""
		if len(b.NVBandwidth) > 0 {
			nvb, lookErr[c.nvbandwidthPath] = look(c.nvbandwidthPath)
		}
		if b.NCCLAllReduce {
			ar, lookErr[c.allReducePath] = look(c.allReducePath)
		}
		if need := missing(lookErr); len(need) > 0 {
			missingErr(gpu.CheckNVBandwidth, "the bandwidth programs in the image", fmt.Sprintf("this image lacks %s: nvbandwidth and nccl-tests come with the site's driver bundle (%s)",
				strings.Join(need, " and "), howToDeliver))
		} else {
			n, _ := src.DeviceCount()
			naming := gpu.NamingFor(src, exp)
			l.add(func(ctx context.Context) ([]gpu.Verdict, error) {
				return gpu.BandwidthRun(ctx, gpu.OSExec, *b, nvb, ar, n, naming, c.bandwidthTimeout)
			})
		}
	}
	return l
}

// missing names the programs whose lookup failed, sorted.
func missing(lookups map[string]error) []string {
	var out []string
	for name, err := range lookups {
		if err != nil {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func lookFirst(look func(string) (string, error), names ...string) (string, error) {
	var errs []error
	for _, n := range names {
		p, err := look(n)
		if err == nil {
			return p, nil
		}
		errs = append(errs, err)
	}
	return "", errors.Join(errs...)
}

func emit(w io.Writer, r report) {
	if r.Verdicts == nil {
		r.Verdicts = []gpu.Verdict{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(r)
}
