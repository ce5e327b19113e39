package gpu

import "fmt"

// Status is a verdict's outcome.
type Status string

const (
	Pass  Status = "PASS"
	Fail  Status = "FAIL"
	Error Status = "ERROR" // the check could not tell: a query failed
	Skip  Status = "SKIP"  // not applicable to this device; Message says why
)

// Verdict is one (component, check) result. It is also the JSON record
// cure-nvml prints (see cmd/cure-nvml).
type Verdict struct {
	Component string `json:"component"` // "gpu/3", or "gpu" for system-level checks
	Check     string `json:"check"`     // one of the Check* names
	Status    Status `json:"status"`
	Observed  string `json:"observed,omitempty"`
	Expected  string `json:"expected,omitempty"`
	Message   string `json:"message,omitempty"`
	// Measurements are the verdict's numbers with their units (the
	// bandwidth checks').
	Measurements []Measurement `json:"measurements,omitempty"`
}

func (v Verdict) String() string {
	s := fmt.Sprintf("%s %s: %s", v.Component, v.Check, v.Status)
	if v.Observed != "" || v.Expected != "" {
		s += fmt.Sprintf(" (observed %s, expected %s)", v.Observed, v.Expected)
	}
	if v.Message != "" {
		s += ": " + v.Message
	}
	return s
}

// Failed reports whether any verdict is FAIL or ERROR.
func Failed(vs []Verdict) bool {
	for _, v := range vs {
		if v.Status == Fail || v.Status == Error {
			return true
		}
	}
	return false
}

// Check names, as they appear in verdicts.
const (
	CheckCount        = "count"              // component "gpu": how many GPUs NVML sees
	CheckPresent      = "present"            // a GPU expected at a bus address answers
	CheckModel        = "model"              // name and PCI device id
	CheckECC          = "ecc"                // volatile uncorrected ECC errors
	CheckRemappedRows = "remapped_rows"      // row remapping failure/pending (Ampere+)
	CheckRetiredPages = "retired_pages"      // dynamic page retirement (pre-Ampere)
	CheckXid          = "xid"                // Xid events during the run
	CheckClocks       = "clocks_events"      // clocks event reasons sampled under load
	CheckTemperature  = "temperature"        // peak temperature vs the device's slowdown threshold
	CheckPCIeLink     = "pcie_link"          // link generation and width at their maximum
	CheckPCIeReplay   = "pcie_replay"        // replay counter delta over the run
	CheckNVLink       = "nvlink"             // every link up (to an NVSwitch where expected), no error counter growth, traffic on every link
	CheckFabric       = "fabric"             // registration with the NVLink fabric: state, status, health, clique
	CheckMemoryTemp   = "memory_temperature" // HBM temperature peak
	CheckPower        = "power"              // enforced limit and draw under load
	CheckGPUBurn      = "gpu_burn"           // gpu-burn's per-GPU result
	CheckDCGMDiag     = "dcgm_diag"          // dcgmi diag per-GPU results
	CheckSXid         = "sxid"               // NVSwitch errors the driver logged
	CheckFabricMgr    = "fabric_manager"     // NVSwitches on the bus and the fabric manager running
)
