// Package gpu checks NVIDIA GPUs for acceptance and burn-in: it reads each
// device's health through a narrow interface that mirrors the NVML calls it
// needs, samples it while a workload runs, and turns what it saw into one
// verdict per (GPU, check) with observed and expected values.
//
// The package is pure Go on purpose. NVML (go-nvml) needs cgo and
// libnvidia-ml.so.1, and the CURE busybox is built with cgo off, so the NVML
// adapter lives in tools/gpu/nvmlsource (build tag cgo) and runs in a separate
// helper binary (tools/gpu/cmd/cure-nvml); everything here is testable with a
// fake behind the same interface.
package gpu

import (
	"errors"
	"strconv"
	"time"
)

// ErrNotSupported means the device or driver does not implement a query
// (NVML_ERROR_NOT_SUPPORTED): row remapping before Ampere, page retirement on
// Ampere and later, NVLink on PCIe cards. Checks report SKIP for it, not ERROR.
var ErrNotSupported = errors.New("not supported by this device")

// ErrGPULost means the GPU stopped answering (NVML_ERROR_GPU_IS_LOST, Xid 79
// territory): a hardware failure, never a skip.
var ErrGPULost = errors.New("GPU is lost (fallen off the bus)")

// ErrTimeout is what XidWatcher.Wait returns when no event arrived in time.
var ErrTimeout = errors.New("timed out waiting for an event")

// Library is the system-level half of the seam (nvmlDeviceGetCount,
// nvmlDeviceGetHandleByIndex, nvmlEventSetCreate).
type Library interface {
	// DeviceCount is nvmlDeviceGetCount_v2.
	DeviceCount() (int, error)
	// DeviceByIndex is nvmlDeviceGetHandleByIndex_v2; index is NVML's
	// enumeration index (PCI bus order).
	DeviceByIndex(index int) (Device, error)
	// WatchXid registers for Xid events (nvmlDeviceRegisterEvents with
	// nvmlEventTypeXidCriticalError, which despite its name delivers every
	// Xid) on the devices at the given NVML indices.
	WatchXid(indices []int) (XidWatcher, error)
}

// Device is one GPU. Each method names the NVML call it stands for.
type Device interface {
	Name() (string, error) // nvmlDeviceGetName
	UUID() (string, error) // nvmlDeviceGetUUID
	PCI() (PCIInfo, error) // nvmlDeviceGetPciInfo_v3
	// Serial is nvmlDeviceGetSerial: the board serial number, as printed
	// on the board's label (what an RMA names).
	Serial() (string, error)
	VBIOSVersion() (string, error)    // nvmlDeviceGetVbiosVersion
	BoardPartNumber() (string, error) // nvmlDeviceGetBoardPartNumber
	// MemoryTemperature is the HBM temperature in °C, the field value
	// NVML_FI_DEV_MEMORY_TEMP (nvmlDeviceGetFieldValues); ErrNotSupported
	// on boards without a memory sensor.
	MemoryTemperature() (uint32, error)
	// UncorrectedECCVolatile is nvmlDeviceGetTotalEccErrors(UNCORRECTED,
	// VOLATILE_ECC): uncorrectable errors since the last driver load.
	UncorrectedECCVolatile() (uint64, error)
	RemappedRows() (RemappedRows, error) // nvmlDeviceGetRemappedRows
	// RetiredPages is nvmlDeviceGetRetiredPages for both causes plus
	// nvmlDeviceGetRetiredPagesPendingStatus.
	RetiredPages() (RetiredPages, error)
	ClocksEventReasons() (uint64, error) // nvmlDeviceGetCurrentClocksEventReasons
	Temperature() (uint32, error)        // nvmlDeviceGetTemperature(GPU), °C
	// SlowdownTemperature is nvmlDeviceGetTemperatureThreshold(SLOWDOWN): the
	// device's own point where it starts throttling, °C.
	SlowdownTemperature() (uint32, error)
	// PCIeLink is nvmlDeviceGetCurrPcieLinkGeneration/Width and
	// nvmlDeviceGetMaxPcieLinkGeneration/Width (the max the device and this
	// system's slot support together).
	PCIeLink() (PCIeLink, error)
	PCIeReplayCounter() (uint64, error) // nvmlDeviceGetPcieReplayCounter
	// Architecture is nvmlDeviceGetArchitecture: which NVLink counters the
	// device has depends on it.
	Architecture() (Arch, error)
	// NVLinks walks the links the device has: nvmlDeviceGetNvLinkState,
	// nvmlDeviceGetNvLinkRemoteDeviceType, and the link's error and traffic
	// counters from where its generation keeps them (see NVLink.Errors).
	// A device without NVLink returns ErrNotSupported.
	NVLinks() ([]NVLink, error)
	// FabricInfo is nvmlDeviceGetGpuFabricInfoV (v1 where the driver has
	// no later version): the GPU's registration with the NVLink fabric
	// (the fabric manager's view on NVSwitch systems).
	FabricInfo() (FabricInfo, error)
	PowerUsage() (uint32, error)         // nvmlDeviceGetPowerUsage, milliwatts
	EnforcedPowerLimit() (uint32, error) // nvmlDeviceGetEnforcedPowerLimit, milliwatts
	SMClockMHz() (uint32, error)         // nvmlDeviceGetClockInfo(SM): the SM clock now
	// BaseSMClockMHz is what a stage's sustained clock is compared with:
	// nvmlDeviceGetDefaultApplicationsClock(SM), the clock the board
	// targets under load, or nvmlDeviceGetMaxClockInfo(SM) where the board
	// has no default.
	BaseSMClockMHz() (uint32, error)
}

// XidWatcher is an NVML event set. Wait is nvmlEventSetWait_v2.
type XidWatcher interface {
	// Wait returns the next Xid event, or ErrTimeout if none came within
	// timeout (0 polls).
	Wait(timeout time.Duration) (XidEvent, error)
	Close() error // nvmlEventSetFree
}

// XidEvent is one Xid reported by the driver for a device.
type XidEvent struct {
	Index int    // NVML index of the device
	Xid   uint64 // nvmlEventData_t.eventData
}

// PCIInfo identifies a device on the bus.
type PCIInfo struct {
	BusID    string // "00000000:18:00.0" as NVML formats it
	DeviceID uint32 // (device << 16) | vendor, e.g. 0x233010DE for H100 SXM
}

// RemappedRows is nvmlDeviceGetRemappedRows (Ampere and later).
type RemappedRows struct {
	Correctable   int
	Uncorrectable int
	Pending       bool // a remap waits for the next GPU reset
	Failure       bool // a remap was needed and could not be done: the bank is out of spare rows
}

// RetiredPages is dynamic page retirement (before Ampere).
type RetiredPages struct {
	DoubleBit int  // pages retired for a double-bit ECC error
	SingleBit int  // pages retired for repeated single-bit errors
	Pending   bool // retirements wait for the next driver reload
}

// PCIeLink is the link's current and maximum generation and width.
type PCIeLink struct {
	CurGen, MaxGen     int
	CurWidth, MaxWidth int
}

// NVLink is one link's state and counters (cumulative since driver load).
type NVLink struct {
	Link int
	Up   bool // nvmlDeviceGetNvLinkState == NVML_FEATURE_ENABLED
	// Remote is what the link connects to
	// (nvmlDeviceGetNvLinkRemoteDeviceType): RemoteGPU, RemoteSwitch, or ""
	// when NVML cannot say.
	Remote string
	// Errors are counters of errors a healthy link does not have, by name.
	// Hopper and earlier keep them behind nvmlDeviceGetNvLinkErrorCounter
	// (crc_flit, crc_data, replay, recovery); Blackwell and later answer
	// those calls NOT_SUPPORTED and report per-link field values
	// (NVML_FI_DEV_NVLINK_COUNT_*, scope = link: malformed_packet,
	// buffer_overrun, rcv_errors, rcv_remote_errors, rcv_general_errors,
	// local_link_integrity, xmit_discards, recovery_successful,
	// recovery_failed, effective_errors).
	Errors map[string]uint64
	// Corrected are counters of errors the link corrects itself (NVLink 5
	// FEC: symbol_errors): reported, never failed on their own.
	Corrected map[string]uint64
	// TxBytes and RxBytes count the link's traffic (Blackwell:
	// NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES/RCV_BYTES; Hopper:
	// NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX, KiB, converted); Traffic
	// says they were read.
	TxBytes, RxBytes uint64
	Traffic          bool
	// Counters names where the counters came from ("error counters",
	// "field values").
	Counters string
	// CountersErr is set when the error counters could not be read.
	CountersErr error
}

// What an NVLink connects to.
const (
	RemoteGPU    = "gpu"
	RemoteSwitch = "switch"
)

// Arch is a GPU architecture as NVML numbers it (nvmlDeviceArchitecture_t).
type Arch int

// Architectures whose NVLink counters differ.
const (
	ArchVolta     Arch = 5
	ArchTuring    Arch = 6
	ArchAmpere    Arch = 7
	ArchAda       Arch = 8
	ArchHopper    Arch = 9
	ArchBlackwell Arch = 10
	ArchRubin     Arch = 13
)

func (a Arch) String() string {
	switch a {
	case ArchVolta:
		return "Volta"
	case ArchTuring:
		return "Turing"
	case ArchAmpere:
		return "Ampere"
	case ArchAda:
		return "Ada"
	case ArchHopper:
		return "Hopper"
	case ArchBlackwell:
		return "Blackwell"
	case ArchRubin:
		return "Rubin"
	}
	return "architecture " + strconv.Itoa(int(a))
}

// NVLinkFieldValues reports whether a's NVLink error counters are field
// values (Blackwell and later) rather than nvmlDeviceGetNvLinkErrorCounter.
func (a Arch) NVLinkFieldValues() bool { return a >= ArchBlackwell }

// FabricState is nvmlGpuFabricState_t.
type FabricState int

const (
	FabricNotSupported FabricState = 0
	FabricNotStarted   FabricState = 1
	FabricInProgress   FabricState = 2
	FabricCompleted    FabricState = 3
)

func (s FabricState) String() string {
	switch s {
	case FabricNotSupported:
		return "not supported"
	case FabricNotStarted:
		return "not started"
	case FabricInProgress:
		return "in progress"
	case FabricCompleted:
		return "completed"
	}
	return "state " + strconv.Itoa(int(s))
}

// FabricInfo is a GPU's registration with the NVLink fabric
// (nvmlGpuFabricInfo_t / nvmlGpuFabricInfoV_t).
type FabricInfo struct {
	State FabricState
	// Status is the registration's outcome once State is completed: nil
	// for NVML_SUCCESS, else NVML's error.
	Status      error
	CliqueID    uint32
	ClusterUUID string
	// HealthMask is the v2+ health mask (0 from v1); HealthRead says it
	// was read.
	HealthMask uint32
	HealthRead bool
}

// Unhealthy names what the health mask says is wrong (nvml.h
// NVML_GPU_FABRIC_HEALTH_MASK_*: a two-bit field per condition, 1 meaning
// "true"; the incorrect-configuration field is a four-bit code).
func (f FabricInfo) Unhealthy() []string {
	if !f.HealthRead {
		return nil
	}
	field := func(shift, mask uint32) uint32 { return f.HealthMask >> shift & mask }
	var out []string
	for _, c := range []struct {
		shift uint32
		name  string
	}{{0, "degraded bandwidth"}, {2, "route recovery in progress"}, {4, "route unhealthy"}, {6, "access timeout recovery in progress"}} {
		if field(c.shift, 0x3) == 1 {
			out = append(out, c.name)
		}
	}
	if v := field(8, 0xf); v >= 2 {
		names := map[uint32]string{2: "incorrect system GUID", 3: "incorrect chassis serial number", 4: "no partition",
			5: "insufficient NVLinks", 6: "incompatible GPU firmware", 7: "invalid location", 8: "GPU state invalid"}
		n, ok := names[v]
		if !ok {
			n = "code " + strconv.Itoa(int(v))
		}
		out = append(out, "incorrect configuration: "+n)
	}
	return out
}

// Clocks event reason bits (nvmlClocksEventReasons, nvml.h).
const (
	ReasonGPUIdle            uint64 = 0x1
	ReasonApplicationsClocks uint64 = 0x2
	ReasonSWPowerCap         uint64 = 0x4
	ReasonHWSlowdown         uint64 = 0x8
	ReasonSyncBoost          uint64 = 0x10
	ReasonSWThermalSlowdown  uint64 = 0x20
	ReasonHWThermalSlowdown  uint64 = 0x40
	ReasonHWPowerBrake       uint64 = 0x80
	ReasonDisplayClock       uint64 = 0x100
)

var reasonNames = []struct {
	bit  uint64
	name string
}{
	{ReasonGPUIdle, "gpu_idle"},
	{ReasonApplicationsClocks, "applications_clocks"},
	{ReasonSWPowerCap, "sw_power_cap"},
	{ReasonHWSlowdown, "hw_slowdown"},
	{ReasonSyncBoost, "sync_boost"},
	{ReasonSWThermalSlowdown, "sw_thermal_slowdown"},
	{ReasonHWThermalSlowdown, "hw_thermal_slowdown"},
	{ReasonHWPowerBrake, "hw_power_brake"},
	{ReasonDisplayClock, "display_clock"},
}

// ReasonNames spells out a clocks-event-reason mask, lowest bit first.
func ReasonNames(mask uint64) []string {
	var out []string
	for _, r := range reasonNames {
		if mask&r.bit != 0 {
			out = append(out, r.name)
			mask &^= r.bit
		}
	}
	if mask != 0 {
		out = append(out, "unknown_"+hex(mask))
	}
	return out
}

func hex(v uint64) string {
	const digits = "0123456789abcdef"
	if v == 0 {
		return "0x0"
	}
	var b []byte
	for ; v > 0; v >>= 4 {
		b = append([]byte{digits[v&0xf]}, b...)
	}
	return "0x" + string(b)
}
