package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"
)

// reading is one query's answer: a value or why there is none.
type reading[T any] struct {
	V   T
	Err error
}

func read[T any](f func() (T, error)) reading[T] {
	v, err := f()
	return reading[T]{V: v, Err: err}
}

// Sample is what one sampling tick saw on one GPU while the load ran.
type Sample struct {
	Reasons reading[uint64]
	TempC   reading[uint32]
	PowerMW reading[uint32]
	Link    reading[PCIeLink]
	MemC    reading[uint32] // HBM temperature
}

// DeviceObservation is everything read from one GPU over a run. It is plain
// data: Evaluate turns it into verdicts without touching a device.
type DeviceObservation struct {
	Component string // gpu/<n>
	NVMLIndex int    // -1 when no NVML device answers for this component
	BusID     string // normalised; "" when unknown
	Err       error  // the device could not be opened (lost, missing)

	Name       reading[string]
	PCI        reading[PCIInfo]
	UUID       reading[string]
	Serial     reading[string]
	VBIOS      reading[string]
	BoardPN    reading[string]
	SlowdownC  reading[uint32]
	LimitMW    reading[uint32]
	ECC        reading[uint64]
	Remap      reading[RemappedRows]
	Retired    *reading[RetiredPages] // read only where row remapping is not supported
	ReplayPre  reading[uint64]
	ReplayPost reading[uint64]
	Arch       reading[Arch]
	LinksPre   reading[[]NVLink]
	LinksPost  reading[[]NVLink]
	Fabric     reading[FabricInfo] // read after the load
	Samples    []Sample
	Xids       []uint64
	XidErr     error
	Loaded     bool // a load ran during the samples
}

// Observation is a whole run: what NVML reported system-wide and per GPU.
type Observation struct {
	Count   reading[int]
	Devices []DeviceObservation
	LoadErr error
}

// Options control a run.
type Options struct {
	// Load is the workload to run while sampling (gpu-burn, dcgmi diag);
	// the run samples until it returns. Nil: sample for Duration with no
	// workload of our own.
	Load func(ctx context.Context) error
	// Duration is how long to sample when Load is nil; 0 takes one sample.
	Duration time.Duration
	// Interval between samples; default 1s.
	Interval time.Duration
	Log      *slog.Logger
}

// xidPoll bounds each nvmlEventSetWait so the watcher notices the end of
// the run promptly.
const xidPoll = 250 * time.Millisecond

// Run collects an observation and evaluates it: the whole check.
func Run(ctx context.Context, lib Library, exp Expect, opt Options) ([]Verdict, error) {
	if err := exp.Validate(); err != nil {
		return nil, err
	}
	obs := Collect(ctx, lib, exp, opt)
	return Evaluate(obs, exp), nil
}

// Collect reads the GPUs before, during and after the load. It never fails
// as a whole: every query's error is kept in the observation so each
// sub-component gets its own ERROR/SKIP/FAIL verdict.
func Collect(ctx context.Context, lib Library, exp Expect, opt Options) *Observation {
	log := opt.Log
	if log == nil {
		log = slog.Default()
	}
	if opt.Interval <= 0 {
		opt.Interval = time.Second
	}
	obs := &Observation{Count: read(lib.DeviceCount)}
	if obs.Count.Err != nil {
		log.Error("gpu: nvmlDeviceGetCount failed", "err", obs.Count.Err)
		return obs
	}
	devs, live := nameDevices(openHandles(lib, obs.Count.V), exp.BusIDs)
	watchIdx := readBefore(devs, live)
	xw := watchXid(lib, watchIdx, log)

	// The load, and samples while it runs.
	sample := func() {
		for i, dev := range live {
			if dev == nil {
				continue
			}
			devs[i].Samples = append(devs[i].Samples, Sample{
				Reasons: read(dev.ClocksEventReasons),
				TempC:   read(dev.Temperature),
				PowerMW: read(dev.PowerUsage),
				Link:    read(dev.PCIeLink),
				MemC:    read(dev.MemoryTemperature),
			})
		}
	}
	obs.LoadErr = sampleWhile(ctx, opt, sample)
	if opt.Load != nil {
		for i := range devs {
			devs[i].Loaded = true
		}
	}
	xids, xidErr := xw.stop(log)
	readAfter(devs, live, xids, xidErr)
	obs.Devices = devs
	return obs
}

// gpuHandle is one NVML index opened (or not) and its bus address.
type gpuHandle struct {
	idx int
	dev Device
	err error
	bus string
}

func openHandles(lib Library, n int) []gpuHandle {
	var handles []gpuHandle
	for i := 0; i < n; i++ {
		h := gpuHandle{idx: i}
		h.dev, h.err = lib.DeviceByIndex(i)
		if h.err == nil {
			if pci, err := h.dev.PCI(); err == nil {
				h.bus = NormalizeBusID(pci.BusID)
			}
		}
		handles = append(handles, h)
	}
	return handles
}

// nameDevices names the components: by expected bus address when given,
// else by NVML index. live[i] is devs[i]'s open device, nil when there is
// none to query.
func nameDevices(handles []gpuHandle, busIDs []string) (devs []DeviceObservation, live []Device) {
	add := func(comp string, h *gpuHandle) {
		d := DeviceObservation{Component: comp, NVMLIndex: -1}
		if h != nil {
			d.NVMLIndex, d.BusID, d.Err = h.idx, h.bus, h.err
		}
		devs = append(devs, d)
		if h != nil && h.err == nil {
			live = append(live, h.dev)
		} else {
			live = append(live, nil)
		}
	}
	if len(busIDs) == 0 {
		for i := range handles {
			add("gpu/"+strconv.Itoa(handles[i].idx), &handles[i])
		}
		return devs, live
	}
	byBus := map[string]*gpuHandle{}
	var lost []string
	for i := range handles {
		switch {
		case handles[i].bus != "":
			byBus[handles[i].bus] = &handles[i]
		case handles[i].err != nil:
			lost = append(lost, fmt.Sprintf("NVML index %d: %v", handles[i].idx, handles[i].err))
		}
	}
	for j, b := range busIDs {
		nb := NormalizeBusID(b)
		if h, ok := byBus[nb]; ok {
			add("gpu/"+strconv.Itoa(j), h)
			delete(byBus, nb)
			continue
		}
		msg := "no GPU answers at " + nb
		if len(lost) > 0 {
			msg += " (unopened devices: " + joinComma(lost) + ")"
		}
		add("gpu/"+strconv.Itoa(j), nil)
		devs[len(devs)-1].BusID = nb
		devs[len(devs)-1].Err = errors.New(msg)
	}
	// GPUs at addresses nobody expected are still checked, named by address.
	var extra []string
	for b := range byBus {
		extra = append(extra, b)
	}
	sort.Strings(extra)
	for _, b := range extra {
		add("gpu/"+b, byBus[b])
	}
	return devs, live
}

// readBefore reads, before the load, identity, limits and the counters we
// take deltas of; it returns the NVML indexes to watch for Xids.
func readBefore(devs []DeviceObservation, live []Device) (watchIdx []int) {
	for i, dev := range live {
		if dev == nil {
			continue
		}
		d := &devs[i]
		d.Name = read(dev.Name)
		d.PCI = read(dev.PCI)
		d.UUID = read(dev.UUID)
		d.Serial = read(dev.Serial)
		d.VBIOS = read(dev.VBIOSVersion)
		d.BoardPN = read(dev.BoardPartNumber)
		d.SlowdownC = read(dev.SlowdownTemperature)
		d.LimitMW = read(dev.EnforcedPowerLimit)
		d.ReplayPre = read(dev.PCIeReplayCounter)
		d.Arch = read(dev.Architecture)
		d.LinksPre = read(dev.NVLinks)
		watchIdx = append(watchIdx, d.NVMLIndex)
	}
	return watchIdx
}

// xidWatch collects Xid events for the whole run.
type xidWatch struct {
	w    XidWatcher
	xids []XidEvent
	err  error
	quit chan struct{}
	done sync.WaitGroup
}

func watchXid(lib Library, idx []int, log *slog.Logger) *xidWatch {
	x := &xidWatch{quit: make(chan struct{})}
	w, err := lib.WatchXid(idx)
	x.w = w
	if err != nil {
		x.err = err
		log.Warn("gpu: cannot watch Xid events", "err", err)
		return x
	}
	x.done.Add(1)
	go func() {
		defer x.done.Done()
		x.xids, x.err = watchXids(w, x.quit)
	}()
	return x
}

// stop ends the watch and returns what it saw.
func (x *xidWatch) stop(log *slog.Logger) ([]XidEvent, error) {
	close(x.quit)
	x.done.Wait()
	if x.w != nil {
		if err := x.w.Close(); err != nil {
			log.Warn("gpu: freeing the NVML event set", "err", err)
		}
	}
	return x.xids, x.err
}

// readAfter reads, after the load, the error counters, and files the Xids
// under their devices.
func readAfter(devs []DeviceObservation, live []Device, xids []XidEvent, xidErr error) {
	for i, dev := range live {
		if dev == nil {
			continue
		}
		d := &devs[i]
		d.ECC = read(dev.UncorrectedECCVolatile)
		d.Remap = read(dev.RemappedRows)
		if errors.Is(d.Remap.Err, ErrNotSupported) {
			r := read(dev.RetiredPages)
			d.Retired = &r
		}
		d.ReplayPost = read(dev.PCIeReplayCounter)
		d.LinksPost = read(dev.NVLinks)
		d.Fabric = read(dev.FabricInfo)
		d.XidErr = xidErr
		for _, e := range xids {
			if e.Index == d.NVMLIndex {
				d.Xids = append(d.Xids, e.Xid)
			}
		}
	}
}

// sampleWhile takes one sample at once, then one per Interval until the
// load returns (or Duration passes without a load, or ctx ends).
func sampleWhile(ctx context.Context, opt Options, sample func()) error {
	done := make(chan error, 1)
	switch {
	case opt.Load != nil:
		go func() { done <- opt.Load(ctx) }()
	case opt.Duration > 0:
		t := time.AfterFunc(opt.Duration, func() { done <- nil })
		defer t.Stop()
	default:
		done <- nil
	}
	tick := time.NewTicker(opt.Interval)
	defer tick.Stop()
	for {
		sample()
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			if opt.Load != nil {
				return <-done // the load owns ctx too; wait for it to stop
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func watchXids(w XidWatcher, stop <-chan struct{}) ([]XidEvent, error) {
	var out []XidEvent
	for {
		select {
		case <-stop:
			// Drain what is queued; bounded in case the source never runs dry.
			for range 4096 {
				ev, err := w.Wait(0)
				if errors.Is(err, ErrTimeout) {
					return out, nil
				}
				if err != nil {
					return out, err
				}
				out = append(out, ev)
			}
			return out, nil
		default:
		}
		ev, err := w.Wait(xidPoll)
		if errors.Is(err, ErrTimeout) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("waiting for Xid events: %w", err)
		}
		out = append(out, ev)
	}
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}
