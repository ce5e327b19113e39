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
	// fabricV: the library is NVML itself, whose versioned fabric query
	// (nvmlDeviceGetGpuFabricInfoV) carries the health mask; go-nvml's
	// mocks cannot answer it (its handler wraps the C device), so New
	// reads the v1 query only.
	fabricV bool
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
	return &Source{lib: lib, fabricV: true}, nil
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
	return &device{d: d, index: i, fabricV: s.fabricV}, nil
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
	d       nvml.Device
	index   int
	fabricV bool
	arch    *gpu.Arch // read once: the NVLink counters depend on it
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

func (d *device) Architecture() (gpu.Arch, error) {
	if d.arch != nil {
		return *d.arch, nil
	}
	a, ret := d.d.GetArchitecture()
	if ret != nvml.SUCCESS {
		return 0, d.call("nvmlDeviceGetArchitecture", ret)
	}
	arch := gpu.Arch(a)
	d.arch = &arch
	return arch, nil
}

// NVLinks walks links 0..NVML_NVLINK_MAX_LINKS-1. NVML answers
// NOT_SUPPORTED or INVALID_ARGUMENT for link numbers the device does not
// have; a device where every link answers so has no NVLink. Each up link's
// counters come from where its generation keeps them: field values on
// Blackwell and later (nvmlDeviceGetNvLinkErrorCounter is not supported
// there), the error-counter calls before.
func (d *device) NVLinks() ([]gpu.NVLink, error) {
	fields := false
	if a, err := d.Architecture(); err == nil {
		fields = a.NVLinkFieldValues()
	}
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
			l.Remote = d.remote(link)
			if fields {
				l.Counters = "field values"
				l.CountersErr = d.linkFields(link, &l)
			} else {
				l.Counters = "error counters"
				l.CountersErr = d.linkCounters(link, &l)
				d.linkThroughput(link, &l)
			}
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		return nil, d.call("nvmlDeviceGetNvLinkState", nvml.ERROR_NOT_SUPPORTED)
	}
	return out, nil
}

// remote is nvmlDeviceGetNvLinkRemoteDeviceType: "" when NVML cannot say.
func (d *device) remote(link int) string {
	t, ret := d.d.GetNvLinkRemoteDeviceType(link)
	if ret != nvml.SUCCESS {
		return ""
	}
	switch t {
	case nvml.NVLINK_DEVICE_TYPE_SWITCH:
		return gpu.RemoteSwitch
	case nvml.NVLINK_DEVICE_TYPE_GPU:
		return gpu.RemoteGPU
	}
	return ""
}

func (d *device) linkCounters(link int, l *gpu.NVLink) error {
	var errs []error
	l.Errors = map[string]uint64{}
	for _, c := range []struct {
		c    nvml.NvLinkErrorCounter
		name string
	}{{nvml.NVLINK_ERROR_DL_CRC_FLIT, "crc_flit"}, {nvml.NVLINK_ERROR_DL_CRC_DATA, "crc_data"},
		{nvml.NVLINK_ERROR_DL_REPLAY, "replay"}, {nvml.NVLINK_ERROR_DL_RECOVERY, "recovery"}} {
		v, ret := d.d.GetNvLinkErrorCounter(link, c.c)
		if ret != nvml.SUCCESS {
			errs = append(errs, d.call(fmt.Sprintf("nvmlDeviceGetNvLinkErrorCounter(link %d, %s)", link, c.name), ret))
			continue
		}
		l.Errors[c.name] = v
	}
	return errors.Join(errs...)
}

// linkThroughput reads Hopper's per-link data counters (KiB), leaving
// Traffic false where the driver has none.
func (d *device) linkThroughput(link int, l *gpu.NVLink) {
	vals := []nvml.FieldValue{
		{FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ScopeId: uint32(link)},
		{FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ScopeId: uint32(link)},
	}
	if d.d.GetFieldValues(vals) != nvml.SUCCESS {
		return
	}
	tx, ok1 := fieldOK(vals[0])
	rx, ok2 := fieldOK(vals[1])
	if ok1 && ok2 {
		l.TxBytes, l.RxBytes, l.Traffic = tx<<10, rx<<10, true
	}
}

// nvlinkErrorFields are NVLink 5's per-link error counters
// (NVML_FI_DEV_NVLINK_COUNT_*, scope = link), the ones DCGM's NVLink
// health watches on Blackwell; symbol errors are FEC-corrected.
var nvlinkErrorFields = []struct {
	id        uint32
	name      string
	corrected bool
}{
	{nvml.FI_DEV_NVLINK_COUNT_MALFORMED_PACKET_ERRORS, "malformed_packet", false},
	{nvml.FI_DEV_NVLINK_COUNT_BUFFER_OVERRUN_ERRORS, "buffer_overrun", false},
	{nvml.FI_DEV_NVLINK_COUNT_RCV_ERRORS, "rcv_errors", false},
	{nvml.FI_DEV_NVLINK_COUNT_RCV_REMOTE_ERRORS, "rcv_remote_errors", false},
	{nvml.FI_DEV_NVLINK_COUNT_RCV_GENERAL_ERRORS, "rcv_general_errors", false},
	{nvml.FI_DEV_NVLINK_COUNT_LOCAL_LINK_INTEGRITY_ERRORS, "local_link_integrity", false},
	{nvml.FI_DEV_NVLINK_COUNT_XMIT_DISCARDS, "xmit_discards", false},
	{nvml.FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS, "recovery_successful", false},
	{nvml.FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS, "recovery_failed", false},
	{nvml.FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS, "effective_errors", false},
	{nvml.FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS, "symbol_errors", true},
}

// linkFields reads one link's NVLink 5 counters in one
// nvmlDeviceGetFieldValues call: the error counters, then the traffic.
func (d *device) linkFields(link int, l *gpu.NVLink) error {
	vals := make([]nvml.FieldValue, 0, len(nvlinkErrorFields)+2)
	for _, f := range nvlinkErrorFields {
		vals = append(vals, nvml.FieldValue{FieldId: f.id, ScopeId: uint32(link)})
	}
	vals = append(vals, nvml.FieldValue{FieldId: nvml.FI_DEV_NVLINK_COUNT_XMIT_BYTES, ScopeId: uint32(link)},
		nvml.FieldValue{FieldId: nvml.FI_DEV_NVLINK_COUNT_RCV_BYTES, ScopeId: uint32(link)})
	if ret := d.d.GetFieldValues(vals); ret != nvml.SUCCESS {
		return d.call(fmt.Sprintf("nvmlDeviceGetFieldValues(NVLink %d counters)", link), ret)
	}
	var errs []error
	l.Errors, l.Corrected = map[string]uint64{}, map[string]uint64{}
	for i, f := range nvlinkErrorFields {
		v, err := d.fieldValue(vals[i], fmt.Sprintf("link %d %s", link, f.name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if f.corrected {
			l.Corrected[f.name] = v
		} else {
			l.Errors[f.name] = v
		}
	}
	n := len(nvlinkErrorFields)
	tx, ok1 := fieldOK(vals[n])
	rx, ok2 := fieldOK(vals[n+1])
	if ok1 && ok2 {
		l.TxBytes, l.RxBytes, l.Traffic = tx, rx, true
	}
	return errors.Join(errs...)
}

// fieldValue is one field's number, or its own error (a field can fail
// while the call as a whole succeeds).
func (d *device) fieldValue(f nvml.FieldValue, what string) (uint64, error) {
	if ret := nvml.Return(f.NvmlReturn); ret != nvml.SUCCESS {
		return 0, d.call("nvmlDeviceGetFieldValues("+what+")", ret)
	}
	v, ok := fieldUint(f)
	if !ok {
		return 0, fmt.Errorf("nvmlDeviceGetFieldValues(%s)(gpu %d): value type %d is not a count", what, d.index, f.ValueType)
	}
	return v, nil
}

func fieldOK(f nvml.FieldValue) (uint64, bool) {
	if nvml.Return(f.NvmlReturn) != nvml.SUCCESS {
		return 0, false
	}
	return fieldUint(f)
}

// FabricInfo reads the GPU's fabric registration: the versioned query
// (health mask) from NVML itself, v1 where the driver predates it or the
// library is a mock.
func (d *device) FabricInfo() (gpu.FabricInfo, error) {
	if d.fabricV {
		v3, ret := d.d.GetGpuFabricInfoV().V3()
		if ret == nvml.SUCCESS {
			return fabricInfo(v3.State, v3.Status, v3.CliqueId, v3.ClusterUuid, v3.HealthMask, true), nil
		}
		if ret != nvml.ERROR_FUNCTION_NOT_FOUND && ret != nvml.ERROR_ARGUMENT_VERSION_MISMATCH {
			return gpu.FabricInfo{}, d.call("nvmlDeviceGetGpuFabricInfoV", ret)
		}
	}
	v1, ret := d.d.GetGpuFabricInfo()
	if ret != nvml.SUCCESS {
		return gpu.FabricInfo{}, d.call("nvmlDeviceGetGpuFabricInfo", ret)
	}
	return fabricInfo(v1.State, v1.Status, v1.CliqueId, v1.ClusterUuid, 0, false), nil
}

func fabricInfo(state uint8, status uint32, clique uint32, cluster [16]uint8, mask uint32, health bool) gpu.FabricInfo {
	f := gpu.FabricInfo{State: gpu.FabricState(state), CliqueID: clique, HealthMask: mask, HealthRead: health}
	if gpu.FabricState(state) == gpu.FabricCompleted {
		f.Status = toErr(nvml.Return(status))
	}
	if cluster != ([16]uint8{}) {
		f.ClusterUUID = fmt.Sprintf("%x-%x-%x-%x-%x", cluster[0:4], cluster[4:6], cluster[6:8], cluster[8:10], cluster[10:16])
	}
	return f
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
