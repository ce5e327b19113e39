//go:build cgo

package nvmlsource

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/cure-oss/cure/tools/gpu"
)

// hgxExpect is what an HGX board's SKU declares: 8 GPUs, 18 NVLinks each,
// every link to an NVSwitch, registration with the NVLink fabric.
func hgxExpect(s *server.Server) gpu.Expect {
	exp := gpu.Expect{Count: len(s.Devices), NVLinks: nvlinks, NVSwitch: true, Fabric: true}
	for _, d := range s.Devices {
		exp.BusIDs = append(exp.BusIDs, d.(*server.Device).PciBusID)
	}
	return exp
}

func runMock(t *testing.T, s *server.Server, exp gpu.Expect) []gpu.Verdict {
	t.Helper()
	instrumentServer(s, nil)
	vs, err := gpu.Run(context.Background(), New(s), exp, gpu.Options{
		Load:     func(context.Context) error { return nil },
		Interval: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func failing(vs []gpu.Verdict) []string {
	var out []string
	for _, v := range vs {
		if v.Status != gpu.Pass && v.Status != gpu.Skip {
			out = append(out, v.Component+" "+v.Check)
		}
	}
	slices.Sort(out)
	return out
}

func verdict(vs []gpu.Verdict, comp, check string) gpu.Verdict {
	for _, v := range vs {
		if v.Component == comp && v.Check == check {
			return v
		}
	}
	return gpu.Verdict{}
}

func dumpVerdicts(vs []gpu.Verdict) string {
	var b strings.Builder
	for _, v := range vs {
		fmt.Fprintln(&b, v)
	}
	return b.String()
}

// TestNVLinkFieldValues runs the NVLink and fabric checks through the
// adapter over go-nvml's DGX H100 (Hopper: NVLink error counters through
// nvmlDeviceGetNvLinkErrorCounter) and DGX B200 (Blackwell: those calls
// answer Not Supported, the counters are per-link field values) mocks: a
// healthy board of each generation passes; a degraded link, a link to a
// GPU where an NVSwitch belongs, a link idle under an NVLink load and a
// fabric registration failure are each named by GPU and link.
func TestNVLinkFieldValues(t *testing.T) {
	generations := []struct {
		name     string
		new      func() *server.Server
		counters string
		// degrade makes one link of h grow errors the generation counts.
		degrade func(h *health, link int)
		named   []string
	}{
		{"Hopper (DGX H100)", dgxh100.New, "Hopper error counters",
			func(h *health, link int) {
				h.linkErrs = map[int]map[string]uint64{link: {"replay": 37, "crc_flit": 5}}
			}, []string{"replay +37", "crc_flit +5"}},
		{"Blackwell (DGX B200)", dgxb200.New, "Blackwell field values",
			func(h *health, link int) {
				// Symbol errors are FEC-corrected and do not fail a link;
				// receive errors and a failed recovery do.
				h.linkErrs = map[int]map[string]uint64{link: {"symbol_errors": 900, "rcv_errors": 4, "recovery_failed": 1}}
			}, []string{"rcv_errors +4", "recovery_failed +1"}},
	}
	for _, g := range generations {
		setup := func(t *testing.T, inject func(hs []*health)) []gpu.Verdict {
			s := g.new()
			var hs []*health
			for _, d := range s.Devices {
				h := &health{}
				instrument(d.(*server.Device), h)
				hs = append(hs, h)
			}
			if inject != nil {
				inject(hs)
			}
			return runMock(t, s, hgxExpect(s))
		}
		t.Run(g.name+"/healthy", func(t *testing.T) {
			vs := setup(t, nil)
			if got := failing(vs); len(got) != 0 {
				t.Fatalf("failing = %q\n%s", got, dumpVerdicts(vs))
			}
			v := verdict(vs, "gpu/7", gpu.CheckNVLink)
			if v.Status != gpu.Pass || !strings.HasPrefix(v.Observed, "18/18 up, "+g.counters) {
				t.Errorf("nvlink = %v", v)
			}
			if v := verdict(vs, "gpu/7", gpu.CheckFabric); v.Status != gpu.Pass || v.Observed != "state completed, clique 1" {
				t.Errorf("fabric = %v", v)
			}
		})
		t.Run(g.name+"/degraded link", func(t *testing.T) {
			vs := setup(t, func(hs []*health) { g.degrade(hs[2], 9) })
			if got := failing(vs); !slices.Equal(got, []string{"gpu/2 nvlink"}) {
				t.Fatalf("failing = %q\n%s", got, dumpVerdicts(vs))
			}
			v := verdict(vs, "gpu/2", gpu.CheckNVLink)
			for _, want := range g.named {
				if !strings.Contains(v.Observed, "link 9 "+want) {
					t.Errorf("nvlink %q does not name link 9 %s", v.Observed, want)
				}
			}
			if g.counters == "Blackwell field values" && !strings.Contains(v.Observed, "900 FEC-corrected symbol errors") {
				t.Errorf("corrected symbol errors not reported: %q", v.Observed)
			}
		})
		t.Run(g.name+"/fabric registration failure", func(t *testing.T) {
			vs := setup(t, func(hs []*health) {
				hs[6].fabric = &nvml.GpuFabricInfo{State: nvml.GPU_FABRIC_STATE_COMPLETED, Status: uint32(nvml.ERROR_INSUFFICIENT_RESOURCES), CliqueId: 1}
				hs[4].fabric = &nvml.GpuFabricInfo{State: nvml.GPU_FABRIC_STATE_IN_PROGRESS}
			})
			if got := failing(vs); !slices.Equal(got, []string{"gpu/4 fabric", "gpu/6 fabric"}) {
				t.Fatalf("failing = %q\n%s", got, dumpVerdicts(vs))
			}
			// NVML's own text for the status (the constant's name where,
			// as here, no libnvidia-ml is loaded).
			if v := verdict(vs, "gpu/6", gpu.CheckFabric); !strings.HasPrefix(v.Message, "fabric registration failed: ") ||
				!strings.Contains(strings.ToLower(v.Message), "insufficient") || !strings.Contains(v.Message, "(NVML 23)") {
				t.Errorf("gpu/6 fabric = %v", v)
			}
			if v := verdict(vs, "gpu/4", gpu.CheckFabric); v.Observed != "state in progress" || !strings.Contains(v.Message, "not registered") {
				t.Errorf("gpu/4 fabric = %v", v)
			}
		})
		t.Run(g.name+"/split clique", func(t *testing.T) {
			vs := setup(t, func(hs []*health) {
				hs[3].fabric = &nvml.GpuFabricInfo{State: nvml.GPU_FABRIC_STATE_COMPLETED, Status: uint32(nvml.SUCCESS), CliqueId: 2}
			})
			if got := failing(vs); !slices.Equal(got, []string{"gpu/3 fabric"}) {
				t.Fatalf("failing = %q\n%s", got, dumpVerdicts(vs))
			}
		})
		t.Run(g.name+"/link to a GPU, not an NVSwitch", func(t *testing.T) {
			vs := setup(t, func(hs []*health) { hs[1].remote = map[int]nvml.IntNvLinkDeviceType{3: nvml.NVLINK_DEVICE_TYPE_GPU} })
			v := verdict(vs, "gpu/1", gpu.CheckNVLink)
			if got := failing(vs); !slices.Equal(got, []string{"gpu/1 nvlink"}) || !strings.Contains(v.Observed, "link 3 leads to a GPU, not an NVSwitch") {
				t.Fatalf("failing = %q\n%s", got, dumpVerdicts(vs))
			}
		})
		t.Run(g.name+"/link idle under an NVLink load", func(t *testing.T) {
			vs := setup(t, func(hs []*health) {
				for _, h := range hs {
					h.linkBytes = map[int]uint64{}
					for l := range nvlinks {
						h.linkBytes[l] = 24 << 30
					}
				}
				hs[5].linkBytes[12] = 0
			})
			v := verdict(vs, "gpu/5", gpu.CheckNVLink)
			if got := failing(vs); !slices.Equal(got, []string{"gpu/5 nvlink"}) ||
				!strings.Contains(v.Observed, "link 12 carried 0 B under an NVLink load while the median link carried 24.0 GiB") {
				t.Fatalf("failing = %q\n%s", got, dumpVerdicts(vs))
			}
		})
	}
}

// h200Capture is testdata/nvml-fields-h200-load.json: what NVML answered
// on a real H200 passed through to a VM.
type h200Capture struct {
	Devices []struct {
		Fabric      string            `json:"fabric"`      // "state=0 status=0 clique=0"
		FieldValues map[string]string `json:"fieldValues"` // "ret=Not Supported type=0 u64=0"
		NVLinkState []string          `json:"nvlinkState"` // "0:Not Supported"
	} `json:"devices"`
}

// TestNVLinkPassthroughH200 replays the real H200 capture (every NVLink
// query Not Supported, fabric state 0, HBM at 47 C) through go-nvml's
// mock: SKIP when the SKU expects no NVLink, a loud FAIL when it is an HGX
// SKU.
func TestNVLinkPassthroughH200(t *testing.T) {
	b, err := os.ReadFile("testdata/nvml-fields-h200-load.json")
	if err != nil {
		t.Fatal(err)
	}
	var c h200Capture
	if err := json.Unmarshal(b, &c); err != nil || len(c.Devices) != 1 {
		t.Fatalf("capture: %v (%d devices)", err, len(c.Devices))
	}
	dev := c.Devices[0]
	var fab nvml.GpuFabricInfo
	if _, err := fmt.Sscanf(dev.Fabric, "state=%d status=%d clique=%d", &fab.State, &fab.Status, &fab.CliqueId); err != nil {
		t.Fatalf("fabric %q: %v", dev.Fabric, err)
	}
	noNVLink := len(dev.NVLinkState) == 18
	for _, st := range dev.NVLinkState {
		noNVLink = noNVLink && strings.HasSuffix(st, ":Not Supported")
	}
	for name, v := range dev.FieldValues {
		if strings.HasPrefix(name, "NVLINK_") && !strings.HasPrefix(v, "ret=Not Supported") {
			noNVLink = false
		}
	}
	var memC uint32
	if _, err := fmt.Sscanf(dev.FieldValues["MEMORY_TEMP"], "ret=Success type=1 u64=%d", &memC); err != nil {
		t.Fatalf("MEMORY_TEMP %q: %v", dev.FieldValues["MEMORY_TEMP"], err)
	}
	if !noNVLink || fab.State != nvml.GPU_FABRIC_STATE_NOT_SUPPORTED {
		t.Fatalf("the capture is not the passthrough case: %+v", dev)
	}
	mk := func() *server.Server {
		s := dgxh200.New()
		s.Devices = s.Devices[:1]
		h := &health{noNVLink: true, fabric: &fab}
		sd := s.Devices[0].(*server.Device)
		instrument(sd, h)
		sd.GetFieldValuesFunc = fields(h, false, memC, nvml.SUCCESS)
		return s
	}
	vs := runMock(t, mk(), gpu.Expect{Count: 1, MaxMemoryTemperatureC: 85})
	if got := failing(vs); len(got) != 0 {
		t.Fatalf("no NVLink expected: failing = %q\n%s", got, dumpVerdicts(vs))
	}
	if v := verdict(vs, "gpu/0", gpu.CheckNVLink); v.Status != gpu.Skip {
		t.Errorf("nvlink = %v", v)
	}
	if v := verdict(vs, "gpu/0", gpu.CheckFabric); v.Status != gpu.Skip || v.Observed != "state not supported" {
		t.Errorf("fabric = %v", v)
	}
	if v := verdict(vs, "gpu/0", gpu.CheckMemoryTemp); v.Status != gpu.Pass || v.Observed != "peak 47 C" {
		t.Errorf("memory temperature = %v", v)
	}

	vs = runMock(t, mk(), gpu.Expect{Count: 1, NVLinks: nvlinks, NVSwitch: true, Fabric: true})
	if got := failing(vs); !slices.Equal(got, []string{"gpu/0 fabric", "gpu/0 nvlink"}) {
		t.Fatalf("HGX SKU: failing = %q\n%s", got, dumpVerdicts(vs))
	}
	v := verdict(vs, "gpu/0", gpu.CheckNVLink)
	if v.Status != gpu.Fail || !strings.Contains(v.Message, "the SKU expects 18 links up") || !strings.Contains(v.Message, "passed through") {
		t.Errorf("nvlink = %v", v)
	}
}
