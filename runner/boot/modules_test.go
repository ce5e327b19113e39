package boot

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// fakeLoader records loads and, like the kernel, makes devices appear:
// loading virtio_pci creates a virtio device that wants virtio_net.
type fakeLoader struct {
	t       *testing.T
	sysRoot string
	mu      sync.Mutex
	loaded  []string
	fail    map[string]bool
	// netDone is set when the network-first callback ran: loads after it
	// are recorded in afterNet.
	netDone  bool
	afterNet []string
}

func (f *fakeLoader) Load(p string) error {
	name := modNameFromPath(p)
	if f.fail[name] {
		return errors.New("simulated finit_module failure")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loaded = append(f.loaded, name)
	if f.netDone {
		f.afterNet = append(f.afterNet, name)
	}
	if name == "virtio_pci" {
		writeFile(f.t, filepath.Join(f.sysRoot, "bus/virtio/devices/virtio0/modalias"), "virtio:d00000001v00001AF4\n")
	}
	return nil
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func fixture(t *testing.T) (sysRoot, modDir string) {
	root := t.TempDir()
	sysRoot = filepath.Join(root, "sys")
	modDir = filepath.Join(root, "lib/modules/6.1.0-test")
	writeFile(t, filepath.Join(sysRoot, "bus/pci/devices/0000:00:03.0/modalias"), "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00\n")
	writeFile(t, filepath.Join(sysRoot, "bus/pci/devices/0000:00:04.0/modalias"), "pci:v00001B36d00000010sv00001AF4sd00001100bc01sc08i02\n")
	writeFile(t, filepath.Join(sysRoot, "bus/pci/devices/0000:00:05.0/modalias"), "pci:v00008086d00001237sv00000000sd00000000bc06sc00i00\n") // no driver
	writeFile(t, filepath.Join(modDir, "modules.dep"), strings.Join([]string{
		"kernel/drivers/virtio/virtio.ko:",
		"kernel/drivers/virtio/virtio_ring.ko:",
		"kernel/drivers/virtio/virtio_pci_modern_dev.ko:",
		"kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_modern_dev.ko kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko",
		"kernel/net/core/failover.ko:",
		"kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko",
		"kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko",
		"kernel/drivers/nvme/host/nvme-core.ko:",
		"kernel/drivers/nvme/host/nvme.ko: kernel/drivers/nvme/host/nvme-core.ko",
		"kernel/fs/fat/fat.ko:",
		"kernel/fs/fat/vfat.ko: kernel/fs/fat/fat.ko",
	}, "\n")+"\n")
	writeFile(t, filepath.Join(modDir, "modules.alias"), strings.Join([]string{
		"# Aliases extracted from modules themselves.",
		"alias pci:v00001AF4d*sv*sd*bc*sc*i* virtio_pci",
		"alias virtio:d00000001v* virtio_net",
		"alias pci:v*d*sv*sd*bc01sc08i02* nvme",
		"alias fs-vfat vfat",
	}, "\n")+"\n")
	return sysRoot, modDir
}

// fixtureDeps is the fixture's modules.dep as name → dependencies.
var fixtureDeps = map[string][]string{
	"virtio_pci":   {"virtio_pci_modern_dev", "virtio_ring", "virtio"},
	"net_failover": {"failover"},
	"virtio_net":   {"net_failover", "virtio_ring", "virtio"},
	"nvme":         {"nvme_core"},
	"vfat":         {"fat"},
}

// checkDepOrder fails unless every module in order comes after its
// dependencies that are also in order.
func checkDepOrder(t *testing.T, order []string) {
	t.Helper()
	pos := map[string]int{}
	for i, m := range order {
		pos[m] = i
	}
	for m, deps := range fixtureDeps {
		for _, d := range deps {
			pm, okm := pos[m]
			pd, okd := pos[d]
			if okm && okd && pd > pm {
				t.Errorf("%s loaded before its dependency %s: %v", m, d, order)
			}
		}
	}
}

func TestLoadModulesForDevices(t *testing.T) {
	for _, par := range []int{1, 4} {
		sysRoot, modDir := fixture(t)
		fl := &fakeLoader{t: t, sysRoot: sysRoot}
		got, err := LoadModulesForDevices(context.Background(), sysRoot, modDir, nil,
			WithLoader(fl), WithAlwaysLoad("vfat"), WithSettle(time.Millisecond), WithProcRoot(""), WithParallel(par))
		if err != nil {
			t.Fatalf("LoadModulesForDevices: %v", err)
		}
		// Every module once, dependencies before dependants; virtio_net
		// only after virtio_pci created its device.
		want := []string{"fat", "vfat", "virtio_pci_modern_dev", "virtio_ring", "virtio", "virtio_pci", "nvme_core", "nvme", "failover", "net_failover", "virtio_net"}
		if !reflect.DeepEqual(sorted(got), sorted(want)) {
			t.Errorf("parallel %d: loaded\n got %v\nwant %v", par, got, want)
		}
		if !reflect.DeepEqual(sorted(fl.loaded), sorted(got)) {
			t.Errorf("parallel %d: loader saw %v, reported %v", par, fl.loaded, got)
		}
		checkDepOrder(t, got)
	}
}

// With the network first, the NIC's drivers (and virtio_net, which only
// appears once virtio_pci made its device) load before the callback, and
// storage and filesystems after it.
func TestLoadModulesNetworkFirst(t *testing.T) {
	sysRoot, modDir := fixture(t)
	fl := &fakeLoader{t: t, sysRoot: sysRoot}
	calls := 0
	got, err := LoadModulesForDevices(context.Background(), sysRoot, modDir, nil,
		WithLoader(fl), WithAlwaysLoad("vfat"), WithSettle(time.Millisecond), WithProcRoot(""),
		WithNetworkFirst(func() {
			calls++
			fl.mu.Lock()
			defer fl.mu.Unlock()
			fl.netDone = true
			if !slices.Contains(fl.loaded, "virtio_net") {
				t.Errorf("network callback before virtio_net loaded: %v", fl.loaded)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("network callback ran %d times", calls)
	}
	if want := []string{"fat", "nvme", "nvme_core", "vfat"}; !reflect.DeepEqual(sorted(fl.afterNet), want) {
		t.Errorf("after the network callback loaded %v, want %v", fl.afterNet, want)
	}
	checkDepOrder(t, got)
}

// The network callback runs also when loading cannot start.
func TestLoadModulesNetworkFirstCalledOnError(t *testing.T) {
	called := false
	_, err := LoadModulesForDevices(context.Background(), t.TempDir(), t.TempDir(), nil, WithNetworkFirst(func() { called = true }))
	if err == nil || !called {
		t.Fatalf("err %v, called %v", err, called)
	}
}

func TestIsNetworkModalias(t *testing.T) {
	for a, want := range map[string]bool{
		"pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00": true,  // virtio-net
		"pci:v000015B3d0000101Dsv000015B3sd00000047bc02sc00i00": true,  // ConnectX-6 Dx
		"pci:v000015B3d0000A2D6sv000015B3sd00000061bc02sc00i00": true,  // BlueField-2 (network class)
		"pci:v00001B36d00000010sv00001AF4sd00001100bc01sc08i02": false, // NVMe
		"pci:v000010DEd00002330sv000010DEsd00001626bc03sc02i00": false, // H100
		"virtio:d00000001v00001AF4":                             true,
		"virtio:d00000004v00001AF4":                             false, // rng
		"virtio:d00000010v00001AF4":                             false,
		"acpi:PNP0303:":                                         false,
	} {
		if got := isNetworkModalias(a); got != want {
			t.Errorf("isNetworkModalias(%s) = %v, want %v", a, got, want)
		}
	}
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func TestLoadModulesSkipsLoadedAndBuiltin(t *testing.T) {
	sysRoot, modDir := fixture(t)
	proc := t.TempDir()
	writeFile(t, filepath.Join(proc, "modules"), "nvme_core 200704 1 nvme, Live 0x0\nnvme 57344 0 - Live 0x0\n")
	writeFile(t, filepath.Join(modDir, "modules.builtin"), "kernel/drivers/virtio/virtio.ko\nkernel/drivers/virtio/virtio_ring.ko\n")
	fl := &fakeLoader{t: t, sysRoot: sysRoot}
	got, err := LoadModulesForDevices(context.Background(), sysRoot, modDir, nil,
		WithLoader(fl), WithSettle(time.Millisecond), WithProcRoot(proc))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"virtio_pci_modern_dev", "virtio_pci", "failover", "net_failover", "virtio_net"}
	if !reflect.DeepEqual(sorted(got), sorted(want)) {
		t.Errorf("loaded %v, want %v", got, want)
	}
	checkDepOrder(t, got)
}

func TestLoadModulesFailureIsReportedOthersLoad(t *testing.T) {
	sysRoot, modDir := fixture(t)
	fl := &fakeLoader{t: t, sysRoot: sysRoot, fail: map[string]bool{"nvme_core": true}}
	got, err := LoadModulesForDevices(context.Background(), sysRoot, modDir, nil,
		WithLoader(fl), WithSettle(time.Millisecond), WithProcRoot(""))
	if err == nil || !strings.Contains(err.Error(), "module nvme_core: simulated") {
		t.Fatalf("err = %v, want nvme failure", err)
	}
	for _, m := range got {
		if m == "nvme" || m == "nvme_core" {
			t.Errorf("%s reported loaded although its load failed", m)
		}
	}
	if !slices.Contains(got, "virtio_net") {
		t.Errorf("virtio chain did not load after nvme failure: %v", got)
	}
}

func TestModuleDBErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := loadModuleDB(dir); err == nil || !strings.Contains(err.Error(), "modules.dep") {
		t.Fatalf("missing modules.dep: %v", err)
	}
	writeFile(t, filepath.Join(dir, "modules.dep"), "a.ko:\nb.ko: a.ko\n")
	writeFile(t, filepath.Join(dir, "modules.alias"), "alias onlytwo\n")
	if _, err := loadModuleDB(dir); err == nil || !strings.Contains(err.Error(), "modules.alias:1") {
		t.Fatalf("bad alias line: %v", err)
	}
	writeFile(t, filepath.Join(dir, "modules.dep"), "a.ko: b.ko\nb.ko: a.ko\n")
	writeFile(t, filepath.Join(dir, "modules.alias"), "")
	db, err := loadModuleDB(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.loadWithDeps(&fakeLoader{t: t}, "a", nil); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Fatalf("cycle: %v", err)
	}
}

func TestLoadModuleByName(t *testing.T) {
	_, modDir := fixture(t)
	fl := &fakeLoader{t: t, sysRoot: t.TempDir()}
	proc := t.TempDir()
	writeFile(t, filepath.Join(proc, "modules"), "nvme_core 1 0 - Live 0x0\n")
	got, err := LoadModule(modDir, proc, "nvme", fl)
	if err != nil || !reflect.DeepEqual(got, []string{"nvme"}) || !reflect.DeepEqual(fl.loaded, []string{"nvme"}) {
		t.Errorf("loaded %v (%v), err %v: nvme_core was already in", got, fl.loaded, err)
	}
	if _, err := LoadModule(modDir, "", "no_such", fl); err == nil || !strings.Contains(err.Error(), "no_such") {
		t.Errorf("unknown module: %v", err)
	}
}

// The devices-loaded callback runs once, after every module the fixture's
// devices want and before the settle: a settle far longer than the test
// would take shows it is not waited for.
func TestLoadModulesDevicesLoadedBeforeSettle(t *testing.T) {
	sysRoot, modDir := fixture(t)
	fl := &fakeLoader{t: t, sysRoot: sysRoot}
	called := make(chan []string, 2)
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); <-done }()
	go func() {
		defer close(done)
		_, _ = LoadModulesForDevices(ctx, sysRoot, modDir, nil,
			WithLoader(fl), WithSettle(time.Hour), WithProcRoot(""),
			WithDevicesLoaded(func() {
				fl.mu.Lock()
				defer fl.mu.Unlock()
				called <- slices.Clone(fl.loaded)
			}))
	}()
	got := <-called
	want := []string{"failover", "net_failover", "nvme", "nvme_core", "virtio", "virtio_net", "virtio_pci", "virtio_pci_modern_dev", "virtio_ring"}
	if !reflect.DeepEqual(sorted(got), want) {
		t.Fatalf("at the callback loaded %v, want %v", got, want)
	}
	select {
	case <-done:
		t.Fatal("returned before the settle")
	default:
	}
}

// TestModuleImageZstd: a .ko.zst (the image's modules) decompresses to
// the module's bytes through the shared decoder, several at once; a plain
// .ko is left to finit_module.
func TestModuleImageZstd(t *testing.T) {
	dir := t.TempDir()
	raw := bytes.Repeat([]byte("\x7fELF module body "), 4096)
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	zp, kp := filepath.Join(dir, "m.ko.zst"), filepath.Join(dir, "p.ko")
	if err := os.WriteFile(zp, enc.EncodeAll(raw, nil), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kp, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Open(zp)
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			img, err := moduleImage(f, zp)
			if err != nil || !bytes.Equal(img, raw) {
				t.Errorf("moduleImage(.ko.zst) = %d bytes, %v; want the %d raw bytes", len(img), err, len(raw))
			}
		}()
	}
	wg.Wait()
	f, err := os.Open(kp)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if img, err := moduleImage(f, kp); img != nil || err != nil {
		t.Errorf("moduleImage(.ko) = %d bytes, %v; want nil (finit_module)", len(img), err)
	}
}

// The always-loaded modules wait for their gate (the runner's Hello) and
// for the devices' drivers: the devices callback comes without them, and
// LoadModulesForDevices returns only once they are in.
func TestLoadModulesAlwaysAfterGate(t *testing.T) {
	sysRoot, modDir := fixture(t)
	fl := &fakeLoader{t: t, sysRoot: sysRoot}
	gate := make(chan struct{})
	atDevices := make(chan []string, 1)
	done := make(chan []string, 1)
	go func() {
		got, err := LoadModulesForDevices(context.Background(), sysRoot, modDir, nil,
			WithLoader(fl), WithAlwaysLoad("vfat"), WithAlwaysLoadAfter(gate), WithSettle(time.Millisecond), WithProcRoot(""),
			WithDevicesLoaded(func() {
				fl.mu.Lock()
				defer fl.mu.Unlock()
				atDevices <- slices.Clone(fl.loaded)
			}))
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	got := <-atDevices
	if slices.Contains(got, "vfat") || slices.Contains(got, "fat") || !slices.Contains(got, "nvme") {
		t.Fatalf("at the devices callback loaded %v: want nvme, not vfat/fat", got)
	}
	select {
	case got := <-done:
		t.Fatalf("returned before the gate closed: %v", got)
	case <-time.After(20 * time.Millisecond):
	}
	close(gate)
	all := <-done
	if !slices.Contains(all, "vfat") || !slices.Contains(all, "fat") {
		t.Fatalf("after the gate loaded %v, want vfat and fat", all)
	}
	checkDepOrder(t, all)
}

// match gives the same answer from its cache as from the aliases.
func TestModuleMatchCached(t *testing.T) {
	_, modDir := fixture(t)
	db, err := loadModuleDB(modDir)
	if err != nil {
		t.Fatal(err)
	}
	a := "pci:v00001B36d00000010sv00001AF4sd00001100bc01sc08i02"
	first, again := db.match(a), db.match(a)
	if !reflect.DeepEqual(first, []string{"nvme"}) || !reflect.DeepEqual(again, first) {
		t.Fatalf("match %v then %v, want [nvme] twice", first, again)
	}
	if got := db.match("pci:v00008086d00001237sv00000000sd00000000bc06sc00i00"); len(got) != 0 {
		t.Fatalf("a device without a driver matched %v", got)
	}
}

// readModaliases reads every bus, or only the buses named (the network
// rounds' pci and virtio); no sysfs is no devices.
func TestReadModaliasesBuses(t *testing.T) {
	sysRoot, _ := fixture(t)
	writeFile(t, filepath.Join(sysRoot, "bus/acpi/devices/PNP0A08:00/modalias"), "acpi:PNP0A08:PNP0A03:\n")
	if err := os.MkdirAll(filepath.Join(sysRoot, "bus/acpi/devices/LNXSYSTM:00"), 0o755); err != nil { // no modalias
		t.Fatal(err)
	}
	all, err := readModaliases(sysRoot)
	if err != nil || len(all) != 4 || all[0] != "acpi:PNP0A08:PNP0A03:" {
		t.Fatalf("every bus: %v, %v", all, err)
	}
	net, err := readModaliases(sysRoot, networkBuses...)
	if err != nil || len(net) != 3 || slices.Contains(net, "acpi:PNP0A08:PNP0A03:") {
		t.Fatalf("network buses: %v, %v", net, err)
	}
	if none, err := readModaliases(filepath.Join(t.TempDir(), "nosys")); err != nil || len(none) != 0 {
		t.Fatalf("without sysfs: %v, %v", none, err)
	}
}
