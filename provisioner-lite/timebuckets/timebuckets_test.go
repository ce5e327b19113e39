package timebuckets

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

var t0 = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func ph(name modes.PhaseName, a, b float64, attempts int, status string) store.Phase {
	st, err := runstate.ParsePhase(status)
	if err != nil {
		panic(err)
	}
	p := store.Phase{Name: name, StartedAt: at(a), Attempts: attempts, Status: st}
	if b >= 0 {
		p.EndedAt = at(b)
	}
	return p
}

func info(phase modes.PhaseName, s float64, msg string) store.Event {
	return store.Event{Source: "coordinator", Kind: "info", Phase: phase, Time: at(s), Message: msg}
}

func secs(d time.Duration) float64 { return d.Seconds() }

// A provision run with every marker: the buckets, their sub-buckets and
// reboots are exactly what the timeline says.
func TestComputeProvisionRun(t *testing.T) {
	run := store.Run{ID: "r1", Mode: "provision", Status: curev1.RunStatus_RUN_SUCCEEDED, StartedAt: at(0), EndedAt: at(1000)}
	phases := []store.Phase{
		ph(modes.Preflight, 2, 3, 1, "ok"),
		ph(modes.SetBootPXE, 3, 4, 1, "ok"),
		ph(modes.PoweringOn, 4, 5, 1, "ok"),
		ph(modes.WaitForCURE, 5, 105, 1, "ok"),
		ph(modes.BIOS, 106, 306, 1, "ok"),
		ph(modes.OSInstall, 400, 700, 2, "ok"), // first attempt 306..395, then backoff
		ph(modes.SetBootDisk, 700, 701, 1, "ok"),
		ph(modes.WaitForHostOS, 701, 990, 1, "ok"),
	}
	events := []store.Event{
		info("", 0, "run created: mode=provision manifest="),
		info(modes.WaitForCURE, 35, "iPXE script served to 10.0.2.15 from ..."),
		info(modes.WaitForCURE, 100, "runner connected from 10.0.2.15: state=IDLE boot_id=b guest_uptime=40000ms mac=m"),
		info(modes.BIOS, 150, msgReboot+": bios activates on host reboot"),
		info(modes.BIOS, 250, msgReboot+": BIOS settings"),
		{Source: "runner", Kind: "metric", Phase: modes.OSInstall, Time: at(650), Message: StageMetric + "=200s disk=nvme0n1 stage=stream"},
		{Source: "runner", Kind: "metric", Phase: modes.OSInstall, Time: at(690), Message: StageMetric + "=50s disk=nvme0n1 stage=readback"},
		info(modes.WaitForHostOS, 711, msgHostReboot+": runner rebooted itself"),
	}
	b := Compute(run, phases, events, time.Time{})
	if b.Total() != b.Wall || b.Wall != 1000*time.Second {
		t.Fatalf("total %s, wall %s", b.Total(), b.Wall)
	}
	want := map[string]float64{
		Queued: 2, BMCOps: 1 + 1 + 1 + 1, BootToCURE: 100, Overhead: 1, FirmwarePrefix + string(modes.BIOS): 200,
		RetryPrefix + string(modes.OSInstall): 94, OSInstall: 300, BootInstalledOS: 289, Finish: 10,
		FirmwarePOST: 30, IPXEDownload: 25, KernelAndRunner: 40, Registration: 5,
		ImageStream: 200, ImageReadback: 50, InstallOther: 50, RebootRequest: 10, OSBootCallback: 279,
	}
	for name, s := range want {
		got, ok := b.Get(name)
		if !ok || secs(got.Duration) != s {
			t.Errorf("%s = %v (present %t), want %gs", name, got.Duration, ok, s)
		}
	}
	if len(b.Buckets) != 9 {
		t.Errorf("%d top-level buckets: %+v", len(b.Buckets), b.Buckets)
	}
	if g, _ := b.Get(FirmwarePrefix + string(modes.BIOS)); g.Reboots != 2 || g.Attempts != 1 {
		t.Errorf("bios reboots %d attempts %d, want 2, 1", g.Reboots, g.Attempts)
	}
	if g, _ := b.Get(BMCOps); g.Reboots != 1 {
		t.Errorf("bmc_operations reboots %d, want 1 (power on)", g.Reboots)
	}
	if g, _ := b.Get(BootInstalledOS); g.Reboots != 1 {
		t.Errorf("boot_installed_os reboots %d, want 1", g.Reboots)
	}
}

// A run still going ends now; its running phase too.
func TestComputeRunningRun(t *testing.T) {
	run := store.Run{ID: "r", Status: curev1.RunStatus_RUN_RUNNING, StartedAt: at(0)}
	b := Compute(run, []store.Phase{ph(modes.Preflight, 1, 2, 1, "ok"), ph(modes.WaitForCURE, 2, -1, 1, "running")}, nil, at(60))
	if b.Wall != 60*time.Second || b.Total() != b.Wall {
		t.Fatalf("wall %s total %s", b.Wall, b.Total())
	}
	if g, _ := b.Get(BootToCURE); secs(g.Duration) != 58 || g.Sub != nil {
		t.Errorf("boot_to_cure %v sub %v, want 58s and no steps without a Hello", g.Duration, g.Sub)
	}
	if _, ok := b.Get(Finish); ok {
		t.Error("a running phase to now leaves no finish bucket")
	}
	// No phase at all: the whole run is queued.
	b = Compute(store.Run{StartedAt: at(0), EndedAt: at(5)}, nil, nil, time.Time{})
	if g, _ := b.Get(Queued); secs(g.Duration) != 5 || len(b.Buckets) != 1 {
		t.Errorf("no phases: %+v", b.Buckets)
	}
}

// A node's numbers never move a boundary: an uptime longer than the wait,
// stage durations longer than the phase, are clamped.
func TestComputeClampsNodeNumbers(t *testing.T) {
	run := store.Run{StartedAt: at(0), EndedAt: at(100)}
	phases := []store.Phase{ph(modes.WaitForCURE, 0, 50, 1, "ok"), ph(modes.OSInstall, 50, 100, 1, "ok")}
	events := []store.Event{
		info(modes.WaitForCURE, 40, "runner connected from x: guest_uptime=999999999ms"),
		{Kind: "metric", Phase: modes.OSInstall, Message: StageMetric + "=300s stage=stream"},
		{Kind: "metric", Phase: modes.OSInstall, Message: StageMetric + "=100s stage=readback"},
		{Kind: "metric", Phase: modes.OSInstall, Message: StageMetric + "=-5s stage=readback"}, // refused
		{Kind: "metric", Phase: modes.OSInstall, Message: "os_install.throughput=512MB/s disk=x"},
	}
	b := Compute(run, phases, events, time.Time{})
	for name, s := range map[string]float64{FirmwarePOST: 0, IPXEDownload: 0, KernelAndRunner: 40, Registration: 10, ImageStream: 37.5, ImageReadback: 12.5, InstallOther: 0} {
		if g, ok := b.Get(name); !ok || secs(g.Duration) != s {
			t.Errorf("%s = %v, want %gs", name, g.Duration, s)
		}
	}
}

// A runner that splits the stream by what held it up gets a bucket per
// stage instead of one "stream" (a stale "stream" report is ignored).
func TestInstallStagesSplit(t *testing.T) {
	run := store.Run{StartedAt: at(0), EndedAt: at(100)}
	phases := []store.Phase{ph(modes.OSInstall, 0, 100, 1, "ok")}
	m := func(v, stage string) store.Event {
		return store.Event{Kind: "metric", Phase: modes.OSInstall, Message: StageMetric + "=" + v + "s disk=nvme0n1 stage=" + stage}
	}
	events := []store.Event{m("70", "stream"), m("40", "download"), m("10", "decode"), m("20", "write"), m("15", "readback")}
	b := Compute(run, phases, events, time.Time{})
	for name, s := range map[string]float64{ImageDownload: 40, ImageDecode: 10, ImageWrite: 20, ImageReadback: 15, InstallOther: 15} {
		if g, ok := b.Get(name); !ok || secs(g.Duration) != s {
			t.Errorf("%s = %v, want %gs", name, g.Duration, s)
		}
	}
	if _, ok := b.Get(ImageStream); ok {
		t.Error("a split stream still shows the whole stream bucket")
	}
	// Longer than the phase: scaled, adding up to it.
	events = []store.Event{m("100", "download"), m("50", "decode"), m("50", "write")}
	b = Compute(run, phases, events, time.Time{})
	for name, s := range map[string]float64{ImageDownload: 50, ImageDecode: 25, ImageWrite: 25, InstallOther: 0} {
		if g, ok := b.Get(name); !ok || secs(g.Duration) != s {
			t.Errorf("scaled: %s = %v, want %gs", name, g.Duration, s)
		}
	}
}

// Phases overlapping each other or the run's edges (clock steps, resumed
// runs, corrupt rows) still give buckets that add up to the wall time.
func TestComputeAlwaysAddsUp(t *testing.T) {
	names := []modes.PhaseName{modes.Preflight, modes.PoweringOn, modes.WaitForCURE, modes.BIOS, modes.NVMe, modes.OSInstall, modes.WaitForHostOS, modes.Validate}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		wall := rng.Float64() * 5000
		run := store.Run{StartedAt: at(0), EndedAt: at(wall)}
		if rng.IntN(10) == 0 {
			run.EndedAt = time.Time{}
		}
		var phases []store.Phase
		var events []store.Event
		for range rng.IntN(10) {
			a := rng.Float64()*6000 - 500
			b := a + rng.Float64()*2000 - 200
			if rng.IntN(8) == 0 {
				b = -1
			}
			n := names[rng.IntN(len(names))]
			phases = append(phases, ph(n, a, b, 1+rng.IntN(3), []string{"ok", "failed", "running", "skipped"}[rng.IntN(4)]))
			events = append(events, info(n, rng.Float64()*wall, msgHello+" guest_uptime=5000ms"), info(n, rng.Float64()*wall, msgIPXE),
				info(n, rng.Float64()*wall, msgHostReboot))
		}
		now := at(wall)
		b := Compute(run, phases, events, now)
		if b.Total() != b.Wall {
			t.Fatalf("case %d: total %s != wall %s: %+v", i, b.Total(), b.Wall, b.Buckets)
		}
		for _, x := range b.Buckets {
			var sub time.Duration
			for _, s := range x.Sub {
				if s.Duration < 0 {
					t.Fatalf("case %d: negative %s", i, s.Name)
				}
				sub += s.Duration
			}
			if x.Sub != nil && sub != x.Duration {
				t.Fatalf("case %d: %s sub-buckets %s != %s", i, x.Name, sub, x.Duration)
			}
		}
	}
}

func TestSummarizePercentiles(t *testing.T) {
	var items []Item
	for i := 1; i <= 10; i++ {
		sku := "a"
		if i > 8 {
			sku = "b"
		}
		items = append(items, Item{SKU: sku, B: Breakdown{Wall: time.Duration(i) * time.Minute,
			Buckets: []Bucket{{Name: OSInstall, Duration: time.Duration(i) * time.Second, Sub: []Bucket{{Name: ImageStream, Duration: time.Second}}}}}})
	}
	s := Summarize(items)
	if len(s) != 3 || s[0].SKU != "" || s[1].SKU != "a" || s[2].SKU != "b" {
		t.Fatalf("groups %+v", s)
	}
	if s[0].Runs != 10 || s[0].Wall.P50 != 5*time.Minute || s[0].Wall.P90 != 9*time.Minute {
		t.Errorf("all: %+v", s[0].Wall)
	}
	if s[1].Buckets[0].P50 != 4*time.Second || s[1].Buckets[0].P90 != 8*time.Second || s[2].Buckets[0].P50 != 9*time.Second {
		t.Errorf("per sku: %+v %+v", s[1].Buckets, s[2].Buckets)
	}
	if s[0].Buckets[1].Name != OSInstall+"/"+ImageStream || s[0].Buckets[1].Runs != 10 {
		t.Errorf("sub-bucket stat %+v", s[0].Buckets[1])
	}
	if Percentile(nil, 50) != 0 || Percentile([]time.Duration{7}, 90) != 7 {
		t.Error("percentile edges")
	}
}

// A phase that took no measurable time still shows; a runner that
// registered before wait_for_cure began makes it all registration.
func TestComputeInstantPhaseAndEarlyHello(t *testing.T) {
	run := store.Run{StartedAt: at(0), EndedAt: at(10)}
	phases := []store.Phase{ph(modes.PoweringOn, 0, 2, 1, "ok"), ph(modes.WaitForCURE, 3, 5, 1, "ok"), ph(modes.OSInstall, 5, 5, 1, "ok")}
	events := []store.Event{info(modes.PoweringOn, 1, msgIPXE+" to x"), info(modes.PoweringOn, 2.5, msgHello+" from x: guest_uptime=1000ms")}
	b := Compute(run, phases, events, time.Time{})
	if g, ok := b.Get(OSInstall); !ok || g.Duration != 0 || g.Attempts != 1 {
		t.Errorf("instant os_install: %+v present %t", g, ok)
	}
	for name, s := range map[string]float64{FirmwarePOST: 0, IPXEDownload: 0, KernelAndRunner: 0, Registration: 2} {
		if g, ok := b.Get(name); !ok || secs(g.Duration) != s {
			t.Errorf("%s = %v (present %t), want %gs", name, g.Duration, ok, s)
		}
	}
	if b.Total() != b.Wall {
		t.Errorf("total %s wall %s", b.Total(), b.Wall)
	}
}
