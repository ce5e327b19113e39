package gpucheck

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/gpu"
	"github.com/cure-oss/cure/tools/gpu/driver"
	"github.com/cure-oss/cure/tools/kmsg"
)

func TestPlanBandwidth(t *testing.T) {
	p, err := planBandwidth(gpuCheck(t, `
    - name: nvlink-bandwidth
      type: gpu-bandwidth
      params: {timeout: 20m}
      thresholds:
        h2dGBps: {min: 40}
        d2dWriteGBps: {min: 330}
        components: {min: 36}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := &gpu.Bandwidth{NVBandwidth: defaultTestcases, Min: map[string]float64{"h2dGBps": 40, "d2dWriteGBps": 330}}
	if !reflect.DeepEqual(p.Expect.Bandwidth, want) || !slices.Equal(p.Tools, []string{driver.ToolNVBandwidth}) ||
		!slices.Equal(p.Args, []string{"-bandwidth-timeout", "20m0s"}) || p.Timeout != 20*time.Minute+gpuMargin {
		t.Errorf("plan %+v bandwidth %+v", p, p.Expect.Bandwidth)
	}
	p, err = planBandwidth(gpuCheck(t, `
    - name: nccl
      type: nccl-allreduce
      params: {pairs: true, minBytes: 64MiB, maxBytes: 4294967296}
      thresholds:
        allReduceBusGBps: {min: 400}
        allReducePairBusGBps: {min: 300}
`))
	if err != nil {
		t.Fatal(err)
	}
	b := p.Expect.Bandwidth
	if !b.NCCLAllReduce || !b.NCCLPairs || b.NCCLMinBytes != 64<<20 || b.NCCLMaxBytes != 4<<30 || b.Min[gpu.MetricAllReducePairBusBW] != 300 ||
		!slices.Equal(p.Tools, []string{driver.ToolNCCLTests}) {
		t.Errorf("nccl plan %+v", b)
	}
	for _, tc := range []struct{ body, want string }{
		{"{name: g, type: gpu-bandwidth, thresholds: {allReduceBusGBps: {min: 1}}}", "thresholds.allReduceBusGBps: not a metric this check measures"},
		{"{name: g, type: gpu-bandwidth, params: {testcases: [host_to_device_memcpy_ce]}, thresholds: {d2dWriteGBps: {min: 1}}}", "thresholds.d2dWriteGBps: not a metric"},
		{"{name: g, type: gpu-bandwidth, params: {testcases: [all_to_host_memcpy_sm]}}", `nvbandwidth testcase "all_to_host_memcpy_sm" is not one CURE judges`},
		{"{name: g, type: gpu-bandwidth, thresholds: {h2dGBps: {max: 40}}}", "thresholds.h2dGBps: expected {min: <GB/s>} only"},
		{"{name: g, type: nccl-allreduce, params: {pairs: yes}}", "params.pairs: expected true or false"},
		{"{name: g, type: nccl-allreduce, params: {testcases: [x]}}", "params.testcases: unknown parameter for an nccl-allreduce check"},
		{"{name: g, type: nccl-allreduce, params: {maxBytes: lots}}", `params.maxBytes: "lots" is not a size`},
		{"{name: g, type: nccl-allreduce, thresholds: {allReducePairBusGBps: {min: 1}}}", "thresholds.allReducePairBusGBps: not a metric"},
	} {
		_, err := planBandwidth(gpuCheck(t, "    - "+tc.body+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.body, err, tc.want)
		}
	}
}

// hgxNode is an HGX board's sysfs and procfs: two GPUs and two NVSwitches
// on the bus, the fabric manager running, the driver bundle's manifest
// with the site's GPU tools.
func hgxNode(t *testing.T, fm bool) string {
	root := gpuNode(t, map[string][2]string{"0000:18:00.0": {"0x10de", "0x030200"}, "0000:2a:00.0": {"0x10de", "0x030200"},
		"0000:05:00.0": {"0x10de", "0x068000"}, "0000:06:00.0": {"0x10de", "0x068000"}})
	if fm {
		if err := os.MkdirAll(filepath.Join(root, "proc/4242"), 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(root, "proc/4242/comm"), []byte("nv-fabricmanager\n"), 0o644)
	}
	m := driver.Manifest{Version: "570.124.06", Modules: []string{"nvidia"}, Tools: []driver.Tool{
		{Name: driver.ToolDCGM, Version: "4.6.0", Programs: map[string]string{"nv-hostengine": "/usr/bin/nv-hostengine", "dcgmi": "/usr/bin/dcgmi",
			"nvvs": "/usr/libexec/datacenter-gpu-manager-4/nvvs"}},
		{Name: driver.ToolNVBandwidth, Version: "v0.8", Programs: map[string]string{"nvbandwidth": "/usr/bin/nvbandwidth"}},
	}}
	b, _ := json.Marshal(m)
	os.MkdirAll(filepath.Join(root, "etc/cure"), 0o755)
	if err := os.WriteFile(filepath.Join(root, driver.ManifestPath), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestHGXBandwidthCheck runs a gpu-bandwidth check on an HGX board: the
// helper is told the SKU's topology and where the site's tools are; its
// measurements reach the verdicts; the fabric manager's state and the
// kernel log's SXids join the node-wide verdict, which is named after the
// check type so appliesTo keeps it.
func TestHGXBandwidthCheck(t *testing.T) {
	helper := filepath.Join(t.TempDir(), "cure-nvml")
	os.WriteFile(helper, []byte("#!/bin/false\n"), 0o755)
	out := `{"driver": "570.124.06", "verdicts": [
	  {"component": "gpu", "check": "count", "status": "PASS", "observed": "2", "expected": "2"},
	  {"component": "gpu/0", "check": "nvlink", "status": "PASS", "observed": "18/18 up, Hopper error counters"},
	  {"component": "gpu/0", "check": "nvbandwidth", "status": "PASS", "measurements": [{"metric": "h2dGBps", "value": 55.4, "unit": "GB/s"}]},
	  {"component": "gpu/1", "check": "nvbandwidth", "status": "PASS", "measurements": [{"metric": "h2dGBps", "value": 55.1, "unit": "GB/s"}]},
	  {"component": "gpu/0-1", "check": "nvbandwidth", "status": "FAIL", "observed": "d2dWriteGBps=151.3", "expected": "d2dWriteGBps>=330",
	   "message": "nvbandwidth v0.8: d2dWriteGBps 151.3 GB/s < 330 GB/s", "measurements": [{"metric": "d2dWriteGBps", "value": 151.3, "unit": "GB/s"}]}
	]}`
	for _, tc := range []struct {
		name    string
		fm      bool
		sxid    []string
		wantSys checks.Status
		wantMsg string
	}{
		{"healthy fabric", true, nil, checks.Pass, "site tools: nvbandwidth v0.8"},
		{"fabric manager down", false, nil, checks.Fail, "nv-fabricmanager is not running"},
		{"fatal SXid", true, []string{"nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 24007, Fatal, Link 44 sourcetrack TCEN0 crumbstore ECC DBE Error (First)"},
			checks.Fail, "NVSwitch 0000:06:00.0 SXid 24007 link 44"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			var exp gpu.Expect
			g := Checks{Helper: helper, Root: hgxNode(t, tc.fm), TmpDir: t.TempDir(), Log: quiet(),
				Topology: TopologyOf(&manifests.Hardware{GPUs: &manifests.GPUSpec{Count: 2, Addresses: []string{"0000:18:00.0", "0000:2a:00.0"},
					NVLinks: 18, Fabric: true}, NVSwitches: &manifests.NVSwitchSpec{Count: 2}}),
				KernelLog: func() ([]kmsg.Record, error) {
					var recs []kmsg.Record
					for _, m := range tc.sxid {
						recs = append(recs, kmsg.Record{Message: m})
					}
					return recs, nil
				},
				Exec: func(_ context.Context, _ string, a ...string) ([]byte, []byte, int, error) {
					args = a
					data, _ := os.ReadFile(a[1])
					if err := json.Unmarshal(data, &exp); err != nil {
						t.Fatal(err)
					}
					return []byte(out), nil, 1, nil
				}}
			f, err := g.Build(gpuCheck(t, "    - {name: bw, type: gpu-bandwidth, appliesTo: \"gpu/*\", thresholds: {d2dWriteGBps: {min: 330}}}\n"))
			if err != nil {
				t.Fatal(err)
			}
			vs, err := f(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if exp.Count != 2 || len(exp.BusIDs) != 2 || exp.NVLinks != 18 || !exp.NVSwitch || !exp.Fabric || exp.Bandwidth == nil {
				t.Errorf("helper told %+v", exp)
			}
			if i := slices.Index(args, "-nvbandwidth"); i < 0 || args[i+1] != "/usr/bin/nvbandwidth" || slices.Contains(args, "-dcgmi") {
				t.Errorf("helper args %q", args)
			}
			by := map[string]checks.Verdict{}
			for _, v := range vs {
				by[v.Component] = v
			}
			sys, ok := by[manifests.CheckGPUBandwidth]
			if !ok || sys.Status != tc.wantSys || !strings.Contains(sys.Message, tc.wantMsg) {
				t.Errorf("node verdict %+v", sys)
			}
			pair := by["gpu/0-1"]
			if pair.Status != checks.Fail || len(pair.Measurements) != 1 || pair.Measurements[0] != (checks.Measurement{Metric: "d2dWriteGBps", Value: 151.3, Unit: "GB/s"}) {
				t.Errorf("pair verdict %+v", pair)
			}
			if m := by["gpu/1"].Measurements; len(m) != 1 || m[0].Value != 55.1 {
				t.Errorf("gpu/1 measurements %+v", m)
			}
		})
	}
	// The DCGM tools and their nvvs reach the helper of a check with a
	// DCGM level.
	a, versions := toolArgs(mustManifest(t, hgxNode(t, true)), []string{driver.ToolDCGM})
	if !slices.Equal(a, []string{"-dcgmi", "/usr/bin/dcgmi", "-nv-hostengine", "/usr/bin/nv-hostengine", "-nvvs-dir", "/usr/libexec/datacenter-gpu-manager-4"}) ||
		!slices.Equal(versions, []string{"dcgm 4.6.0"}) {
		t.Errorf("dcgm args %q %q", a, versions)
	}
}

func mustManifest(t *testing.T, root string) *driver.Manifest {
	m, err := driver.ReadManifest(root)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSKUGPUsMissing: a node whose SKU declares 8 GPUs and whose bus has
// none fails a bandwidth check on the check type's component (appliesTo
// keeps it), rather than skipping it.
func TestSKUGPUsMissing(t *testing.T) {
	root := gpuNode(t, map[string][2]string{"0000:00:02.0": {"0x1af4", "0x030000"}})
	g := Checks{Helper: "/nonexistent", Root: root, Log: quiet(),
		Topology: TopologyOf(&manifests.Hardware{GPUs: &manifests.GPUSpec{Count: 8, NVLinks: 18}})}
	f, err := g.Build(gpuCheck(t, "    - {name: nccl, type: nccl-allreduce}\n"))
	if err != nil {
		t.Fatal(err)
	}
	vs, err := f(context.Background())
	if err != nil || len(vs) != 1 || vs[0].Component != manifests.CheckNCCLAllReduce || vs[0].Status != checks.Fail || vs[0].Expected != "8 GPUs" {
		t.Fatalf("verdicts %+v, %v", vs, err)
	}
}
