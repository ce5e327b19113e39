package gpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func h100Expect(l *fakeLib) Expect {
	e := Expect{Count: 8, Model: "NVIDIA H100 80GB HBM3", PCIDeviceID: 0x233010DE,
		NVLinks: 18, PCIeGen: 5, PCIeWidth: 16, PowerLimitW: 700, MinLoadPowerW: 500}
	for _, d := range l.devs {
		e.BusIDs = append(e.BusIDs, d.bus)
	}
	return e
}

func runFake(t *testing.T, l *fakeLib, exp Expect) []Verdict {
	t.Helper()
	vs, err := Run(context.Background(), l, exp, Options{
		Load:     func(context.Context) error { return nil },
		Interval: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// bad lists "component check" for every verdict that is not PASS or SKIP.
func bad(vs []Verdict) []string {
	var out []string
	for _, v := range vs {
		if v.Status != Pass && v.Status != Skip {
			out = append(out, v.Component+" "+v.Check)
		}
	}
	slices.Sort(out)
	return out
}

// TestGPUFaultsFake is TestGPUFaults (nvmlsource, cgo, go-nvml's DGX mocks)
// over the package's own fake, so CGO_ENABLED=0 runs assert the same logic.
func TestGPUFaultsFake(t *testing.T) {
	cases := []struct {
		name   string
		inject func(l *fakeLib)
		exp    func(e *Expect)
		want   []string
	}{
		{"healthy", func(*fakeLib) {}, nil, nil},
		{"DBE on GPU 3", func(l *fakeLib) {
			l.devs[3].ecc = 1
			l.xids = []XidEvent{{Index: 3, Xid: 48}}
		}, nil, []string{"gpu/3 ecc", "gpu/3 xid"}},
		{"NVLink down on GPU 5", func(l *fakeLib) {
			l.devs[5].linksAft = slices.Clone(l.devs[5].links)
			l.devs[5].linksAft[7].Up = false
		}, nil, []string{"gpu/5 nvlink"}},
		{"thermal throttle on GPU 2 under load", func(l *fakeLib) {
			l.devs[2].reasons = ReasonSWPowerCap | ReasonHWThermalSlowdown
		}, nil, []string{"gpu/2 clocks_events"}},
		{"GPU 6 missing", func(l *fakeLib) {
			l.devs = slices.Delete(l.devs, 6, 7)
		}, nil, []string{"gpu count", "gpu/6 present"}},
		{"GPU 4 lost", func(l *fakeLib) { l.devs[4].lost = true }, nil, []string{"gpu/4 present"}},
		{"remap failure on GPU 1", func(l *fakeLib) {
			l.devs[1].remap = RemappedRows{Uncorrectable: 9, Failure: true}
		}, nil, []string{"gpu/1 remapped_rows"}},
		{"remap pending is reported, not failed", func(l *fakeLib) {
			l.devs[1].remap = RemappedRows{Uncorrectable: 1, Pending: true}
		}, nil, nil},
		{"remap pending fails when asked", func(l *fakeLib) {
			l.devs[1].remap = RemappedRows{Uncorrectable: 1, Pending: true}
		}, func(e *Expect) { e.FailOnRemapPending = true }, []string{"gpu/1 remapped_rows"}},
		{"PCIe x8 on GPU 0", func(l *fakeLib) { l.devs[0].link.CurWidth = 8 }, nil, []string{"gpu/0 pcie_link"}},
		{"PCIe replays on GPU 7", func(l *fakeLib) { l.devs[7].replay = []uint64{10, 500} }, nil, []string{"gpu/7 pcie_replay"}},
		{"NVLink CRC growth on GPU 6", func(l *fakeLib) {
			l.devs[6].linksAft = slices.Clone(l.devs[6].links)
			l.devs[6].linksAft[0].Errors = map[string]uint64{"crc_flit": 12, "crc_data": 0, "replay": 0, "recovery": 0}
		}, nil, []string{"gpu/6 nvlink"}},
		{"hot GPU 0", func(l *fakeLib) { l.devs[0].temp = 88 }, nil, []string{"gpu/0 temperature"}},
		{"power cap lowered on GPU 2", func(l *fakeLib) { l.devs[2].limitMW = 500000; l.devs[2].powerMW = 499000 }, nil, []string{"gpu/2 power"}},
		{"wrong model on GPU 3", func(l *fakeLib) { l.devs[3].name = "NVIDIA H100 PCIe"; l.devs[3].devID = 0x233110DE }, nil, []string{"gpu/3 model"}},
		{"application Xid is reported, not failed", func(l *fakeLib) { l.xids = []XidEvent{{Index: 2, Xid: 13}} }, nil, nil},
		{"fabric registration failed on GPU 4", func(l *fakeLib) {
			l.devs[4].fabric.Status = errors.New("NVML_ERROR_INSUFFICIENT_RESOURCES")
		}, func(e *Expect) { e.Fabric = true }, []string{"gpu/4 fabric"}},
		{"GPU 2 in another clique", func(l *fakeLib) { l.devs[2].fabric.CliqueID = 9 }, func(e *Expect) { e.Fabric = true }, []string{"gpu/2 fabric"}},
		{"degraded bandwidth on GPU 1", func(l *fakeLib) { l.devs[1].fabric.HealthMask, l.devs[1].fabric.HealthRead = 0x1, true },
			nil, []string{"gpu/1 fabric"}},
		{"GPU 3 link to a GPU on an NVSwitch board", func(l *fakeLib) {
			l.devs[3].linksAft = slices.Clone(l.devs[3].links)
			l.devs[3].linksAft[2].Remote = RemoteGPU
		}, func(e *Expect) { e.NVSwitch = true }, []string{"gpu/3 nvlink"}},
		{"no NVLink on an HGX SKU", func(l *fakeLib) { l.devs[0].links = nil }, nil, []string{"gpu/0 nvlink"}},
		{"no NVLink, none expected", func(l *fakeLib) {
			for _, d := range l.devs {
				d.links = nil
			}
		}, func(e *Expect) { e.NVLinks = 0 }, nil},
		{"hot HBM on GPU 6", func(l *fakeLib) { l.devs[6].memTemp = 97 }, func(e *Expect) { e.MaxMemoryTemperatureC = 95 }, []string{"gpu/6 memory_temperature"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newFakeLib(8)
			exp := h100Expect(l) // expectations describe the healthy node
			tc.inject(l)
			if tc.exp != nil {
				tc.exp(&exp)
			}
			vs := runFake(t, l, exp)
			if got := bad(vs); !slices.Equal(got, tc.want) {
				t.Errorf("failing verdicts = %q, want %q\n%s", got, tc.want, dump(vs))
			}
		})
	}
}

func dump(vs []Verdict) string {
	var b strings.Builder
	for _, v := range vs {
		fmt.Fprintln(&b, v)
	}
	return b.String()
}

func find(vs []Verdict, comp, check string) Verdict {
	for _, v := range vs {
		if v.Component == comp && v.Check == check {
			return v
		}
	}
	return Verdict{}
}

func TestVerdictDetails(t *testing.T) {
	l := newFakeLib(8)
	exp := h100Expect(l)
	l.devs[3].ecc = 2
	l.xids = []XidEvent{{Index: 3, Xid: 48}, {Index: 3, Xid: 48}, {Index: 3, Xid: 63}}
	l.devs[5].linksAft = slices.Clone(l.devs[5].links)
	l.devs[5].linksAft[7].Up = false
	l.devs[1].remap = RemappedRows{Uncorrectable: 1, Pending: true}
	vs := runFake(t, l, exp)

	if v := find(vs, "gpu/3", CheckECC); v.Observed != "2" || v.Expected != "<= 0" {
		t.Errorf("ecc verdict = %v", v)
	}
	if v := find(vs, "gpu/3", CheckXid); v.Observed != "xid 48 x2, 63 x1" || !strings.Contains(v.Message, "double-bit ECC") {
		t.Errorf("xid verdict = %v", v)
	}
	if v := find(vs, "gpu/5", CheckNVLink); v.Observed != "17/18 up, Hopper error counters; link 7 down" {
		t.Errorf("nvlink verdict = %v", v)
	}
	if v := find(vs, "gpu/1", CheckRemappedRows); v.Status != Pass || !strings.Contains(v.Message, "pending") {
		t.Errorf("pending remap must be reported: %v", v)
	}
	if v := find(vs, "gpu/0", CheckPower); v.Observed != "limit 700 W, peak 690 W" {
		t.Errorf("power verdict = %v", v)
	}
	if v := find(vs, "gpu/0", CheckTemperature); v.Expected != "< 87 C (slowdown 87 C)" || v.Observed != "peak 71 C" {
		t.Errorf("temperature verdict = %v", v)
	}
	// One verdict per (component, check).
	seen := map[string]bool{}
	for _, v := range vs {
		k := v.Component + " " + v.Check
		if seen[k] {
			t.Errorf("duplicate verdict %s", k)
		}
		seen[k] = true
	}
}

func TestMissingGPUWithoutBusIDs(t *testing.T) {
	// Without bus addresses the missing GPU cannot be named: only the count
	// fails, and the remaining GPUs keep their NVML indices.
	l := newFakeLib(7)
	vs := runFake(t, l, Expect{Count: 8})
	if got := bad(vs); !slices.Equal(got, []string{"gpu count"}) {
		t.Errorf("got %q\n%s", got, dump(vs))
	}
	if v := find(vs, "gpu", CheckCount); v.Observed != "7" || v.Expected != "8" {
		t.Errorf("count verdict = %v", v)
	}
}

func TestPrePageRetirementParts(t *testing.T) {
	l := newFakeLib(2)
	for _, d := range l.devs {
		d.remapErr = ErrNotSupported
	}
	l.devs[1].retired = RetiredPages{DoubleBit: 40, SingleBit: 30}
	vs := runFake(t, l, Expect{Count: 2})
	if got := bad(vs); !slices.Equal(got, []string{"gpu/1 retired_pages"}) {
		t.Errorf("got %q\n%s", got, dump(vs))
	}
	// Pre-Ampere parts report page retirement instead of row remapping.
	if v := find(vs, "gpu/0", CheckRemappedRows); v.Check != "" {
		t.Errorf("unexpected remapped_rows verdict on a pre-Ampere part: %v", v)
	}
	if v := find(vs, "gpu/0", CheckRetiredPages); v.Status != Pass || v.Observed != "dbe=0 sbe=0 pending=false" {
		t.Errorf("retired_pages verdict = %v", v)
	}
}

func TestXidWatchUnavailableIsError(t *testing.T) {
	l := newFakeLib(1)
	l.watchErr = fmt.Errorf("nvmlDeviceRegisterEvents: %w", ErrNotSupported)
	vs := runFake(t, l, Expect{})
	if v := find(vs, "gpu/0", CheckXid); v.Status != Skip {
		t.Errorf("xid verdict = %v", v)
	}
	l.watchErr = fmt.Errorf("insufficient permissions")
	vs = runFake(t, l, Expect{})
	if v := find(vs, "gpu/0", CheckXid); v.Status != Error {
		t.Errorf("xid verdict = %v", v)
	}
}

func TestSamplingForDuration(t *testing.T) {
	// Without a load, the engine samples for Duration at Interval; a throttle
	// that shows up only in later samples is still caught.
	l := newFakeLib(1)
	d := l.devs[0]
	calls := 0
	vs, err := Run(context.Background(), &countingLib{l, func() {
		calls++
		if calls >= 3 {
			d.reasons = ReasonHWPowerBrake
		}
	}}, Expect{},
		Options{Duration: 300 * time.Millisecond, Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if calls < 3 {
		t.Fatalf("only %d samples in 300ms at 1ms intervals", calls)
	}
	if v := find(vs, "gpu/0", CheckClocks); v.Status != Fail || !strings.Contains(v.Observed, "hw_power_brake") {
		t.Errorf("clocks verdict = %v", v)
	}
}

// countingLib calls tick once per sampling round (on ClocksEventReasons).
type countingLib struct {
	*fakeLib
	tick func()
}

func (c *countingLib) DeviceByIndex(i int) (Device, error) {
	d, err := c.fakeLib.DeviceByIndex(i)
	if err != nil {
		return nil, err
	}
	return &tickDev{Device: d, tick: c.tick}, nil
}

type tickDev struct {
	Device
	tick func()
}

func (d *tickDev) ClocksEventReasons() (uint64, error) {
	d.tick()
	return d.Device.ClocksEventReasons()
}

func TestExpectValidate(t *testing.T) {
	for _, tc := range []struct {
		e    Expect
		want string
	}{
		{Expect{BusIDs: []string{"18:00.0", "zz:00.0"}}, `busIDs[1]: "zz:00.0" is not a PCI address`},
		{Expect{BusIDs: []string{"0000:18:00.0", "00000000:18:00.0"}}, `busIDs[1]: "00000000:18:00.0" repeats busIDs[0]`},
		{Expect{Count: 8, BusIDs: []string{"18:00.0"}}, "busIDs: 1 addresses but count is 8"},
		{Expect{PCIeWidth: 12}, "pcieWidth: 12 is not a PCIe link width"},
		{Expect{PCIeGen: 9}, "pcieGen: 9"},
	} {
		err := tc.e.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.e, err, tc.want)
		}
	}
	if err := (Expect{Count: 8, PCIeGen: 5, PCIeWidth: 16}).Validate(); err != nil {
		t.Errorf("valid expectations rejected: %v", err)
	}
	if _, err := Run(context.Background(), newFakeLib(1), Expect{PCIeWidth: 3}, Options{}); err == nil {
		t.Error("Run accepted invalid expectations")
	}
}

func TestNormalizeBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:18:00.0": "0000:18:00.0",
		"0000:9A:00.0":     "0000:9a:00.0",
		"18:00.0":          "0000:18:00.0",
		"18:00":            "",
		"0000:18:20.0":     "",
		"":                 "",
	} {
		if got := NormalizeBusID(in); got != want {
			t.Errorf("NormalizeBusID(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestReasonNamesAndXidTable(t *testing.T) {
	if got := strings.Join(ReasonNames(ReasonHWSlowdown|ReasonHWPowerBrake|0x1000), ","); got != "hw_slowdown,hw_power_brake,unknown_0x1000" {
		t.Errorf("ReasonNames = %s", got)
	}
	for xid, class := range map[uint64]XidClass{48: XidCritical, 63: XidInformational, 64: XidCritical, 74: XidCritical,
		79: XidCritical, 94: XidInformational, 95: XidCritical, 119: XidCritical, 120: XidCritical, 13: XidApplication, 9999: XidUnknown} {
		if got := LookupXid(xid).Class; got != class {
			t.Errorf("Xid %d class = %s, want %s", xid, got, class)
		}
	}
}
