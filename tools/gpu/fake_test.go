package gpu

import (
	"fmt"
	"sync"
	"time"
)

// fakeDev is a healthy H100-like GPU unless a test changes its fields.
type fakeDev struct {
	name     string
	bus      string
	devID    uint32
	ecc      uint64
	remap    RemappedRows
	remapErr error
	retired  RetiredPages
	reasons  uint64
	temp     uint32
	slowdown uint32
	link     PCIeLink
	replay   []uint64 // successive reads
	links    []NVLink
	linksAft []NVLink // what the second NVLinks() read returns, if set
	powerMW  uint32
	limitMW  uint32
	lost     bool
	serial   string
	vbios    string
	boardPN  string
	memTemp  uint32 // 0: no memory sensor
	arch     Arch
	fabric   FabricInfo

	mu      sync.Mutex
	replayN int
	linksN  int
}

func healthyDev(i int) *fakeDev {
	d := &fakeDev{
		name: "NVIDIA H100 80GB HBM3", bus: fmt.Sprintf("00000000:%02X:00.0", 0x18+i), devID: 0x233010DE,
		reasons: ReasonSWPowerCap, temp: 71, slowdown: 87,
		link:   PCIeLink{CurGen: 5, MaxGen: 5, CurWidth: 16, MaxWidth: 16},
		replay: []uint64{3, 3}, powerMW: 690000, limitMW: 700000,
		serial: fmt.Sprintf("165402408549%d", i), vbios: "96.00.A5.00.1A", boardPN: "692-2G520-0282-000",
	}
	d.arch = ArchHopper
	d.fabric = FabricInfo{State: FabricCompleted, CliqueID: 1, ClusterUUID: "cluster-a"}
	for l := 0; l < 18; l++ {
		d.links = append(d.links, NVLink{Link: l, Up: true, Remote: RemoteSwitch, Counters: "error counters",
			Errors: map[string]uint64{"crc_flit": 0, "crc_data": 0, "replay": 0, "recovery": 0}})
	}
	return d
}

func (d *fakeDev) chk() error {
	if d.lost {
		return ErrGPULost
	}
	return nil
}
func (d *fakeDev) Name() (string, error)            { return d.name, d.chk() }
func (d *fakeDev) UUID() (string, error)            { return "GPU-" + d.bus, d.chk() }
func (d *fakeDev) PCI() (PCIInfo, error)            { return PCIInfo{BusID: d.bus, DeviceID: d.devID}, d.chk() }
func (d *fakeDev) Serial() (string, error)          { return d.serial, d.chk() }
func (d *fakeDev) VBIOSVersion() (string, error)    { return d.vbios, d.chk() }
func (d *fakeDev) BoardPartNumber() (string, error) { return d.boardPN, d.chk() }
func (d *fakeDev) MemoryTemperature() (uint32, error) {
	if d.memTemp == 0 {
		return 0, ErrNotSupported
	}
	return d.memTemp, d.chk()
}
func (d *fakeDev) UncorrectedECCVolatile() (uint64, error) { return d.ecc, d.chk() }
func (d *fakeDev) RemappedRows() (RemappedRows, error) {
	if d.remapErr != nil {
		return RemappedRows{}, d.remapErr
	}
	return d.remap, d.chk()
}
func (d *fakeDev) RetiredPages() (RetiredPages, error)  { return d.retired, d.chk() }
func (d *fakeDev) ClocksEventReasons() (uint64, error)  { return d.reasons, d.chk() }
func (d *fakeDev) Temperature() (uint32, error)         { return d.temp, d.chk() }
func (d *fakeDev) SlowdownTemperature() (uint32, error) { return d.slowdown, d.chk() }
func (d *fakeDev) PCIeLink() (PCIeLink, error)          { return d.link, d.chk() }
func (d *fakeDev) PowerUsage() (uint32, error)          { return d.powerMW, d.chk() }
func (d *fakeDev) EnforcedPowerLimit() (uint32, error)  { return d.limitMW, d.chk() }
func (d *fakeDev) PCIeReplayCounter() (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.replay[min(d.replayN, len(d.replay)-1)]
	d.replayN++
	return v, d.chk()
}
func (d *fakeDev) Architecture() (Arch, error)     { return d.arch, d.chk() }
func (d *fakeDev) FabricInfo() (FabricInfo, error) { return d.fabric, d.chk() }
func (d *fakeDev) NVLinks() ([]NVLink, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.linksN++
	if d.linksN > 1 && d.linksAft != nil {
		return d.linksAft, d.chk()
	}
	if d.links == nil {
		return nil, ErrNotSupported
	}
	return d.links, d.chk()
}

type fakeLib struct {
	devs     []*fakeDev
	xids     []XidEvent
	watchErr error
}

func (l *fakeLib) DeviceCount() (int, error) { return len(l.devs), nil }
func (l *fakeLib) DeviceByIndex(i int) (Device, error) {
	if i < 0 || i >= len(l.devs) {
		return nil, fmt.Errorf("index %d: invalid argument", i)
	}
	if l.devs[i].lost {
		return nil, ErrGPULost
	}
	return l.devs[i], nil
}
func (l *fakeLib) WatchXid(idx []int) (XidWatcher, error) {
	if l.watchErr != nil {
		return nil, l.watchErr
	}
	return &fakeWatcher{q: append([]XidEvent(nil), l.xids...)}, nil
}

type fakeWatcher struct {
	mu sync.Mutex
	q  []XidEvent
}

func (w *fakeWatcher) Wait(timeout time.Duration) (XidEvent, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.q) == 0 {
		time.Sleep(min(timeout, time.Millisecond)) // block like nvmlEventSetWait, briefly
		return XidEvent{}, ErrTimeout
	}
	e := w.q[0]
	w.q = w.q[1:]
	return e, nil
}
func (w *fakeWatcher) Close() error { return nil }

func newFakeLib(n int) *fakeLib {
	l := &fakeLib{}
	for i := 0; i < n; i++ {
		l.devs = append(l.devs, healthyDev(i))
	}
	return l
}
