package gpu

import (
	"context"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hgxBars are the bars of the HGX fabric suite (manifests/examples):
// PCIe Gen5 x16 host copies, NVLink 4 copies and all-reduce.
var hgxBars = map[string]float64{
	"h2dGBps": 40, "d2hGBps": 40, "d2dWriteGBps": 330, "d2dBidirWriteGBps": 660,
	MetricAllReduceBusBW: 400, MetricAllReducePairBusBW: 300,
}

// slots names the fixtures' GPUs by their PCI address, as cure-nvml names
// them from the SKU's address list: the test fails if a tool's device
// numbers were used instead of its addresses.
func slots(t *testing.T) Naming {
	order := []string{"18", "2a", "3a", "5d", "9a", "ab", "ba", "db"}
	return func(index int, busID string) string {
		for i, b := range order {
			if busID == "0000:"+b+":00.0" {
				return "gpu/" + strconv.Itoa(i)
			}
		}
		if busID != "" {
			t.Errorf("device %d at unknown address %q", index, busID)
		}
		return "gpu/" + strconv.Itoa(index)
	}
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var hgxTestcases = []string{"host_to_device_memcpy_ce", "device_to_host_memcpy_ce",
	"device_to_device_memcpy_write_ce", "device_to_device_bidirectional_memcpy_write_ce"}

func measured(v Verdict, metric string) float64 {
	for _, m := range v.Measurements {
		if m.Metric == metric {
			return m.Value
		}
	}
	return math.NaN()
}

// TestBandwidthOutputs judges recorded nvbandwidth and nccl-tests outputs
// of an 8-GPU HGX H100 board, healthy and with one slow GPU pair, against
// the HGX suite's bars, through the same run path cure-nvml uses.
func TestBandwidthOutputs(t *testing.T) {
	t.Run("nvbandwidth parse", func(t *testing.T) {
		r, err := ParseNVBandwidth(fixture(t, "nvbandwidth-h100x8-healthy.txt"))
		if err != nil {
			t.Fatal(err)
		}
		if r.Version != "v0.8" || r.Driver != "570.124.06" || len(r.Devices) != 8 || r.Devices[3].BusID != "0000:5d:00.0" ||
			r.Devices[3].Name != "NVIDIA H100 80GB HBM3" {
			t.Fatalf("header %+v", r)
		}
		var names []string
		for _, tc := range r.Tests {
			names = append(names, tc.Name)
			if tc.Status != NVBPassed {
				t.Errorf("%s: %s %s", tc.Name, tc.Status, tc.Message)
			}
		}
		if !slices.Equal(names, hgxTestcases) {
			t.Errorf("testcases %q", names)
		}
		bidir := r.Tests[3]
		if len(bidir.Matrices) != 3 || bidir.Matrices[2].Key != "device_to_device_bidirectional_memcpy_write_ce_total" {
			t.Fatalf("bidirectional tables %+v", bidir.Matrices)
		}
		w := r.Tests[2].Matrices[0]
		if len(w.Values) != 8 || !math.IsNaN(w.Values[4][4]) || w.Values[0][1] != 389.63 {
			t.Errorf("write table %v", w.Values)
		}
	})

	t.Run("nvbandwidth healthy", func(t *testing.T) {
		r, err := ParseNVBandwidth(fixture(t, "nvbandwidth-h100x8-healthy.txt"))
		if err != nil {
			t.Fatal(err)
		}
		vs := NVBandwidthVerdicts(r, hgxTestcases, hgxBars, slots(t))
		if got := bad(vs); len(got) != 0 {
			t.Fatalf("failing = %q\n%s", got, dump(vs))
		}
		if len(vs) != 8+28 {
			t.Errorf("%d verdicts, want 8 GPUs and 28 pairs", len(vs))
		}
		if v := find(vs, "gpu/0", CheckNVBandwidth); measured(v, "h2dGBps") != 55.43 || v.Expected != "h2dGBps>=40 d2hGBps>=40" {
			t.Errorf("gpu/0 = %v %+v", v, v.Measurements)
		}
		v := find(vs, "gpu/3-5", CheckNVBandwidth)
		if w := measured(v, "d2dWriteGBps"); w < 385 || w > 392 || measured(v, "d2dBidirWriteGBps") < 735 {
			t.Errorf("gpu/3-5 = %v %+v", v, v.Measurements)
		}
	})

	t.Run("nvbandwidth slow pair", func(t *testing.T) {
		r, err := ParseNVBandwidth(fixture(t, "nvbandwidth-h100x8-slow-pair.txt"))
		if err != nil {
			t.Fatal(err)
		}
		vs := NVBandwidthVerdicts(r, hgxTestcases, hgxBars, slots(t))
		if got := bad(vs); !slices.Equal(got, []string{"gpu/3-5 nvbandwidth"}) {
			t.Fatalf("failing = %q\n%s", got, dump(vs))
		}
		v := find(vs, "gpu/3-5", CheckNVBandwidth)
		for _, want := range []string{"d2dWriteGBps 151.3 GB/s < 330 GB/s", "gpu/3->gpu/5 151.3", "d2dBidirWriteGBps 300."} {
			if !strings.Contains(v.Message, want) {
				t.Errorf("gpu/3-5 message %q lacks %q", v.Message, want)
			}
		}
	})

	t.Run("one GPU slow with every peer is named", func(t *testing.T) {
		r, err := ParseNVBandwidth(fixture(t, "nvbandwidth-h100x8-healthy.txt"))
		if err != nil {
			t.Fatal(err)
		}
		w := r.Tests[2].Matrices[0].Values
		for j := range w {
			if j != 6 {
				w[6][j], w[j][6] = 190, 190
			}
		}
		vs := NVBandwidthVerdicts(r, hgxTestcases, hgxBars, slots(t))
		if v := find(vs, "gpu/6", CheckNVBandwidth); v.Status != Fail || !strings.Contains(v.Message, "every pair with gpu/6 is below its bar (7 of 7)") {
			t.Errorf("gpu/6 = %v", v)
		}
	})

	t.Run("nccl-tests", func(t *testing.T) {
		r, err := ParseNCCLTest(fixture(t, "nccl-allreduce-h100x8.txt"))
		if err != nil {
			t.Fatal(err)
		}
		row, _ := r.Largest()
		if r.Version != "2.18.3" || r.NCCLVersion != "2.26.5+cuda12.8" || len(r.Ranks) != 8 || r.Ranks[5].BusID != "0000:ab:00.0" ||
			len(r.Rows) != 11 || row.Bytes != 8<<30 || !r.Summary {
			t.Fatalf("parsed %+v", r)
		}
		v := NCCLVerdict(r, "gpu", MetricAllReduceBusBW, hgxBars)
		if v.Status != Pass || measured(v, MetricAllReduceBusBW) != row.OutOfPlace.BusBW || row.OutOfPlace.BusBW < 460 {
			t.Errorf("node verdict %v %+v", v, v.Measurements)
		}
		slow, err := ParseNCCLTest(fixture(t, "nccl-allreduce-h100-pair-3-5-slow.txt"))
		if err != nil {
			t.Fatal(err)
		}
		if v := NCCLVerdict(slow, "gpu/3-5", MetricAllReducePairBusBW, hgxBars); v.Status != Fail ||
			!strings.Contains(v.Message, "allReducePairBusGBps 141.5 GB/s") || !strings.Contains(v.Message, "< 300 GB/s") {
			t.Errorf("slow pair verdict %v", v)
		}
		// Corrupt data fails whatever the bandwidth.
		lines := strings.Split(string(fixture(t, "nccl-allreduce-h100x8.txt")), "\n")
		for i, l := range lines {
			if strings.HasPrefix(l, "  4294967296") {
				// The in-place half's #wrong column.
				lines[i] = l[:len(l)-len("      0")] + "     12"
			}
		}
		cr, err := ParseNCCLTest([]byte(strings.Join(lines, "\n")))
		if err != nil {
			t.Fatal(err)
		}
		if v := NCCLVerdict(cr, "gpu", MetricAllReduceBusBW, hgxBars); v.Status != Fail || !strings.Contains(v.Message, "12 wrong elements") {
			t.Errorf("corrupt run verdict %v", v)
		}
		// A run that died prints no summary.
		cut := string(fixture(t, "nccl-allreduce-h100x8.txt"))
		cut = cut[:strings.Index(cut, "# Out of bounds")] + "hgx-h100-017: Test NCCL failure common.cu:1279 'unhandled cuda error (run with NCCL_DEBUG=INFO for details) / '\n"
		dr, err := ParseNCCLTest([]byte(cut))
		if err != nil {
			t.Fatal(err)
		}
		if v := NCCLVerdict(dr, "gpu", MetricAllReduceBusBW, hgxBars); v.Status != Error || !strings.Contains(v.Message, "unhandled cuda error") {
			t.Errorf("failed run verdict %v", v)
		}
	})

	t.Run("run through the tools", func(t *testing.T) {
		var calls []string
		run := func(_ context.Context, env []string, name string, args ...string) ([]byte, error) {
			calls = append(calls, strings.Join(append(append(slices.Clone(env), name), args...), " "))
			switch {
			case name == "/usr/bin/nvbandwidth":
				return fixture(t, "nvbandwidth-h100x8-slow-pair.txt"), nil
			case slices.Contains(env, "CUDA_VISIBLE_DEVICES=3,5"):
				return fixture(t, "nccl-allreduce-h100-pair-3-5-slow.txt"), nil
			case strings.Contains(strings.Join(env, " "), "CUDA_VISIBLE_DEVICES"):
				return fixture(t, "nccl-allreduce-h100-pair-0-1.txt"), nil
			}
			return fixture(t, "nccl-allreduce-h100x8.txt"), nil
		}
		b := Bandwidth{NVBandwidth: hgxTestcases, NCCLAllReduce: true, NCCLPairs: true, Min: hgxBars}
		if err := b.Validate(); err != nil {
			t.Fatal(err)
		}
		vs, err := BandwidthRun(context.Background(), run, b, "/usr/bin/nvbandwidth", "/usr/bin/all_reduce_perf", 8, slots(t), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if got := bad(vs); !slices.Equal(got, []string{"gpu/3-5 nccl", "gpu/3-5 nvbandwidth"}) {
			t.Fatalf("failing = %q\n%s", got, dump(vs))
		}
		if len(calls) != 1+1+28 {
			t.Fatalf("%d runs, want nvbandwidth, the node's all-reduce and 28 pairs: %q", len(calls), calls)
		}
		if want := "CUDA_DEVICE_ORDER=PCI_BUS_ID /usr/bin/nvbandwidth -t " + strings.Join(hgxTestcases, " "); calls[0] != want {
			t.Errorf("nvbandwidth ran as %q", calls[0])
		}
		if want := "CUDA_DEVICE_ORDER=PCI_BUS_ID /usr/bin/all_reduce_perf -b 8388608 -e 8589934592 -f 2 -g 8"; calls[1] != want {
			t.Errorf("all_reduce_perf ran as %q", calls[1])
		}
		if want := "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,1 /usr/bin/all_reduce_perf -b 8388608 -e 8589934592 -f 2 -g 2"; calls[2] != want {
			t.Errorf("first pair ran as %q", calls[2])
		}
	})

	t.Run("bars validated", func(t *testing.T) {
		for _, b := range []Bandwidth{
			{NVBandwidth: []string{"host_to_device_memcpy_sm"}},
			{Min: map[string]float64{"d2dGBps": 300}},
			{Min: map[string]float64{"h2dGBps": -1}},
			{NCCLPairs: true},
		} {
			if err := b.Validate(); err == nil {
				t.Errorf("%+v accepted", b)
			}
		}
	})
}
