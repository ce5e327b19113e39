package gpucheck

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/gpu/driver"
)

// burnManifest is a driver manifest whose only tool is the gpu-burn the
// driver-bundle step built.
var burnManifest = &driver.Manifest{Version: "580.159.04", Modules: []string{"nvidia"}, Tools: []driver.Tool{{
	Name: driver.ToolGPUBurn, Version: "v1.2", Programs: map[string]string{"gpu_burn": "/usr/bin/gpu_burn"},
	Files: []driver.ToolFile{{Path: "/usr/bin/gpu_burn", SHA256: "ab"}, {Path: "/usr/share/gpu-burn/compare.ptx", SHA256: "cd"}}}}}

// TestGPULoadChoice: load: auto is DCGM's targeted stress where the
// image's driver manifest lists DCGM, gpu-burn otherwise (the bundle's,
// with its compare kernel, or one on PATH); an explicit load or
// gpu_burn path is kept.
func TestGPULoadChoice(t *testing.T) {
	soak := 22*time.Hour + 30*time.Minute
	dcgm := mustManifest(t, hgxNode(t, true))
	for _, tc := range []struct {
		name     string
		m        *driver.Manifest
		p        gpuPlan
		load     string
		args     []string
		tool     string
		toolArgs []string
	}{
		{"auto, DCGM in the bundle", dcgm, gpuPlan{Load: LoadAuto, LoadFor: soak, LoadTest: "targeted_stress"}, LoadDCGM,
			[]string{"-dcgm-load", "targeted_stress", "-dcgm-load-for", "22h30m0s"}, driver.ToolDCGM,
			[]string{"-dcgmi", "/usr/bin/dcgmi", "-nv-hostengine", "/usr/bin/nv-hostengine", "-nvvs-dir", "/usr/libexec/datacenter-gpu-manager-4"}},
		{"auto, gpu-burn in the bundle", burnManifest, gpuPlan{Load: LoadAuto, LoadFor: soak, LoadTest: "targeted_stress"}, LoadGPUBurn,
			[]string{"-burn", "22h30m0s"}, driver.ToolGPUBurn,
			[]string{"-gpu-burn", "/usr/bin/gpu_burn", "-gpu-burn-kernel", "/usr/share/gpu-burn/compare.ptx"}},
		{"auto, no bundle", nil, gpuPlan{Load: LoadAuto, LoadFor: time.Hour}, LoadGPUBurn, []string{"-burn", "1h0m0s"}, driver.ToolGPUBurn, nil},
		{"dcgm asked, power", nil, gpuPlan{Load: LoadDCGM, LoadFor: time.Hour, LoadTest: "targeted_power"}, LoadDCGM,
			[]string{"-dcgm-load", "targeted_power", "-dcgm-load-for", "1h0m0s"}, driver.ToolDCGM, nil},
		{"the suite's gpu_burn", burnManifest, gpuPlan{Load: LoadGPUBurn, LoadFor: time.Hour, BurnPath: "/opt/gpu_burn"}, LoadGPUBurn,
			[]string{"-burn", "1h0m0s", "-gpu-burn", "/opt/gpu_burn"}, "", nil},
		{"no load", dcgm, gpuPlan{}, "", nil, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			load, args, tool := chooseLoad(tc.m, tc.p)
			if load != tc.load || !slices.Equal(args, tc.args) || tool != tc.tool {
				t.Errorf("chooseLoad = %q %q %q, want %q %q %q", load, args, tool, tc.load, tc.args, tc.tool)
			}
			if tool == "" {
				return
			}
			if ta, _ := toolArgs(tc.m, []string{tool}); !slices.Equal(ta, tc.toolArgs) {
				t.Errorf("tool args %q, want %q", ta, tc.toolArgs)
			}
		})
	}
}

// TestGPULoadRun: the soak's gpu check with load: auto on an HGX node
// whose bundle has DCGM runs DCGM's targeted stress for the stage; a
// helper that reports nothing of the load, or is missing, is an ERROR.
func TestGPULoadRun(t *testing.T) {
	helper := filepath.Join(t.TempDir(), "cure-nvml")
	os.WriteFile(helper, []byte("#!/bin/false\n"), 0o755)
	const check = "    - {name: gpu-burn, type: gpu, appliesTo: \"gpu/*\", duration: 22h30m, params: {load: auto, count: 2}}\n"
	loaded := `{"driver": "580.159.04", "verdicts": [
	  {"component": "gpu", "check": "count", "status": "PASS"},
	  {"component": "gpu/0", "check": "dcgm/targeted_stress", "status": "PASS", "observed": "Pass"},
	  {"component": "gpu/1", "check": "dcgm/targeted_stress", "status": "FAIL", "observed": "Fail",
	   "message": "DCGM 4.6.0 Stress/targeted_stress: DCGM_FR_STRESS_LEVEL (error 50, triage): Max stress level of 31842.7 did not reach desired stress level of 39123.9 for GPU 1"}]}`
	idle := `{"driver": "580.159.04", "verdicts": [{"component": "gpu", "check": "count", "status": "PASS"},
	  {"component": "gpu/0", "check": "ecc", "status": "PASS"}, {"component": "gpu/1", "check": "ecc", "status": "PASS"}]}`
	for _, tc := range []struct {
		name, helper, out string
		want              map[string]checks.Status
		wantMsg           string
	}{
		{"DCGM load judged", helper, loaded, map[string]checks.Status{"gpu": checks.Pass, "gpu/0": checks.Pass, "gpu/1": checks.Fail}, "DCGM_FR_STRESS_LEVEL"},
		{"load reported nothing", helper, idle, map[string]checks.Status{"gpu": checks.Error, "gpu/0": checks.Pass, "gpu/1": checks.Pass},
			"22h30m0s dcgm GPU load and the NVML helper reported nothing of it"},
		{"no helper", filepath.Join(t.TempDir(), "cure-nvml"), "", map[string]checks.Status{"gpu": checks.Error}, "the auto GPU load cannot run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			g := Checks{Helper: tc.helper, Root: hgxNode(t, true), TmpDir: t.TempDir(), Log: quiet(),
				Exec: func(ctx context.Context, _ string, a ...string) ([]byte, []byte, int, error) {
					args = a
					if dl, ok := ctx.Deadline(); !ok || time.Until(dl) < 22*time.Hour+30*time.Minute+dcgmLoadMargin {
						t.Errorf("helper deadline %v too short for the load", dl)
					}
					return []byte(tc.out), nil, 1, nil
				}}
			f, err := g.Build(gpuCheck(t, check))
			if err != nil {
				t.Fatal(err)
			}
			vs, err := f(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]checks.Status{}
			msgs := ""
			for _, v := range vs {
				got[v.Component] = v.Status
				msgs += v.Message + "\n"
			}
			if !mapsEqual(got, tc.want) || !strings.Contains(msgs, tc.wantMsg) {
				b, _ := json.MarshalIndent(vs, "", " ")
				t.Errorf("verdicts %s, want %v with %q", b, tc.want, tc.wantMsg)
			}
			if tc.out == "" {
				return
			}
			joined := strings.Join(args, " ")
			if !strings.Contains(joined, "-dcgm-load targeted_stress -dcgm-load-for 22h30m0s") ||
				!strings.Contains(joined, "-dcgmi /usr/bin/dcgmi") || strings.Contains(joined, "-burn") {
				t.Errorf("helper args %q", args)
			}
		})
	}
}

func mapsEqual(a, b map[string]checks.Status) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
