//go:build cgo

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/cure-oss/cure/tools/gpu"
	"github.com/cure-oss/cure/tools/gpu/nvmlsource"
)

// unsupported sets every NVML call of v (a go-nvml mock, its embedded
// mocks included) that the mock leaves unset to answer
// ERROR_NOT_SUPPORTED, as a GPU without the feature would, instead of
// panicking.
func unsupported(v reflect.Value) {
	ret := reflect.TypeOf(nvml.ERROR_NOT_SUPPORTED)
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		switch {
		case sf.Anonymous && f.Kind() == reflect.Struct:
			unsupported(f)
		case f.Kind() == reflect.Func && f.IsNil() && strings.HasSuffix(sf.Name, "Func") && f.CanSet():
			ft := f.Type()
			if ft.NumOut() == 0 || ft.Out(ft.NumOut()-1) != ret {
				continue
			}
			f.Set(reflect.MakeFunc(ft, func([]reflect.Value) []reflect.Value {
				out := make([]reflect.Value, ft.NumOut())
				for j := range out {
					out[j] = reflect.Zero(ft.Out(j))
				}
				out[len(out)-1] = reflect.ValueOf(nvml.ERROR_NOT_SUPPORTED)
				return out
			}))
		}
	}
}

// h200 is go-nvml's DGX H200 mock: its identity data, the rest Not
// Supported.
func h200() *nvmlsource.Source {
	s := dgxh200.New()
	for _, d := range s.Devices {
		sd := d.(*server.Device)
		bus := sd.PciBusID
		sd.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			for i, c := range "0000" + bus {
				p.BusId[i] = int8(c)
			}
			return p, nvml.SUCCESS
		}
		unsupported(reflect.ValueOf(sd).Elem())
	}
	unsupported(reflect.ValueOf(s).Elem())
	return nvmlsource.New(s)
}

// checkReport runs check on the mock and returns its exit status and
// report.
func checkReport(t *testing.T, c config, look func(string) (string, error)) (int, report) {
	t.Helper()
	var out bytes.Buffer
	c.interval = 10 * time.Millisecond
	code := check(context.Background(), h200(), c, gpu.Expect{Count: 8}, look, &out, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var r report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("report: %v\n%s", err, out.String())
	}
	return code, r
}

func verdict(r report, comp, check string) (gpu.Verdict, bool) {
	for _, v := range r.Verdicts {
		if v.Component == comp && v.Check == check {
			return v, true
		}
	}
	return gpu.Verdict{}, false
}

// TestGPUBurnInBundle (the cure-nvml half; builder/driverbundle has the
// build half): on an 8-GPU H200 (go-nvml's mock), a GPU load the suite
// asks for whose program the image lacks is an ERROR naming the program
// and how to deliver it, never a SKIP; with the bundle's gpu_burn it runs,
// given its compare kernel, and judges each GPU.
func TestGPUBurnInBundle(t *testing.T) {
	none := func(name string) (string, error) { return "", &exec.Error{Name: name, Err: exec.ErrNotFound} }

	t.Run("no gpu-burn", func(t *testing.T) {
		code, r := checkReport(t, config{burn: 22*time.Hour + 30*time.Minute}, none)
		v, ok := verdict(r, "gpu", gpu.CheckGPUBurn)
		if code != 1 || !ok || v.Status != gpu.Error {
			t.Fatalf("exit %d, gpu_burn verdict %+v", code, v)
		}
		for _, want := range []string{"22h30m0s GPU load", "no gpu-burn", `"gpu_burn": executable file not found`,
			"cure-build --build-gpu-burn", "DCGM", "docs/VALIDATION.md"} {
			if !strings.Contains(v.Message, want) {
				t.Errorf("message %q lacks %q", v.Message, want)
			}
		}
		if len(r.Devices) != 8 {
			t.Errorf("%d devices read from the mock, want 8", len(r.Devices))
		}
	})

	t.Run("no DCGM for a DCGM load", func(t *testing.T) {
		code, r := checkReport(t, config{dcgmLoad: "targeted_stress", dcgmLoadFor: time.Hour, dcgmPath: "dcgmi", hostEnginePath: "nv-hostengine"}, none)
		v, ok := verdict(r, "gpu", gpu.CheckDCGMDiag)
		if code != 1 || !ok || v.Status != gpu.Error || !strings.Contains(v.Message, "a 1h0m0s DCGM targeted_stress load") ||
			!strings.Contains(v.Message, "lacks dcgmi and nv-hostengine") {
			t.Fatalf("exit %d, verdict %+v", code, v)
		}
	})

	t.Run("bundle's gpu_burn runs", func(t *testing.T) {
		fixture, _ := filepath.Abs("../../testdata/gpu-burn-faulty.txt")
		dir := t.TempDir()
		prog, argsFile := filepath.Join(dir, "gpu_burn"), filepath.Join(dir, "args")
		script := "#!/bin/sh\necho \"$@\" > " + argsFile + "\ncat " + fixture + "\n"
		if err := os.WriteFile(prog, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		c := config{burn: 2 * time.Second, burnPath: prog, burnKernel: "/usr/share/gpu-burn/compare.ptx"}
		code, r := checkReport(t, c, exec.LookPath)
		args, _ := os.ReadFile(argsFile)
		if strings.TrimSpace(string(args)) != "-c /usr/share/gpu-burn/compare.ptx 2" {
			t.Errorf("gpu_burn ran with %q", args)
		}
		if v, ok := verdict(r, "gpu/2", gpu.CheckGPUBurn); code != 1 || !ok || v.Status != gpu.Fail {
			t.Errorf("exit %d, gpu/2 %+v", code, v)
		}
		if v, ok := verdict(r, "gpu/0", gpu.CheckGPUBurn); !ok || v.Status != gpu.Pass {
			t.Errorf("gpu/0 %+v", v)
		}
	})

	t.Run("flags", func(t *testing.T) {
		var out, errb bytes.Buffer
		for _, args := range [][]string{{"-dcgm-load", "diagnostic", "-dcgm-load-for", "1h"}, {"-dcgm-load", "targeted_power"},
			{"-burn", "1h", "-dcgm-load", "targeted_power", "-dcgm-load-for", "1h"}} {
			if code := run(args, &out, &errb); code != 2 {
				t.Errorf("%q: exit %d", args, code)
			}
		}
	})
}
