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
	// NVLinks walks nvmlDeviceGetNvLinkState and nvmlDeviceGetNvLinkErrorCounter
	// over the links the device has. A device without NVLink returns
	// ErrNotSupported.
	NVLinks() ([]NVLink, error)
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

// NVLink is one link's state and error counters (cumulative since driver load).
type NVLink struct {
	Link     int
	Up       bool   // nvmlDeviceGetNvLinkState == NVML_FEATURE_ENABLED
	CRC      uint64 // NVML_NVLINK_ERROR_DL_CRC_FLIT + NVML_NVLINK_ERROR_DL_CRC_DATA
	Replay   uint64 // NVML_NVLINK_ERROR_DL_REPLAY
	Recovery uint64 // NVML_NVLINK_ERROR_DL_RECOVERY
	// CountersErr is set when the counters could not be read (Blackwell
	// moved them to field values; some drivers return NOT_SUPPORTED here).
	CountersErr error
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
