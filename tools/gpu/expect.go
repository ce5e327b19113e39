package gpu

import (
	"fmt"
	"strings"
)

// Expect is what a healthy node looks like and the pass bars. Zero values
// mean "use the default" (see Defaults) or "do not check" where no sensible
// default exists (Model, PowerLimitW, ...). The lead maps a ValidationSuite
// check (manifests.Check thresholds/params) onto this; cure-nvml reads it as
// JSON with these field names.
type Expect struct {
	// Count is how many GPUs the node must have (8 on HGX/DGX boards).
	Count int `json:"count,omitempty"`
	// BusIDs, when set, are the expected PCI addresses in order; the GPU at
	// BusIDs[i] is reported as gpu/i. This names a missing GPU correctly:
	// NVML indices shift down when a GPU falls off the bus, so without it a
	// missing GPU can only be reported as a short count.
	BusIDs []string `json:"busIDs,omitempty"`
	// Model is the exact NVML device name ("NVIDIA H100 80GB HBM3").
	Model string `json:"model,omitempty"`
	// PCIDeviceID is the expected (device<<16|vendor) id, e.g. 0x233010DE.
	PCIDeviceID uint32 `json:"pciDeviceID,omitempty"`

	// MaxUncorrectedECC is the pass bar for volatile uncorrected ECC errors.
	// Always 0 in practice: any uncorrectable error is a failure (DCGM's
	// diagnostic fails on DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0).
	MaxUncorrectedECC uint64 `json:"maxUncorrectedECC,omitempty"`
	// FailOnRemapPending makes a pending row remap a failure instead of a
	// reported pass. NVIDIA's memory error management guide says a pending
	// remap only needs a GPU reset; DCGM's targeted stress fails on it.
	FailOnRemapPending bool `json:"failOnRemapPending,omitempty"`
	// MaxRetiredPages (DBE+SBE) on pre-Ampere parts. Default 60: NVIDIA's
	// Dynamic Page Retirement guide takes a board near its 64-page InfoROM
	// capacity as an RMA candidate.
	MaxRetiredPages int `json:"maxRetiredPages,omitempty"`

	// CriticalXids adds Xids to the critical class of the built-in table.
	CriticalXids []uint64 `json:"criticalXids,omitempty"`

	// FailClocksReasons is the clocks-event-reason mask that fails a GPU if
	// seen under load. Default: HW slowdown, SW and HW thermal slowdown, HW
	// power brake — the reasons DCGM's diagnostic reports as clock events
	// caused by the platform rather than by the workload. SW power cap is
	// normal at full load and is not in the default.
	FailClocksReasons uint64 `json:"failClocksReasons,omitempty"`

	// TempMarginC: peak temperature must stay this far below the device's
	// own slowdown threshold (nvmlDeviceGetTemperatureThreshold SLOWDOWN).
	TempMarginC int `json:"tempMarginC,omitempty"`
	// MaxTemperatureC is an absolute cap on top of the slowdown rule (a
	// suite's "temperatureC: {max: 87}"); 0 = none.
	MaxTemperatureC int `json:"maxTemperatureC,omitempty"`
	// MaxMemoryTemperatureC caps the HBM temperature peak
	// (NVML_FI_DEV_MEMORY_TEMP); 0 = not judged.
	MaxMemoryTemperatureC int `json:"maxMemoryTemperatureC,omitempty"`

	// PCIeGen/PCIeWidth override the device-reported maximum as the
	// expected link (from the SKU: gen 5 x16 for H100/B200 SXM).
	PCIeGen   int `json:"pcieGen,omitempty"`
	PCIeWidth int `json:"pcieWidth,omitempty"`
	// MaxPCIeReplayDelta bounds the replay counter's growth over the run.
	// Default 80: DCGM's PCIe plugin default for max_pcie_replays.
	MaxPCIeReplayDelta uint64 `json:"maxPCIeReplayDelta,omitempty"`

	// NVLinks is how many links each GPU must have up (18 on H100/H200/B200
	// SXM). 0: every link NVML reports must be up, and a missing one is not
	// noticed.
	NVLinks int `json:"nvlinks,omitempty"`
	// NVSwitch: every link must lead to an NVSwitch (an HGX board's
	// GPUs connect only to its NVSwitches); a link to a GPU or to
	// something NVML cannot name is a topology mismatch.
	NVSwitch bool `json:"nvswitch,omitempty"`
	// Fabric: every GPU must be registered with the NVLink fabric (the
	// fabric manager's work on NVSwitch systems): state completed, status
	// success, no unhealthy condition, and all GPUs in one clique.
	Fabric bool `json:"fabric,omitempty"`

	// PowerLimitW is the expected enforced power limit (700 W H100 SXM,
	// 1000 W B200); a lowered cap is a configuration drift. 0 = not checked.
	PowerLimitW int `json:"powerLimitW,omitempty"`
	// MinLoadPowerW is the lowest peak draw accepted under load: a GPU that
	// cannot draw power is not doing the work. 0 = not checked.
	MinLoadPowerW int `json:"minLoadPowerW,omitempty"`

	// Bandwidth, when set, is a bandwidth run (nvbandwidth, nccl-tests)
	// made as the load, judged against its bars.
	Bandwidth *Bandwidth `json:"bandwidth,omitempty"`
}

// Defaults fills zero-valued bars with the cited defaults.
func (e Expect) Defaults() Expect {
	if e.MaxRetiredPages == 0 {
		e.MaxRetiredPages = 60
	}
	if e.FailClocksReasons == 0 {
		e.FailClocksReasons = ReasonHWSlowdown | ReasonSWThermalSlowdown | ReasonHWThermalSlowdown | ReasonHWPowerBrake
	}
	if e.MaxPCIeReplayDelta == 0 {
		e.MaxPCIeReplayDelta = 80
	}
	return e
}

// Validate rejects expectations that cannot be right, naming the field.
func (e Expect) Validate() error {
	var errs []string
	if e.Count < 0 {
		errs = append(errs, fmt.Sprintf("count: %d is negative", e.Count))
	}
	if len(e.BusIDs) > 0 {
		if e.Count != 0 && e.Count != len(e.BusIDs) {
			errs = append(errs, fmt.Sprintf("busIDs: %d addresses but count is %d", len(e.BusIDs), e.Count))
		}
		seen := map[string]int{}
		for i, b := range e.BusIDs {
			n := NormalizeBusID(b)
			if n == "" {
				errs = append(errs, fmt.Sprintf("busIDs[%d]: %q is not a PCI address (want [dddd:]bb:dd.f)", i, b))
				continue
			}
			if j, dup := seen[n]; dup {
				errs = append(errs, fmt.Sprintf("busIDs[%d]: %q repeats busIDs[%d]", i, b, j))
			}
			seen[n] = i
		}
	}
	if e.TempMarginC < 0 {
		errs = append(errs, fmt.Sprintf("tempMarginC: %d is negative", e.TempMarginC))
	}
	if e.PCIeGen < 0 || e.PCIeGen > 7 {
		errs = append(errs, fmt.Sprintf("pcieGen: %d is not a PCIe generation (1-7)", e.PCIeGen))
	}
	switch e.PCIeWidth {
	case 0, 1, 2, 4, 8, 16, 32:
	default:
		errs = append(errs, fmt.Sprintf("pcieWidth: %d is not a PCIe link width (1, 2, 4, 8, 16, 32)", e.PCIeWidth))
	}
	if e.MaxMemoryTemperatureC < 0 {
		errs = append(errs, fmt.Sprintf("maxMemoryTemperatureC: %d is negative", e.MaxMemoryTemperatureC))
	}
	if e.NVLinks < 0 {
		errs = append(errs, fmt.Sprintf("nvlinks: %d is negative", e.NVLinks))
	}
	if e.PowerLimitW < 0 || e.MinLoadPowerW < 0 {
		errs = append(errs, "powerLimitW/minLoadPowerW: negative watts")
	}
	if e.Bandwidth != nil {
		if err := e.Bandwidth.Validate(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("gpu expectations: %s", strings.Join(errs, "; "))
	}
	return nil
}

// NormalizeBusID turns NVML's "00000000:18:00.0", lspci's "0000:18:00.0" and
// "18:00.0" into one form ("0000:18:00.0", lower case), or "" if s is not a
// PCI address.
func NormalizeBusID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	parts := strings.Split(s, ":")
	var dom, bus, devfn string
	switch len(parts) {
	case 2:
		dom, bus, devfn = "0", parts[0], parts[1]
	case 3:
		dom, bus, devfn = parts[0], parts[1], parts[2]
	default:
		return ""
	}
	dev, fn, ok := strings.Cut(devfn, ".")
	var d, b, v, f uint64
	if !ok || !hexNum(dom, 8, &d) || !hexNum(bus, 2, &b) || !hexNum(dev, 2, &v) || !hexNum(fn, 1, &f) || v > 0x1f || f > 7 || d > 0xffff {
		return ""
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", d, b, v, f)
}

func hexNum(s string, maxLen int, out *uint64) bool {
	if s == "" || len(s) > maxLen {
		return false
	}
	var v uint64
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint64(c-'a'+10)
		default:
			return false
		}
	}
	*out = v
	return true
}
