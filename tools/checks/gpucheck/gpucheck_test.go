package gpucheck

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/suite"
	"github.com/cure-oss/cure/tools/gpu"
	"github.com/cure-oss/cure/tools/pci/pcitest"
)

// gpuSuite parses a one-check suite the way the validate phase does.
func gpuCheck(t *testing.T, body string) manifests.Check {
	t.Helper()
	s, err := manifests.ParseSuite("gpu.yaml", []byte("apiVersion: cure.dev/v1\nkind: ValidationSuite\nmetadata: {name: g}\nspec:\n  checks:\n"+body))
	if err != nil {
		t.Fatal(err)
	}
	return s.Spec.Checks[0]
}

func TestPlanGPU(t *testing.T) {
	c := gpuCheck(t, `
    - name: gpu-burn
      type: gpu
      appliesTo: "gpu/*"
      duration: 2h
      interval: 10s
      params:
        count: 8
        model: NVIDIA H100 80GB HBM3
        pciDeviceID: "0x233010DE"
        pcieGen: 5
        pcieWidth: 16
        nvlinks: 18
        powerLimitW: 700
        failOnRemapPending: true
        criticalXids: [13]
        failClocksReasons: [hw_slowdown, hw_power_brake]
        gpuBurn: true
        gpuBurnPath: /usr/bin/gpu_burn
      thresholds:
        uncorrectedECC: {max: 0}
        retiredPages: {max: 60}
        pcieReplays: {max: 80}
        temperatureC: {max: 87}
        tempMarginC: {min: 2}
        loadPowerW: {min: 300}
        components: {equals: 8}
`)
	p, err := planGPU(c)
	if err != nil {
		t.Fatal(err)
	}
	want := gpu.Expect{Count: 8, Model: "NVIDIA H100 80GB HBM3", PCIDeviceID: 0x233010DE, PCIeGen: 5, PCIeWidth: 16,
		NVLinks: 18, PowerLimitW: 700, FailOnRemapPending: true, CriticalXids: []uint64{13},
		FailClocksReasons: gpu.ReasonHWSlowdown | gpu.ReasonHWPowerBrake, MaxRetiredPages: 60, MaxPCIeReplayDelta: 80,
		MaxTemperatureC: 87, TempMarginC: 2, MinLoadPowerW: 300}
	if !reflect.DeepEqual(p.Expect, want) {
		t.Errorf("Expect = %+v\nwant     %+v", p.Expect, want)
	}
	wantArgs := []string{"-interval", "10s"}
	if !reflect.DeepEqual(p.Args, wantArgs) || p.Load != LoadGPUBurn || p.LoadFor != 2*time.Hour || p.BurnPath != "/usr/bin/gpu_burn" {
		t.Errorf("Args = %q, want %q; load %q for %s, %q", p.Args, wantArgs, p.Load, p.LoadFor, p.BurnPath)
	}
	if p.Timeout != 2*time.Hour+gpuMargin || !p.RequireGPU {
		t.Errorf("Timeout %s RequireGPU %v, want %s true", p.Timeout, p.RequireGPU, 2*time.Hour+gpuMargin)
	}

	// DCGM: its timeout is part of the limit; a plain sampling run passes -duration.
	p, err = planGPU(gpuCheck(t, "    - {name: d, type: gpu, params: {dcgmLevel: 3, dcgmTimeout: 45m}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Args, []string{"-dcgm-level", "3", "-dcgm-timeout", "45m0s"}) || p.Timeout != 45*time.Minute+gpuMargin || p.RequireGPU {
		t.Errorf("dcgm plan: args %q timeout %s require %v", p.Args, p.Timeout, p.RequireGPU)
	}
	// The NVLink fabric and HBM bars; the DCGM tools are asked of the image.
	p, err = planGPU(gpuCheck(t, "    - {name: f, type: gpu, params: {nvswitch: true, fabric: true, dcgmLevel: 2}, thresholds: {memoryTemperatureC: {max: 95}}}\n"))
	if err != nil || !p.Expect.NVSwitch || !p.Expect.Fabric || p.Expect.MaxMemoryTemperatureC != 95 || !reflect.DeepEqual(p.Tools, []string{"dcgm"}) {
		t.Errorf("fabric plan: %+v %v", p, err)
	}
	p, err = planGPU(gpuCheck(t, "    - {name: s, type: gpu, duration: 10m}\n"))
	if err != nil || !reflect.DeepEqual(p.Args, []string{"-duration", "10m0s"}) {
		t.Errorf("sampling plan: %q %v", p.Args, err)
	}
}

func TestPlanGPUErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"params: {cuont: 8}", `gpu check "g": params.cuont: unknown parameter`},
		{"thresholds: {eccErrors: {max: 0}}", "thresholds.eccErrors: unknown metric"},
		{"params: {count: eight}", "params.count: expected an integer"},
		{"params: {gpuBurn: true}", "params.load: needs the check's duration"},
		{"duration: 1h, params: {load: burn}", `params.load: "burn": want auto`},
		{"duration: 1h, params: {load: dcgm, gpuBurn: true}", "params.gpuBurn: set with load: dcgm"},
		{"duration: 1h, params: {load: dcgm, loadTest: diagnostic}", `params.loadTest: "diagnostic": want targeted_stress or targeted_power`},
		{"duration: 1h, params: {load: gpu-burn, loadTest: targeted_power}", "params.loadTest: set without a DCGM load"},
		{"duration: 1h, params: {load: dcgm, gpuBurnPath: /x}", "params.gpuBurnPath: set without a gpu-burn load"},
		{"params: {failClocksReasons: [sw_power_capp]}", `params.failClocksReasons[0]: "sw_power_capp" is not a clocks event reason`},
		{"params: {pcieWidth: 12}", "pcieWidth: 12 is not a PCIe link width"},
		{"params: {dcgmLevel: 5}", "params.dcgmLevel: 5 is not a dcgmi diag run level"},
		{"params: {pciDeviceID: H100}", `params.pciDeviceID: "H100" is not a 32-bit hex id`},
		{"thresholds: {pcieReplays: {max: 0}}", "thresholds.pcieReplays: max 0 is not supported"},
		{"thresholds: {temperatureC: {min: 30}}", "thresholds.temperatureC: expected {max: <integer>} only"},
		{"params: {count: 2, busIDs: ['18:00.0']}", "busIDs: 1 addresses but count is 2"},
	} {
		_, err := planGPU(gpuCheck(t, "    - {name: g, type: gpu, "+tc.body+"}\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.body, err, tc.want)
		}
	}
}

// gpuNode is a sysfs fixture with the given PCI devices (addr -> vendor, class).
func gpuNode(t *testing.T, devs map[string][2]string) string {
	return pcitest.Devices(t, devs)
}

func TestNVIDIAGPUs(t *testing.T) {
	root := gpuNode(t, map[string][2]string{
		"0000:18:00.0": {"0x10de", "0x030200"}, // H100 SXM: 3D controller
		"0000:2a:00.0": {"0x10de", "0x030000"}, // VGA
		"0000:05:00.0": {"0x10de", "0x068000"}, // NVSwitch: bridge, not a GPU
		"0000:00:02.0": {"0x1af4", "0x030000"}, // virtio-gpu
	})
	got, err := NVIDIAGPUs(root)
	if err != nil || !reflect.DeepEqual(got, []string{"0000:18:00.0", "0000:2a:00.0"}) {
		t.Errorf("NVIDIAGPUs = %q, %v", got, err)
	}
	if got, err := NVIDIAGPUs(t.TempDir()); err != nil || got != nil {
		t.Errorf("no PCI bus: %q, %v", got, err)
	}
}

// helperOutput is cure-nvml's document for one bad GPU of two (the JSON
// contract in tools/gpu/cmd/cure-nvml).
const helperOutput = `{
  "driver": "560.28.03",
  "verdicts": [
    {"component": "gpu", "check": "count", "status": "PASS", "observed": "2", "expected": "2"},
    {"component": "gpu/0", "check": "ecc", "status": "PASS", "observed": "0", "expected": "<= 0"},
    {"component": "gpu/0", "check": "xid", "status": "PASS", "observed": "none"},
    {"component": "gpu/1", "check": "ecc", "status": "FAIL", "observed": "3", "expected": "<= 0", "message": "volatile uncorrected ECC errors"},
    {"component": "gpu/1", "check": "xid", "status": "FAIL", "observed": "79", "expected": "no critical Xid", "message": "GPU has fallen off the bus"},
    {"component": "gpu/1", "check": "pcie_link", "status": "SKIP", "message": "link not readable"}
  ]
}
`

func TestGPUCheckRun(t *testing.T) {
	withGPU := gpuNode(t, map[string][2]string{"0000:18:00.0": {"0x10de", "0x030200"}, "0000:2a:00.0": {"0x10de", "0x030200"}})
	noGPU := gpuNode(t, map[string][2]string{"0000:00:02.0": {"0x1af4", "0x030000"}})
	helper := filepath.Join(t.TempDir(), "cure-nvml")
	if err := os.WriteFile(helper, []byte("#!/bin/false\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	type call struct {
		args   []string
		expect gpu.Expect
	}
	fake := func(calls *[]call, stdout, stderr string, code int, err error) Exec {
		return func(ctx context.Context, name string, args ...string) ([]byte, []byte, int, error) {
			if name != helper {
				t.Errorf("exec %s, want %s", name, helper)
			}
			if _, ok := ctx.Deadline(); !ok {
				t.Error("helper run without a deadline")
			}
			c := call{args: args}
			if len(args) < 2 || args[0] != "-expect" {
				t.Fatalf("args %q: want -expect FILE first", args)
			}
			data, rerr := os.ReadFile(args[1])
			if rerr != nil {
				t.Fatalf("expectation file: %v", rerr)
			}
			if jerr := json.Unmarshal(data, &c.expect); jerr != nil {
				t.Fatalf("expectation file %s: %v", data, jerr)
			}
			*calls = append(*calls, c)
			return []byte(stdout), []byte(stderr), code, err
		}
	}
	nvmlMissing := `{"driver": "", "verdicts": [{"component": "gpu", "check": "nvml", "status": "ERROR", "message": "nvml.Init: ERROR_LIBRARY_NOT_FOUND (the NVIDIA driver and libnvidia-ml.so.1 must be in the image)"}]}`

	for _, tc := range []struct {
		name, root, helper, check string
		stdout, stderr            string
		code                      int
		execErr                   error
		want                      map[string]checks.Status
		wantMsg                   string // in the first verdict's message
		wantErr                   string
		wantCalls                 int
	}{
		{name: "no GPU, no count", root: noGPU, helper: helper, check: "{name: g, type: gpu}",
			want: map[string]checks.Status{"gpu": checks.Skip}, wantMsg: "no NVIDIA GPU on this node"},
		{name: "no GPU, count expected", root: noGPU, helper: helper, check: "{name: g, type: gpu, params: {count: 8}}",
			want: map[string]checks.Status{"gpu": checks.Fail}, wantMsg: "no NVIDIA GPU on this node's PCI bus"},
		{name: "helper absent", root: withGPU, helper: filepath.Join(t.TempDir(), "cure-nvml"), check: "{name: g, type: gpu}",
			want: map[string]checks.Status{"gpu": checks.Skip}, wantMsg: "cure-nvml not in this image"},
		{name: "verdicts", root: withGPU, helper: helper, check: "{name: g, type: gpu, params: {count: 2}}",
			stdout: helperOutput, code: 1, wantCalls: 1,
			want: map[string]checks.Status{"gpu": checks.Pass, "gpu/0": checks.Pass, "gpu/1": checks.Fail}, wantMsg: "driver 560.28.03"},
		{name: "NVML missing", root: withGPU, helper: helper, check: "{name: g, type: gpu}",
			stdout: nvmlMissing, code: 3, wantCalls: 1,
			want: map[string]checks.Status{"gpu": checks.Error}, wantMsg: "2 NVIDIA GPU(s) on the bus but NVML is unavailable"},
		{name: "helper without cgo", root: withGPU, helper: helper, check: "{name: g, type: gpu}",
			stderr: "cure-nvml: built without cgo; NVML is unavailable", code: 3, wantCalls: 1,
			want: map[string]checks.Status{"gpu": checks.Error}, wantMsg: "built without cgo"},
		{name: "bad input", root: withGPU, helper: helper, check: "{name: g, type: gpu}",
			stderr: "cure-nvml: gpu expectations: count: -1 is negative", code: 2, wantCalls: 1,
			want: map[string]checks.Status{"gpu": checks.Error}, wantMsg: "refused its input"},
		{name: "garbage", root: withGPU, helper: helper, check: "{name: g, type: gpu}",
			stdout: "Segmentation fault", code: 1, wantCalls: 1, wantErr: "expected a JSON document"},
		{name: "killed", root: withGPU, helper: helper, check: "{name: g, type: gpu}",
			execErr: context.DeadlineExceeded, code: -1, wantCalls: 1, wantErr: "deadline exceeded"},
		{name: "exit 1 with no failure", root: withGPU, helper: helper, check: "{name: g, type: gpu}",
			stdout: `{"driver": "x", "verdicts": [{"component": "gpu", "check": "count", "status": "PASS"}]}`, code: 1, wantCalls: 1,
			want: map[string]checks.Status{"gpu": checks.Error}, wantMsg: "passed: count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls []call
			g := Checks{Helper: tc.helper, Root: tc.root, TmpDir: t.TempDir(), Log: quiet(),
				Exec: fake(&calls, tc.stdout, tc.stderr, tc.code, tc.execErr)}
			f, err := g.Build(gpuCheck(t, "    - "+tc.check+"\n"))
			if err != nil {
				t.Fatal(err)
			}
			vs, err := f(context.Background())
			if len(calls) != tc.wantCalls {
				t.Errorf("%d helper runs, want %d", len(calls), tc.wantCalls)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]checks.Status{}
			for _, v := range vs {
				if old, seen := got[v.Component]; !seen || v.Status.Worse(old) {
					got[v.Component] = v.Status
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("verdicts %v, want %v", vs, tc.want)
			}
			all := ""
			for _, v := range vs {
				all += v.Message + "\n"
			}
			if !strings.Contains(all, tc.wantMsg) {
				t.Errorf("messages %q, want %q", all, tc.wantMsg)
			}
			if len(calls) == 1 && tc.name == "verdicts" && calls[0].expect.Count != 2 {
				t.Errorf("helper was told %+v, want count 2", calls[0].expect)
			}
		})
	}
}

// TestH200Identity: the helper's output from a real H200 run becomes one
// verdict per GPU that names the board by its NVML serial, UUID, VBIOS and
// board part number (an identity evidence block the report reads).
func TestH200Identity(t *testing.T) {
	out, err := os.ReadFile("testdata/cure-nvml-h200-load.json")
	if err != nil {
		t.Fatal(err)
	}
	root := gpuNode(t, map[string][2]string{"0000:00:06.0": {"0x10de", "0x030200"}})
	helper := filepath.Join(t.TempDir(), "cure-nvml")
	os.WriteFile(helper, []byte("#!/bin/false\n"), 0o755)
	g := Checks{Helper: helper, Root: root, TmpDir: t.TempDir(), Log: quiet(),
		Exec: func(context.Context, string, ...string) ([]byte, []byte, int, error) { return out, nil, 0, nil }}
	f, err := g.Build(gpuCheck(t, "    - {name: g, type: gpu, params: {count: 1, pcieGen: 5, pcieWidth: 16}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	vs, err := f(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var g0 *checks.Verdict
	for i := range vs {
		if vs[i].Component == "gpu/0" {
			g0 = &vs[i]
		}
	}
	if g0 == nil || g0.Status != checks.Skip { // NVLink and the model are not checked on this passthrough GPU
		t.Fatalf("verdicts %+v", vs)
	}
	text, blocks := curev1.SplitEvidence(g0.Message)
	if len(blocks) != 1 || blocks[0].Title != curev1.EvidenceIdentity || !strings.Contains(text, "passed: present") {
		t.Fatalf("message %q", g0.Message)
	}
	id := blocks[0].Identity()
	for k, want := range map[string]string{"serial": "1654024085493", "uuid": "GPU-476c6bd9-bacc-d199-245c-8658bfe3126e",
		"vbios": "96.00.A5.00.1A", "board part number": "692-2G520-0282-000", "pci": "0000:00:06.0", "memory temp peak": "47 C", "name": "NVIDIA H200"} {
		if id[k] != want {
			t.Errorf("identity %s = %q, want %q", k, id[k], want)
		}
	}
}

// TestFoldVerdicts: one verdict per GPU, the worst sub-check's readings
// kept, every sub-check accounted for in the message.
func TestFoldVerdicts(t *testing.T) {
	var rep struct {
		Driver   string
		Verdicts []gpu.Verdict
	}
	if err := json.Unmarshal([]byte(helperOutput), &rep); err != nil {
		t.Fatal(err)
	}
	vs := foldVerdicts(rep.Verdicts, rep.Driver)
	if len(vs) != 3 {
		t.Fatalf("%d verdicts, want 3: %v", len(vs), vs)
	}
	bad := vs[2]
	if bad.Component != "gpu/1" || bad.Status != checks.Fail || bad.Observed != "ecc: 3; xid: 79" || bad.Expected != "ecc: <= 0; xid: no critical Xid" {
		t.Errorf("gpu/1 = %+v", bad)
	}
	for _, s := range []string{"ecc FAIL", "xid FAIL", "GPU has fallen off the bus", "pcie_link SKIP"} {
		if !strings.Contains(bad.Message, s) {
			t.Errorf("gpu/1 message %q lacks %q", bad.Message, s)
		}
	}
	if vs[1].Status != checks.Pass || vs[1].Message != "passed: ecc, xid" || vs[1].Observed != "" {
		t.Errorf("gpu/0 = %+v", vs[1])
	}
}

// TestGPUInSuite runs a gpu check through the suite engine as the validate
// phase does: verdicts carry the suite's check name and appliesTo keeps
// the per-GPU and system-level verdicts.
func TestGPUInSuite(t *testing.T) {
	s, err := manifests.ParseSuite("s.yaml", []byte(`apiVersion: cure.dev/v1
kind: ValidationSuite
metadata: {name: s}
spec:
  checks:
    - name: gpu-health
      type: gpu
      appliesTo: "gpu/*"
      params: {count: 2}
      thresholds: {components: {equals: 2}}
`))
	if err != nil {
		t.Fatal(err)
	}
	root := gpuNode(t, map[string][2]string{"0000:18:00.0": {"0x10de", "0x030200"}, "0000:2a:00.0": {"0x10de", "0x030200"}})
	helper := filepath.Join(t.TempDir(), "cure-nvml")
	os.WriteFile(helper, nil, 0o755)
	g := Checks{Helper: helper, Root: root, TmpDir: t.TempDir(), Log: quiet(),
		Exec: func(ctx context.Context, name string, args ...string) ([]byte, []byte, int, error) {
			return []byte(helperOutput), nil, 1, nil
		}}
	vs, err := suite.Run(context.Background(), s, suite.Env{Root: root, GPU: g.Build}, checks.Options{Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]checks.Status{}
	for _, v := range vs {
		if v.Check != "gpu-health" {
			t.Errorf("verdict %v: check %q, want gpu-health", v, v.Check)
		}
		got[v.Component] = v.Status
	}
	// "gpu" holds both the helper's count PASS and the components bar (2 of 2).
	if want := map[string]checks.Status{"gpu": checks.Pass, "gpu/0": checks.Pass, "gpu/1": checks.Fail}; !reflect.DeepEqual(got, want) {
		t.Errorf("verdicts %v, want %v", vs, want)
	}

	// A misspelt parameter is a build error naming the check.
	s.Spec.Checks[0].Params["nvlink"] = int64(18)
	if _, err := suite.Build(s, suite.Env{GPU: g.Build}); err == nil || !strings.Contains(err.Error(), `gpu check "gpu-health": params.nvlink: unknown parameter`) {
		t.Errorf("Build with a misspelt param: %v", err)
	}
}

// TestShippedSuitesGPU builds every gpu check of the shipped suites with
// the real builder (suite.Build alone, with Env.GPU nil, accepts any
// params): their params and thresholds must be ones cure-nvml understands.
func TestShippedSuitesGPU(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	files, _ := filepath.Glob(filepath.Join(filepath.Dir(file), "../../../manifests/examples/suites/*.yaml"))
	n := 0
	for _, f := range files {
		doc, err := manifests.LoadFile(f)
		if err != nil || doc.Suite == nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, c := range doc.Suite.Spec.Checks {
			if c.Type != manifests.CheckGPU && c.Type != manifests.CheckGPUBandwidth && c.Type != manifests.CheckNCCLAllReduce {
				continue
			}
			n++
			// As suite.Build hands it over: a check in a stage runs
			// the stage's duration unless it sets its own.
			c.Duration = manifests.Duration(suite.CheckDuration(&doc.Suite.Spec, c))
			if _, err := (Checks{}).Build(c); err != nil {
				t.Errorf("%s: %v", filepath.Base(f), err)
			}
		}
	}
	if n == 0 {
		t.Error("no gpu check in any shipped suite")
	}
}

// TestOSExec runs a real process: the exit status comes back as code,
// not as an error, and stdout/stderr are kept apart.
func TestOSExec(t *testing.T) {
	script := filepath.Join(t.TempDir(), "helper.sh")
	os.WriteFile(script, []byte("#!/bin/sh\necho '{\"verdicts\": []}'\necho \"args $*\" >&2\nexit 3\n"), 0o755)
	out, errOut, code, err := osExec(context.Background(), script, "-expect", "x.json")
	if err != nil || code != 3 || strings.TrimSpace(string(out)) != `{"verdicts": []}` || strings.TrimSpace(string(errOut)) != "args -expect x.json" {
		t.Errorf("osExec = %q, %q, %d, %v", out, errOut, code, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	os.WriteFile(script, []byte("#!/bin/sh\nexec sleep 10\n"), 0o755)
	if _, _, _, err := osExec(ctx, script); err == nil {
		t.Error("a helper past its deadline: no error")
	}
}

// tail cuts at a byte count: the message must still be UTF-8.
func TestTailKeepsUTF8(t *testing.T) {
	out := []byte(strings.Repeat("é", 300) + "\xff end")
	if s := tail(out); !utf8.ValidString(s) || !strings.HasSuffix(s, "\uFFFD end") {
		t.Errorf("tail = %q", s)
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
