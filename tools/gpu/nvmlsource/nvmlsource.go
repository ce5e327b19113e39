//go:build cgo

package nvmlsource

import (
	"errors"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/cure-oss/cure/tools/gpu"
)

// Source is a gpu.Library over an nvml.Interface (the real library from
// nvml.New, or one of go-nvml's mocks).
type Source struct {
	lib nvml.Interface
}

var _ gpu.Library = (*Source)(nil)

// Open initialises NVML (nvmlInit_v2). libPath "" uses the default
// libnvidia-ml.so.1 search. Close shuts it down.
func Open(libPath string) (*Source, error) {
	var opts []nvml.LibraryOption
	if libPath != "" {
		opts = append(opts, nvml.WithLibraryPath(libPath))
	}
	lib := nvml.New(opts...)
	if ret := lib.Init(); ret != nvml.SUCCESS {
		where := "libnvidia-ml.so.1"
		if libPath != "" {
			where = libPath
		}
		return nil, fmt.Errorf("nvmlInit via %s: %w", where, toErr(ret))
	}
	return &Source{lib: lib}, nil
}

// New wraps an already initialised nvml.Interface (tests pass go-nvml mocks).
func New(lib nvml.Interface) *Source { return &Source{lib: lib} }

// Close is nvmlShutdown.
func (s *Source) Close() error {
	if ret := s.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvmlShutdown: %w", toErr(ret))
	}
	return nil
}

// DriverVersion is nvmlSystemGetDriverVersion, for the report.
func (s *Source) DriverVersion() (string, error) {
	v, ret := s.lib.SystemGetDriverVersion()
	return v, wrap("nvmlSystemGetDriverVersion", ret)
}

// nvmlError keeps NVML's return code and text.
type nvmlError struct{ ret nvml.Return }

func (e nvmlError) Error() string {
	return fmt.Sprintf("%s (NVML %d)", nvml.ErrorString(e.ret), int32(e.ret))
}

func (e nvmlError) Is(target error) bool {
	switch target {
	case gpu.ErrNotSupported:
		return e.ret == nvml.ERROR_NOT_SUPPORTED || e.ret == nvml.ERROR_FUNCTION_NOT_FOUND
	case gpu.ErrGPULost:
		return e.ret == nvml.ERROR_GPU_IS_LOST
	case gpu.ErrTimeout:
		return e.ret == nvml.ERROR_TIMEOUT
	}
	return false
}

func toErr(ret nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	return nvmlError{ret}
}

func wrap(call string, ret nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	return fmt.Errorf("%s: %w", call, nvmlError{ret})
}

func (s *Source) DeviceCount() (int, error) {
	n, ret := s.lib.DeviceGetCount()
	return n, wrap("nvmlDeviceGetCount", ret)
}

func (s *Source) DeviceByIndex(i int) (gpu.Device, error) {
	d, ret := s.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return nil, wrap(fmt.Sprintf("nvmlDeviceGetHandleByIndex(%d)", i), ret)
	}
	return &device{d: d, index: i}, nil
}

// WatchXid registers every device for Xid events on one event set.
func (s *Source) WatchXid(indices []int) (gpu.XidWatcher, error) {
	set, ret := s.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return nil, wrap("nvmlEventSetCreate", ret)
	}
	w := &watcher{set: set, index: map[nvml.Device]int{}}
	for _, i := range indices {
		d, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			w.Close()
			return nil, wrap(fmt.Sprintf("nvmlDeviceGetHandleByIndex(%d)", i), ret)
		}
		if ret := d.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
			w.Close()
			return nil, wrap(fmt.Sprintf("nvmlDeviceRegisterEvents(gpu %d, Xid)", i), ret)
		}
		w.index[d] = i
	}
	return w, nil
}

type watcher struct {
	set   nvml.EventSet
	index map[nvml.Device]int
}

func (w *watcher) Wait(timeout time.Duration) (gpu.XidEvent, error) {
	ev, ret := w.set.Wait(uint32(timeout / time.Millisecond))
	if ret != nvml.SUCCESS {
		return gpu.XidEvent{}, wrap("nvmlEventSetWait", ret)
	}
	idx, ok := w.index[ev.Device]
	if !ok && ev.Device != nil {
		// Handles are stable per device in NVML, but ask if the map misses.
		var r nvml.Return
		if idx, r = ev.Device.GetIndex(); r != nvml.SUCCESS {
			idx = -1
		}
	}
	return gpu.XidEvent{Index: idx, Xid: ev.EventData}, nil
}

func (w *watcher) Close() error { return wrap("nvmlEventSetFree", w.set.Free()) }

type device struct {
	d     nvml.Device
	index int
}

func (d *device) call(name string, ret nvml.Return) error {
	return wrap(fmt.Sprintf("%s(gpu %d)", name, d.index), ret)
}

func (d *device) Name() (string, error) {
	v, ret := d.d.GetName()
	return v, d.call("nvmlDeviceGetName", ret)
}

func (d *device) UUID() (string, error) {
	v, ret := d.d.GetUUID()
	return v, d.call("nvmlDeviceGetUUID", ret)
}

func (d *device) Serial() (string, error) {
	v, ret := d.d.GetSerial()
	return v, d.call("nvmlDeviceGetSerial", ret)
}

func (d *device) VBIOSVersion() (string, error) {
	v, ret := d.d.GetVbiosVersion()
	return v, d.call("nvmlDeviceGetVbiosVersion", ret)
}

func (d *device) BoardPartNumber() (string, error) {
	v, ret := d.d.GetBoardPartNumber()
	return v, d.call("nvmlDeviceGetBoardPartNumber", ret)
}

// MemoryTemperature reads field NVML_FI_DEV_MEMORY_TEMP. The call can
// succeed as a whole while the field itself fails (its nvmlReturn), which
// is how a board without the sensor answers.
func (d *device) MemoryTemperature() (uint32, error) {
	vals := []nvml.FieldValue{{FieldId: nvml.FI_DEV_MEMORY_TEMP}}
	if ret := d.d.GetFieldValues(vals); ret != nvml.SUCCESS {
		return 0, d.call("nvmlDeviceGetFieldValues(MEMORY_TEMP)", ret)
	}
	if ret := nvml.Return(vals[0].NvmlReturn); ret != nvml.SUCCESS {
		return 0, d.call("nvmlDeviceGetFieldValues(MEMORY_TEMP)", ret)
	}
	v, ok := fieldUint(vals[0])
	if !ok {
		return 0, fmt.Errorf("nvmlDeviceGetFieldValues(MEMORY_TEMP)(gpu %d): value type %d is not a number", d.index, vals[0].ValueType)
	}
	return uint32(v), nil
}

// fieldUint reads a field value's union as its type says (nvmlValueType_t).
func fieldUint(f nvml.FieldValue) (uint64, bool) {
	b := f.Value
	le := func(n int) uint64 {
		var v uint64
		for i := n - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[i])
		}
		return v
	}
	switch nvml.ValueType(f.ValueType) {
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return le(4), true
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		return le(8), true
	case nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		if v := int64(le(8)); v >= 0 {
			return uint64(v), true
		}
	case nvml.VALUE_TYPE_SIGNED_INT:
		if v := int32(le(4)); v >= 0 {
			return uint64(v), true
		}
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		return le(2), true
	}
	return 0, false
}

func (d *device) PCI() (gpu.PCIInfo, error) {
	p, ret := d.d.GetPciInfo()
	if ret != nvml.SUCCESS {
		return gpu.PCIInfo{}, d.call("nvmlDeviceGetPciInfo", ret)
	}
	return gpu.PCIInfo{BusID: cString(p.BusId[:]), DeviceID: p.PciDeviceId}, nil
}

func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

func (d *device) UncorrectedECCVolatile() (uint64, error) {
	v, ret := d.d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	return v, d.call("nvmlDeviceGetTotalEccErrors", ret)
}

func (d *device) RemappedRows() (gpu.RemappedRows, error) {
	corr, unc, pending, failure, ret := d.d.GetRemappedRows()
	if ret != nvml.SUCCESS {
		return gpu.RemappedRows{}, d.call("nvmlDeviceGetRemappedRows", ret)
	}
	return gpu.RemappedRows{Correctable: corr, Uncorrectable: unc, Pending: pending, Failure: failure}, nil
}

func (d *device) RetiredPages() (gpu.RetiredPages, error) {
	dbe, ret := d.d.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
	if ret != nvml.SUCCESS {
		return gpu.RetiredPages{}, d.call("nvmlDeviceGetRetiredPages(DBE)", ret)
	}
	sbe, ret := d.d.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
	if ret != nvml.SUCCESS {
		return gpu.RetiredPages{}, d.call("nvmlDeviceGetRetiredPages(SBE)", ret)
	}
	pending, ret := d.d.GetRetiredPagesPendingStatus()
	if ret != nvml.SUCCESS {
		return gpu.RetiredPages{}, d.call("nvmlDeviceGetRetiredPagesPendingStatus", ret)
	}
	return gpu.RetiredPages{DoubleBit: len(dbe), SingleBit: len(sbe), Pending: pending == nvml.FEATURE_ENABLED}, nil
}

func (d *device) ClocksEventReasons() (uint64, error) {
	v, ret := d.d.GetCurrentClocksEventReasons()
	if ret == nvml.ERROR_FUNCTION_NOT_FOUND {
		// Drivers before R535 only have the older name for the same bits.
		v, ret = d.d.GetCurrentClocksThrottleReasons()
	}
	return v, d.call("nvmlDeviceGetCurrentClocksEventReasons", ret)
}

func (d *device) Temperature() (uint32, error) {
	v, ret := d.d.GetTemperature(nvml.TEMPERATURE_GPU)
	return v, d.call("nvmlDeviceGetTemperature", ret)
}

func (d *device) SlowdownTemperature() (uint32, error) {
	v, ret := d.d.GetTemperatureThreshold(nvml.TEMPERATURE_THRESHOLD_SLOWDOWN)
	return v, d.call("nvmlDeviceGetTemperatureThreshold(SLOWDOWN)", ret)
}

func (d *device) PCIeLink() (gpu.PCIeLink, error) {
	var l gpu.PCIeLink
	var ret nvml.Return
	if l.CurGen, ret = d.d.GetCurrPcieLinkGeneration(); ret != nvml.SUCCESS {
		return l, d.call("nvmlDeviceGetCurrPcieLinkGeneration", ret)
	}
	if l.MaxGen, ret = d.d.GetMaxPcieLinkGeneration(); ret != nvml.SUCCESS {
		return l, d.call("nvmlDeviceGetMaxPcieLinkGeneration", ret)
	}
	if l.CurWidth, ret = d.d.GetCurrPcieLinkWidth(); ret != nvml.SUCCESS {
		return l, d.call("nvmlDeviceGetCurrPcieLinkWidth", ret)
	}
	if l.MaxWidth, ret = d.d.GetMaxPcieLinkWidth(); ret != nvml.SUCCESS {
		return l, d.call("nvmlDeviceGetMaxPcieLinkWidth", ret)
	}
	return l, nil
}

func (d *device) PCIeReplayCounter() (uint64, error) {
	v, ret := d.d.GetPcieReplayCounter()
	return uint64(v), d.call("nvmlDeviceGetPcieReplayCounter", ret)
}

// NVLinks walks links 0..NVML_NVLINK_MAX_LINKS-1. NVML answers
// NOT_SUPPORTED or INVALID_ARGUMENT for link numbers the device does not
// have; a device where link 0 already answers so has no NVLink.
func (d *device) NVLinks() ([]gpu.NVLink, error) {
	var out []gpu.NVLink
	for link := 0; link < nvml.NVLINK_MAX_LINKS; link++ {
		state, ret := d.d.GetNvLinkState(link)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, d.call(fmt.Sprintf("nvmlDeviceGetNvLinkState(link %d)", link), ret)
		}
		l := gpu.NVLink{Link: link, Up: state == nvml.FEATURE_ENABLED}
		if l.Up {
			l.CountersErr = d.linkCounters(link, &l)
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		return nil, d.call("nvmlDeviceGetNvLinkState", nvml.ERROR_NOT_SUPPORTED)
	}
	return out, nil
}

func (d *device) linkCounters(link int, l *gpu.NVLink) error {
	var errs []error
	get := func(c nvml.NvLinkErrorCounter, name string) uint64 {
		v, ret := d.d.GetNvLinkErrorCounter(link, c)
		if ret != nvml.SUCCESS {
			errs = append(errs, d.call(fmt.Sprintf("nvmlDeviceGetNvLinkErrorCounter(link %d, %s)", link, name), ret))
		}
		return v
	}
	l.CRC = get(nvml.NVLINK_ERROR_DL_CRC_FLIT, "CRC_FLIT") + get(nvml.NVLINK_ERROR_DL_CRC_DATA, "CRC_DATA")
	l.Replay = get(nvml.NVLINK_ERROR_DL_REPLAY, "REPLAY")
	l.Recovery = get(nvml.NVLINK_ERROR_DL_RECOVERY, "RECOVERY")
	return errors.Join(errs...)
}

func (d *device) PowerUsage() (uint32, error) {
	v, ret := d.d.GetPowerUsage()
	return v, d.call("nvmlDeviceGetPowerUsage", ret)
}

func (d *device) EnforcedPowerLimit() (uint32, error) {
	v, ret := d.d.GetEnforcedPowerLimit()
	return v, d.call("nvmlDeviceGetEnforcedPowerLimit", ret)
}

func (d *device) SMClockMHz() (uint32, error) {
	v, ret := d.d.GetClockInfo(nvml.CLOCK_SM)
	return v, d.call("nvmlDeviceGetClockInfo(SM)", ret)
}

func (d *device) BaseSMClockMHz() (uint32, error) {
	v, ret := d.d.GetDefaultApplicationsClock(nvml.CLOCK_SM)
	if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND {
		v, ret = d.d.GetMaxClockInfo(nvml.CLOCK_SM)
		return v, d.call("nvmlDeviceGetMaxClockInfo(SM)", ret)
	}
	return v, d.call("nvmlDeviceGetDefaultApplicationsClock(SM)", ret)
}
