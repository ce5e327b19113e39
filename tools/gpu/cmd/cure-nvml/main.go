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
// one ERROR verdict, check "nvml").
//
// Usage:
//
//	cure-nvml -expect expect.json [-burn 10m] [-dcgm-level 2 [-dcgmi PATH] [-nv-hostengine PATH]] [-interval 5s]
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
)

type report struct {
	Driver   string         `json:"driver"`
	Verdicts []gpu.Verdict  `json:"verdicts"`
	Devices  []gpu.Identity `json:"devices,omitempty"`
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cure-nvml", flag.ContinueOnError)
	fs.SetOutput(stderr)
	expectPath := fs.String("expect", "", "expectations as JSON (gpu.Expect field names); empty: defaults only")
	libPath := fs.String("lib", "", "path to libnvidia-ml.so.1 (default: the dynamic loader's search)")
	burn := fs.Duration("burn", 0, "run gpu-burn this long as the load (0: no gpu-burn)")
	burnPath := fs.String("gpu-burn", "", "gpu-burn binary (default: gpu_burn, then gpu-burn, on PATH)")
	dcgmLevel := fs.Int("dcgm-level", 0, "run `dcgmi diag -r N -j` as (part of) the load; 0: off")
	dcgmPath := fs.String("dcgmi", "dcgmi", "dcgmi binary")
	hostEnginePath := fs.String("nv-hostengine", "nv-hostengine", "nv-hostengine binary: dcgmi diag runs against a host engine of its own")
	nvvsDir := fs.String("nvvs-dir", "", "directory of DCGM's nvvs when it is not at DCGM's default (NVVS_BIN_PATH)")
	workDir := fs.String("work-dir", "", "where the host engine's socket and logs go (default: the temporary directory)")
	dcgmTimeout := fs.Duration("dcgm-timeout", 2*time.Hour, "limit for dcgmi diag (-r 4 takes over an hour)")
	nvbandwidthPath := fs.String("nvbandwidth", "nvbandwidth", "nvbandwidth binary, for expectations with a bandwidth run")
	allReducePath := fs.String("all-reduce-perf", "all_reduce_perf", "nccl-tests' all_reduce_perf binary, for expectations with a bandwidth run")
	bandwidthTimeout := fs.Duration("bandwidth-timeout", time.Hour, "limit for each bandwidth program run")
	duration := fs.Duration("duration", 0, "without a load: how long to sample")
	interval := fs.Duration("interval", 5*time.Second, "sampling interval")
	sample := fs.Bool("sample", false, "print GPU telemetry as JSON lines, one every -interval, instead of checking")
	count := fs.Int("count", 0, "with -sample: how many lines (0: until SIGTERM or stdout closes)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *sample {
		return runSample(*libPath, *interval, *count, stdout, stderr)
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
	if *dcgmLevel < 0 || *dcgmLevel > 4 {
		fmt.Fprintf(stderr, "cure-nvml: -dcgm-level %d: must be 0-4\n", *dcgmLevel)
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
	rep := report{}
	if rep.Driver, err = src.DriverVersion(); err != nil {
		log.Warn("cure-nvml: driver version", "err", err)
	}

	var extra []gpu.Verdict
	var loads []func(context.Context) error
	if *burn > 0 {
		path := *burnPath
		if path == "" {
			path = lookFirst("gpu_burn", "gpu-burn")
		}
		if path == "" {
			extra = append(extra, gpu.Verdict{Component: "gpu", Check: gpu.CheckGPUBurn, Status: gpu.Skip, Message: "gpu-burn is not in this image"})
		} else {
			loads = append(loads, func(ctx context.Context) error {
				vs, err := gpu.RunGPUBurn(ctx, gpu.OSExec, path, "", *burn)
				extra = append(extra, vs...)
				return err
			})
		}
	}
	if *dcgmLevel > 0 {
		dcgmi, err := exec.LookPath(*dcgmPath)
		he, herr := exec.LookPath(*hostEnginePath)
		switch {
		case err != nil || herr != nil:
			extra = append(extra, gpu.Verdict{Component: "gpu", Check: gpu.CheckDCGMDiag, Status: gpu.Error, Expected: "DCGM in the image",
				Message: fmt.Sprintf("the suite asks for dcgmi diag -r %d, but this image lacks %s: DCGM comes with the site's driver bundle (docs/VALIDATION.md)",
					*dcgmLevel, strings.Join(missing(map[string]error{*dcgmPath: err, *hostEnginePath: herr}), " and "))})
		default:
			d := gpu.DCGM{HostEngine: he, Dcgmi: dcgmi, NVVSDir: *nvvsDir, WorkDir: *workDir, Log: log}
			targets := gpu.TargetsFor(src, exp)
			loads = append(loads, func(ctx context.Context) error {
				vs, err := d.RunDiag(ctx, *dcgmLevel, *dcgmTimeout, targets)
				extra = append(extra, vs...)
				return err
			})
		}
	}
	if b := exp.Bandwidth; b != nil {
		var need []string
		var lookErr = map[string]error{}
		nvb, ar := "", ""
		if len(b.NVBandwidth) > 0 {
			nvb, lookErr[*nvbandwidthPath] = exec.LookPath(*nvbandwidthPath)
		}
		if b.NCCLAllReduce {
			ar, lookErr[*allReducePath] = exec.LookPath(*allReducePath)
		}
		need = missing(lookErr)
		if len(need) > 0 {
			extra = append(extra, gpu.Verdict{Component: "gpu", Check: gpu.CheckNVBandwidth, Status: gpu.Error, Expected: "the bandwidth programs in the image",
				Message: fmt.Sprintf("this image lacks %s: nvbandwidth and nccl-tests come with the site's driver bundle (docs/VALIDATION.md)", strings.Join(need, " and "))})
		} else {
			n, _ := src.DeviceCount()
			naming := gpu.NamingFor(src, exp)
			loads = append(loads, func(ctx context.Context) error {
				vs, err := gpu.BandwidthRun(ctx, gpu.OSExec, *b, nvb, ar, n, naming, *bandwidthTimeout)
				extra = append(extra, vs...)
				return err
			})
		}
	}
	opt := gpu.Options{Duration: *duration, Interval: *interval, Log: log}
	if len(loads) > 0 {
		opt.Load = func(ctx context.Context) error {
			for _, l := range loads {
				if err := l(ctx); err != nil {
					return err
				}
			}
			return nil
		}
	}
	obs := gpu.Collect(ctx, src, exp, opt)
	rep.Verdicts = append(gpu.Evaluate(obs, exp), extra...)
	rep.Devices = gpu.Identities(obs)
	emit(stdout, rep)
	if gpu.Failed(rep.Verdicts) {
		return 1
	}
	return 0
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

func lookFirst(names ...string) string {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

func emit(w io.Writer, r report) {
	if r.Verdicts == nil {
		r.Verdicts = []gpu.Verdict{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(r)
}
