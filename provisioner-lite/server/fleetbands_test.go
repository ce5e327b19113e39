package server

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// fleetStore has nodes n1..n4 of SKU hgx with a diagnostic run each whose
// disk/vdb disk-read verdict measured readMBps (n4's is the slow one).
func fleetStore(t *testing.T, vals ...float64) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "cure.db"), store.WithStateKey(bytes.Repeat([]byte{5}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	for i, v := range vals {
		node, run := fmt.Sprintf("n%d", i+1), fmt.Sprintf("r%d", i+1)
		if err := st.UpsertNode(ctx, store.Node{ID: node, BMCURL: "https://192.0.2.1", SKU: "hgx", MACs: []string{fmt.Sprintf("52:54:00:00:00:%02x", i+1)}}); err != nil {
			t.Fatal(err)
		}
		if err := st.CreateRun(ctx, store.Run{ID: run, NodeID: node, Mode: "diagnostic", Manifest: "fleet-read", Status: curev1.RunStatus_RUN_RUNNING, StartedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		ev := &curev1.Event{Seq: 1, TimeUnixMs: time.Now().UnixMilli(), Phase: "validate", Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{
			Component: "disk/vdb", Check: "disk-read", Status: curev1.VerdictStatus_PASS, Observed: fmt.Sprintf("readMBps=%g", v),
			Measurements: []*curev1.Measurement{{Metric: "readMBps", Value: v, Unit: "MB/s"}, {Metric: "readMB", Value: 8, Unit: "MB"}}}}}
		e, sv, err := runnerEvent(node, run, "boot", ev, map[modes.PhaseName]bool{"validate": true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.AppendRunnerEvent(ctx, e, sv, store.DefaultEventLimits); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// TestFleetBandsAnswer: the distribution of each SKU/check/metric and where
// the asked-for node sits (left out of its own fleet, as when judged).
func TestFleetBandsAnswer(t *testing.T) {
	st := fleetStore(t, 200, 206, 196, 41)
	o := &OperatorService{Store: st}
	ctx := context.Background()
	resp, err := o.FleetBands(ctx, &curev1.FleetBandsRequest{NodeId: "n4", Metric: "readMBps"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetDistributions()) != 1 || resp.GetTruncated() || resp.GetWindowMs() != (30*24*time.Hour).Milliseconds() {
		t.Fatalf("answer %v", resp)
	}
	d := resp.GetDistributions()[0]
	if d.GetSku() != "hgx" || d.GetCheck() != "disk-read" || d.GetUnit() != "MB/s" || d.GetNodes() != 3 || d.GetMedian() != 200 ||
		math.Abs(d.GetMad()-4*1.4826) > 1e-9 || d.GetMin() != 196 || d.GetMax() != 206 || len(d.GetValues()) != 3 {
		t.Errorf("distribution %v", d)
	}
	if len(d.GetMarks()) != 1 || d.GetMarks()[0].GetComponent() != "disk/vdb" || d.GetMarks()[0].GetValue() != 41 || d.GetMarks()[0].GetPercentile() != 0 || d.GetMarks()[0].GetRunId() != "r4" {
		t.Errorf("marks %v", d.GetMarks())
	}
	all, err := o.FleetBands(ctx, &curev1.FleetBandsRequest{})
	if err != nil || len(all.GetDistributions()) != 2 || all.GetDistributions()[0].GetMetric() != "readMB" || all.GetDistributions()[1].GetNodes() != 4 {
		t.Errorf("every metric: %v %v", all, err)
	}
	if _, err := o.FleetBands(ctx, &curev1.FleetBandsRequest{NodeId: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("unknown node: %v", err)
	}
	if _, err := o.FleetBands(ctx, &curev1.FleetBandsRequest{WindowMs: -1}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("negative window: %v", err)
	}
}

// TestReportCarriesMeasurementsAndFleet: the report gives each verdict its
// measurements and the run's stored fleet judgement; MARGINAL ranks with
// drift when the answer must be cut.
func TestReportCarriesMeasurementsAndFleet(t *testing.T) {
	st := fleetStore(t, 41)
	ctx := context.Background()
	rec := &curev1.FleetJudgements{Judgements: []*curev1.FleetJudgement{{Component: "disk/vdb", Check: "disk-read", Metric: "readMBps", Note: "fleet band not applied: 0 of 3 nodes"}},
		Distributions: []*curev1.FleetDistribution{{Sku: "hgx", Check: "disk-read", Metric: "readMBps"}}}
	js, _ := protojson.Marshal(rec)
	if err := st.PutFleetJudgement(ctx, "r1", nil, js); err != nil {
		t.Fatal(err)
	}
	r, _ := st.GetRun(ctx, "r1")
	rep, err := BuildReport(ctx, st, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.GetVerdicts()) != 1 || len(rep.GetVerdicts()[0].GetMeasurements()) != 2 || rep.GetVerdicts()[0].GetMeasurements()[1].GetValue() != 41 {
		t.Errorf("verdicts %v", rep.GetVerdicts())
	}
	if len(rep.GetFleetJudgements()) != 1 || rep.GetFleetJudgements()[0].GetNote() != "fleet band not applied: 0 of 3 nodes" || len(rep.GetFleetDistributions()) != 1 {
		t.Errorf("fleet %v %v", rep.GetFleetJudgements(), rep.GetFleetDistributions())
	}
	if verdictRank(curev1.VerdictStatus_MARGINAL) >= verdictRank(curev1.VerdictStatus_PASS) {
		t.Error("MARGINAL ranks with PASS")
	}
}

// TestRunnerVerdictMeasurements: measurements are cleaned and bounded as
// the rest of a runner's verdict; too many or nameless or repeated metrics
// refuse the event; values that are not numbers are left out.
func TestRunnerVerdictMeasurements(t *testing.T) {
	ev := func(ms ...*curev1.Measurement) *curev1.Event {
		return &curev1.Event{Seq: 1, Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{Component: "disk/vdb", Check: "disk-read", Status: curev1.VerdictStatus_PASS, Measurements: ms}}}
	}
	phases := map[modes.PhaseName]bool{"validate": true}
	_, v, err := runnerEvent("n", "r", "b", ev(&curev1.Measurement{Metric: "readMBps", Value: 1, Unit: "MB/s\x1b]0;x" + strings.Repeat("x", 40)},
		&curev1.Measurement{Metric: "lat", Value: math.NaN(), Unit: "us"}), phases)
	if err != nil || len(v.Measurements) != 1 || v.Measurements[0].Metric != "readMBps" || len(v.Measurements[0].Unit) > maxUnit || strings.Contains(v.Measurements[0].Unit, "\x1b") {
		t.Errorf("cleaned: %+v %v", v, err)
	}
	many := make([]*curev1.Measurement, store.MaxVerdictMeasurements+1)
	for i := range many {
		many[i] = &curev1.Measurement{Metric: fmt.Sprint("m", i)}
	}
	for name, e := range map[string]*curev1.Event{
		"too many": ev(many...),
		"nameless": ev(&curev1.Measurement{Value: 1}),
		"repeated": ev(&curev1.Measurement{Metric: "a"}, &curev1.Measurement{Metric: "a"}),
		"bidi":     ev(&curev1.Measurement{Metric: "read\u202eMBps"}),
		"escape":   ev(&curev1.Measurement{Metric: "read\x1bMBps"}),
		"long":     ev(&curev1.Measurement{Metric: strings.Repeat("m", maxMetricName+1)}),
	} {
		if _, _, err := runnerEvent("n", "r", "b", e, phases); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// eightGPUs is an 8-GPU node's inventory: GPUs, NVMe, disks, NICs, DIMMs,
// two sockets and two NUMA nodes.
func eightGPUs() *curev1.Inventory {
	inv := &curev1.Inventory{CpuCount: 64,
		Nvme:       []*curev1.NvmeController{{Name: "nvme0", PciAddress: "0000:01:00.0", Namespaces: []string{"nvme0n1"}}},
		Disks:      []*curev1.BlockDevice{{Name: "sda"}},
		Nics:       []*curev1.NetInterface{{Name: "eth0", PciAddress: "0000:02:00.0"}},
		Dimms:      []*curev1.Dimm{{Locator: "CPU0_DIMM_A1"}},
		Processors: []*curev1.Processor{{Id: 0}, {Id: 1}},
		NumaNodes:  []*curev1.NumaNode{{Id: 0}, {Id: 1}}}
	for i := range 8 {
		inv.Gpus = append(inv.Gpus, &curev1.Gpu{Index: uint32(i), PciAddress: fmt.Sprintf("0000:%02x:00.0", 0xc1+i)})
	}
	return inv
}

// TestInventoryComponents: a measured component of a kind the inventory
// describes must name a part it lists (by position, name, index, PCI
// address or locator); a kind it does not describe is not its to judge.
func TestInventoryComponents(t *testing.T) {
	p := partsOf(eightGPUs())
	for comp, want := range map[string]string{
		"gpu/7": "", "gpu/0": "", "gpu/0000:c8:00.0": "", "gpu/0-7": "", "gpu/3/nvlink/2": "", "GPU/7": "",
		"gpu/8": `inventory lists no gpu "8" (it lists 8 gpu)`, "gpu/31": `lists no gpu "31"`, "gpu/0-9": `no gpu "9"`, "gpu/": `no gpu ""`, "gpu/7-": `no gpu ""`,
		"disk/nvme0n1": "", "disk/sda": "", "disk/sdz": `no disk "sdz" (it lists 2 disk)`, "nvme/0": "", "nvme/nvme0": "", "nvme/1": `no nvme "1"`,
		"nic/eth0": "", "nic/0": "", "nic/0000:02:00.0": "", "nic/eth9": `no nic "eth9"`, "nic/unknown": `no nic "unknown"`,
		"cpu/1": "", "cpu/2": `no cpu "2"`, "memory/node1": "", "memory/node2": `no memory "node2"`, "dimm/CPU0_DIMM_A1": "", "dimm/B3": `no dimm "B3"`,
		// Not parts the inventory describes: node-wide, links, sensors, site names.
		"memory": "", "gpu": "", "pair/node3": "", "hwmon/nvme/temp1": "", "ib/mlx5_0/1": "", "site": "", "bmc/psu/Bay1": "",
	} {
		err := p.check(comp)
		if (err == nil) != (want == "") || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", comp, err, want)
		}
	}
	// A node that reported no GPU has none to measure; one without NUMA
	// information measures memory/node0.
	empty := partsOf(&curev1.Inventory{})
	if empty.check("gpu/0") == nil || empty.check("memory/node0") != nil || empty.check("memory/node1") == nil || empty.check("cpu/0") == nil {
		t.Errorf("empty inventory: gpu/0 %v, memory/node0 %v, memory/node1 %v, cpu/0 %v", empty.check("gpu/0"), empty.check("memory/node0"),
			empty.check("memory/node1"), empty.check("cpu/0"))
	}
}

// FuzzInventoryComponent: any component a runner names is judged without
// panicking, and one accepted of a kind the inventory describes names a
// part it lists.
func FuzzInventoryComponent(f *testing.F) {
	for _, s := range []string{"gpu/7", "gpu/31", "gpu/0-7", "gpu/-", "disk/nvme0n1/p1", "nic/", "/", "memory/node0", "pair/x", "GPU/0000:C1:00.0", "gpu/0--1"} {
		f.Add(s)
	}
	p := partsOf(eightGPUs())
	f.Fuzz(func(t *testing.T, comp string) {
		err := p.check(comp)
		kind, rest, sliced := strings.Cut(comp, "/")
		names, described := p.names[strings.ToLower(kind)]
		if err != nil || !described || !sliced {
			return
		}
		inst, _, _ := strings.Cut(rest, "/")
		for _, i := range strings.Split(inst, "-") {
			if !names[strings.ToLower(i)] && !names[strings.ToLower(inst)] {
				t.Fatalf("%q accepted: %q is not listed", comp, i)
			}
		}
	})
}
