//go:build cgo

package nvmlsource

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/cure-oss/cure/tools/gpu"
)

// health is the per-device state behind the mock's ...Func fields: the DGX
// mocks have identity data only, so the test supplies a healthy GPU and
// injects faults by changing it.
type health struct {
	ecc      uint64
	reasons  uint64
	linkDown map[int]bool // NVLink state after the first full read
	linkRead int
	// linkErrs are error counters (by the adapter's names) after the
	// first full read; every counter reads 0 before.
	linkErrs map[int]map[string]uint64
	// linkBytes is each link's traffic during the run (both directions);
	// nil: no traffic.
	linkBytes map[int]uint64
	// remote overrides a link's remote device type (default: NVSwitch).
	remote map[int]nvml.IntNvLinkDeviceType
	// fabric is the fabric registration (default: completed, success,
	// clique 1).
	fabric *nvml.GpuFabricInfo
	// noNVLink answers every NVLink query Not Supported, as the H200
	// passed through to a VM did.
	noNVLink bool
	mu       sync.Mutex
}

// post reports whether the adapter is on its second (after-load) read.
func (h *health) post() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.linkRead > 1
}

// counter is a link counter as NVML would answer it now.
func (h *health) counter(link int, name string) uint64 {
	if !h.post() {
		return 0
	}
	return h.linkErrs[link][name]
}

// traffic is a link's byte counter now: a base before the run, the base
// plus the run's traffic after.
func (h *health) traffic(link int) uint64 {
	const base = 5 << 30
	if !h.post() {
		return base
	}
	return base + h.linkBytes[link]/2
}

// hopperCounters maps nvmlDeviceGetNvLinkErrorCounter's counters to the
// adapter's names.
var hopperCounters = map[nvml.NvLinkErrorCounter]string{
	nvml.NVLINK_ERROR_DL_CRC_FLIT: "crc_flit", nvml.NVLINK_ERROR_DL_CRC_DATA: "crc_data",
	nvml.NVLINK_ERROR_DL_REPLAY: "replay", nvml.NVLINK_ERROR_DL_RECOVERY: "recovery",
}

// blackwellFields maps the NVLink 5 per-link fields to the adapter's names.
var blackwellFields = map[uint32]string{}

func init() {
	for _, f := range nvlinkErrorFields {
		blackwellFields[f.id] = f.name
	}
}

const nvlinks = 18 // NVLink 4 (H100/H200) and NVLink 5 (B200) SXM parts: 18 links

func instrument(d *server.Device, h *health) {
	bus := d.PciBusID
	pciID := d.Config.PciDeviceId
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		var p nvml.PciInfo
		for i, c := range "0000" + bus { // NVML's 8-digit domain form
			p.BusId[i] = int8(c)
		}
		p.PciDeviceId = pciID
		return p, nvml.SUCCESS
	}
	d.GetTotalEccErrorsFunc = func(t nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
		if t != nvml.MEMORY_ERROR_TYPE_UNCORRECTED || c != nvml.VOLATILE_ECC {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return h.ecc, nvml.SUCCESS
	}
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS }
	d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return h.reasons, nvml.SUCCESS }
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 68, nvml.SUCCESS }
	d.GetTemperatureThresholdFunc = func(t nvml.TemperatureThresholds) (uint32, nvml.Return) {
		if t != nvml.TEMPERATURE_THRESHOLD_SLOWDOWN {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return 87, nvml.SUCCESS
	}
	d.GetCurrPcieLinkGenerationFunc = func() (int, nvml.Return) { return 5, nvml.SUCCESS }
	d.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return 5, nvml.SUCCESS }
	d.GetCurrPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
	d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
	d.GetPcieReplayCounterFunc = func() (int, nvml.Return) { return 2, nvml.SUCCESS }
	blackwell := d.Config.Architecture >= nvml.DEVICE_ARCH_BLACKWELL
	d.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
		if h.noNVLink {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		if link >= nvlinks {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if link == 0 {
			h.linkRead++
		}
		if h.linkRead > 1 && h.linkDown[link] {
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetNvLinkRemoteDeviceTypeFunc = func(link int) (nvml.IntNvLinkDeviceType, nvml.Return) {
		if t, ok := h.remote[link]; ok {
			return t, nvml.SUCCESS
		}
		return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
	}
	// Blackwell has no NVLink error-counter calls: its counters are field
	// values (NVML_FI_DEV_NVLINK_COUNT_*).
	d.GetNvLinkErrorCounterFunc = func(link int, c nvml.NvLinkErrorCounter) (uint64, nvml.Return) {
		if blackwell || h.noNVLink {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return h.counter(link, hopperCounters[c]), nvml.SUCCESS
	}
	d.GetGpuFabricInfoFunc = func() (nvml.GpuFabricInfo, nvml.Return) {
		if h.fabric != nil {
			return *h.fabric, nvml.SUCCESS
		}
		return nvml.GpuFabricInfo{State: nvml.GPU_FABRIC_STATE_COMPLETED, Status: uint32(nvml.SUCCESS), CliqueId: 1,
			ClusterUuid: [16]uint8{0xc1, 0x05, 0x7e, 0x4a}}, nvml.SUCCESS
	}
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 650000, nvml.SUCCESS }
	d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 700000, nvml.SUCCESS }
	d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	// Identity as a real H200 (driver 580.159.04) answered it, with the
	// serial made unique per board.
	d.GetSerialFunc = func() (string, nvml.Return) { return "16540240854" + bus[5:7], nvml.SUCCESS }
	d.GetVbiosVersionFunc = func() (string, nvml.Return) { return "96.00.A5.00.1A", nvml.SUCCESS }
	d.GetBoardPartNumberFunc = func() (string, nvml.Return) { return "692-2G520-0282-000", nvml.SUCCESS }
	d.GetFieldValuesFunc = fields(h, blackwell, 47, nvml.SUCCESS)
}

// fields answers nvmlDeviceGetFieldValues as the generation does: the HBM
// temperature as the real H200 did ("ret=Success type=1 (unsigned int)
// value 47", or the field's own error), NVLink 5's per-link counters on
// Blackwell, Hopper's per-link throughput (KiB) otherwise; anything else,
// and any NVLink field of a GPU without NVLink, is Not Supported, as the
// H200 capture shows.
func fields(h *health, blackwell bool, memC uint32, memRet nvml.Return) func([]nvml.FieldValue) nvml.Return {
	set := func(f *nvml.FieldValue, v uint64) {
		f.ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
		f.NvmlReturn = uint32(nvml.SUCCESS)
		for i := range 8 {
			f.Value[i] = byte(v >> (8 * i))
		}
	}
	return func(vs []nvml.FieldValue) nvml.Return {
		for i := range vs {
			f := &vs[i]
			link := int(f.ScopeId)
			name, isCount := blackwellFields[f.FieldId]
			switch {
			case f.FieldId == nvml.FI_DEV_MEMORY_TEMP:
				f.ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_INT)
				f.NvmlReturn = uint32(memRet)
				f.Value = [8]byte{byte(memC), byte(memC >> 8), byte(memC >> 16), byte(memC >> 24)}
			case h.noNVLink:
				f.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			case blackwell && isCount:
				set(f, h.counter(link, name))
			case blackwell && (f.FieldId == nvml.FI_DEV_NVLINK_COUNT_XMIT_BYTES || f.FieldId == nvml.FI_DEV_NVLINK_COUNT_RCV_BYTES):
				set(f, h.traffic(link))
			case !blackwell && (f.FieldId == nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX || f.FieldId == nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX):
				set(f, h.traffic(link)>>10)
			default:
				f.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			}
		}
		return nvml.SUCCESS
	}
}

// instrumentServer wires an event set that delivers xids once, then times out.
func instrumentServer(s *server.Server, xids []nvml.EventData) {
	var mu sync.Mutex
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
				mu.Lock()
				defer mu.Unlock()
				if len(xids) == 0 {
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
				e := xids[0]
				xids = xids[1:]
				return e, nvml.SUCCESS
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
}

func TestGPUFaults(t *testing.T) {
	platforms := []struct {
		name string
		new  func() *server.Server
	}{
		{"dgxb200", dgxb200.New},
		{"dgxh100", dgxh100.New},
		{"dgxh200", dgxh200.New},
	}
	faults := []struct {
		name   string
		inject func(s *server.Server, hs []*health) []nvml.EventData
		want   []string
	}{
		{"healthy", func(*server.Server, []*health) []nvml.EventData { return nil }, nil},
		{"DBE on GPU 3", func(s *server.Server, hs []*health) []nvml.EventData {
			hs[3].ecc = 1
			return []nvml.EventData{{Device: s.Devices[3], EventType: nvml.EventTypeXidCriticalError, EventData: 48}}
		}, []string{"gpu/3 ecc", "gpu/3 xid"}},
		{"NVLink down on GPU 5", func(_ *server.Server, hs []*health) []nvml.EventData {
			hs[5].linkDown = map[int]bool{11: true}
			return nil
		}, []string{"gpu/5 nvlink"}},
		{"HW slowdown on GPU 1 during stress", func(_ *server.Server, hs []*health) []nvml.EventData {
			hs[1].reasons = nvml.ClocksEventReasonSwPowerCap | nvml.ClocksThrottleReasonHwSlowdown
			return nil
		}, []string{"gpu/1 clocks_events"}},
		{"GPU 6 missing", func(s *server.Server, _ []*health) []nvml.EventData {
			s.Devices = slices.Delete(s.Devices, 6, 7)
			return nil
		}, []string{"gpu count", "gpu/6 present"}},
	}
	for _, p := range platforms {
		for _, f := range faults {
			t.Run(p.name+"/"+f.name, func(t *testing.T) {
				s := p.new()
				var hs []*health
				exp := gpu.Expect{Count: len(s.Devices), NVLinks: nvlinks, PCIeGen: 5, PCIeWidth: 16, PowerLimitW: 700}
				for _, d := range s.Devices {
					sd := d.(*server.Device)
					h := &health{}
					instrument(sd, h)
					hs = append(hs, h)
					exp.BusIDs = append(exp.BusIDs, sd.PciBusID)
					exp.Model = sd.Config.Name
					exp.PCIDeviceID = sd.Config.PciDeviceId
				}
				instrumentServer(s, f.inject(s, hs))
				vs, err := gpu.Run(context.Background(), New(s), exp, gpu.Options{
					Load:     func(context.Context) error { return nil },
					Interval: time.Millisecond,
				})
				if err != nil {
					t.Fatal(err)
				}
				var bad []string
				for _, v := range vs {
					if v.Status != gpu.Pass && v.Status != gpu.Skip {
						bad = append(bad, v.Component+" "+v.Check)
					}
				}
				slices.Sort(bad)
				if !slices.Equal(bad, f.want) {
					var b strings.Builder
					for _, v := range vs {
						fmt.Fprintln(&b, v)
					}
					t.Errorf("failing verdicts = %q, want %q\n%s", bad, f.want, b.String())
				}
				// Model names come from the mocks: the check must have seen them.
				for _, v := range vs {
					if v.Check == gpu.CheckModel && v.Status != gpu.Pass {
						t.Errorf("model verdict %v", v)
					}
				}
			})
		}
	}
}

func TestErrorMapping(t *testing.T) {
	d := &device{d: &mock.Device{
		GetRemappedRowsFunc: func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.ERROR_NOT_SUPPORTED },
		GetPowerUsageFunc:   func() (uint32, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST },
		GetNvLinkStateFunc:  func(int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
		GetArchitectureFunc: func() (nvml.DeviceArchitecture, nvml.Return) { return nvml.DEVICE_ARCH_HOPPER, nvml.SUCCESS },
	}, index: 2}
	if _, err := d.RemappedRows(); !isErr(err, gpu.ErrNotSupported) || !strings.Contains(err.Error(), "nvmlDeviceGetRemappedRows(gpu 2)") {
		t.Errorf("RemappedRows err = %v", err)
	}
	if _, err := d.PowerUsage(); !isErr(err, gpu.ErrGPULost) {
		t.Errorf("PowerUsage err = %v", err)
	}
	if _, err := d.NVLinks(); !isErr(err, gpu.ErrNotSupported) {
		t.Errorf("NVLinks on a device without NVLink: err = %v", err)
	}
}

func isErr(err, target error) bool { return err != nil && errors.Is(err, target) }

// TestIdentityFromNVML: serial, UUID, VBIOS, board part number and the HBM
// temperature come through the adapter as NVML answers them; a board
// whose memory sensor field fails reads as not supported.
func TestIdentityFromNVML(t *testing.T) {
	s := dgxh200.New()
	for _, d := range s.Devices {
		instrument(d.(*server.Device), &health{})
	}
	s.Devices[1].(*server.Device).GetFieldValuesFunc = fields(&health{}, false, 0, nvml.ERROR_NOT_SUPPORTED)
	instrumentServer(s, nil)
	obs := gpu.Collect(context.Background(), New(s), gpu.Expect{}, gpu.Options{Interval: time.Millisecond})
	ids := gpu.Identities(obs)
	if len(ids) != len(s.Devices) {
		t.Fatalf("identities %+v", ids)
	}
	d0 := s.Devices[0].(*server.Device)
	a := ids[0]
	if a.UUID != d0.UUID || a.Serial != "16540240854"+d0.PciBusID[5:7] || a.VBIOS != "96.00.A5.00.1A" ||
		a.BoardPartNumber != "692-2G520-0282-000" || a.MemoryTempPeakC != 47 || a.Name != d0.Config.Name {
		t.Errorf("gpu/0 identity %+v (uuid %s)", a, d0.UUID)
	}
	if ids[1].MemoryTempPeakC != 0 || ids[1].Serial == "" {
		t.Errorf("gpu/1 without a memory sensor: %+v", ids[1])
	}
	dev := &device{d: s.Devices[1].(*server.Device), index: 1}
	if _, err := dev.MemoryTemperature(); !isErr(err, gpu.ErrNotSupported) {
		t.Errorf("field error: %v", err)
	}
}

func TestFieldUint(t *testing.T) {
	for _, c := range []struct {
		typ  nvml.ValueType
		b    [8]byte
		want uint64
		ok   bool
	}{
		{nvml.VALUE_TYPE_UNSIGNED_INT, [8]byte{47}, 47, true},
		{nvml.VALUE_TYPE_UNSIGNED_LONG_LONG, [8]byte{0, 1}, 256, true},
		{nvml.VALUE_TYPE_SIGNED_INT, [8]byte{0xff, 0xff, 0xff, 0xff}, 0, false},
		{nvml.VALUE_TYPE_DOUBLE, [8]byte{}, 0, false},
	} {
		v, ok := fieldUint(nvml.FieldValue{ValueType: uint32(c.typ), Value: c.b})
		if v != c.want || ok != c.ok {
			t.Errorf("type %d %v: %d %t", c.typ, c.b, v, ok)
		}
	}
}
