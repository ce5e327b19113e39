// Out-of-band firmware and fault end-to-end tests (issue #3): the real
// coordinator drives the virtual BMC's UpdateService and a QEMU node boots
// CURE for real, while the test injects crashes, cut streams, lost Redfish
// answers and coordinator restarts at moments it reads off the timeline.
//
// "Every component drifts" means BMC, BIOS, HGX and BIOS settings: the
// qemu-nvme SKU keeps its NVMe at 7.2.22 because QEMU's emulated NVMe cannot
// be flashed, so a drifted NVMe would be a FAIL by design.
package qemutest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/qemu-test/harness"
	"github.com/cure-oss/cure/qemu-test/vbmc"
)

const (
	bmcTarget  = "1.50.0"
	biosStart  = "2.19.1"
	biosTarget = "2.21.2"
	gpuTarget  = "97.00.0B.00.01"
	gpuStart   = "96.00.A5.00.01"
)

// fwInventory is the default simulated inventory with a BIOS version a
// manifest accepts (the mockup's "P79 v1.45" contains a space).
func fwInventory() []vbmc.FirmwareSpec {
	fw := vbmc.DefaultFirmware()
	for i := range fw {
		if fw[i].ID == "BIOS" {
			fw[i].Version = biosStart
		}
	}
	return fw
}

// fwPin is one Redfish-updated manifest entry whose package the test puts
// into the coordinator's artifact store.
type fwPin struct {
	name, component, redfishID, version, activation string
}

var (
	pinBMC  = fwPin{"bmc", "bmc", "BMC", bmcTarget, "bmc-reset"}
	pinBIOS = fwPin{"bios", "bios", "BIOS", biosTarget, "host-reboot"}
	pinGPU  = fwPin{"hgx-gpu", "hgx", "HGX_FW_GPU_SXM_*", gpuTarget, "host-reboot"}
)

// pinFirmware adds the packages to the artifact store and the entries (plus
// BIOS settings, when given) to the node's SKU.
func pinFirmware(t *testing.T, env *harness.Env, pins []fwPin, settings map[string]any) {
	t.Helper()
	var fws []manifests.Firmware
	for _, p := range pins {
		art, err := env.AddFirmwarePackage(p.redfishID, p.version)
		if err != nil {
			t.Fatal(err)
		}
		fws = append(fws, manifests.Firmware{Name: p.name, Component: p.component, Via: "redfish",
			Match: manifests.Match{RedfishID: p.redfishID}, Version: p.version, Gate: "equal", Artifact: art, Activation: p.activation})
	}
	if err := env.EditManifest(func(sku *manifests.SKU) {
		sku.Spec.Firmware = append(sku.Spec.Firmware, fws...)
		if settings != nil {
			sku.Spec.BIOS = &manifests.BIOS{Settings: settings}
		}
	}); err != nil {
		t.Fatal(err)
	}
}

// followRun starts a run and follows it to its end, logging the timeline and
// handing every entry to hook (nil: none).
func followRun(t *testing.T, env *harness.Env, mode modes.Mode, resume bool, hook func(*curev1.TimelineEntry)) *curev1.RunReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	runID, err := env.Run(ctx, env.Nodes[0].ID, mode, "", resume)
	if err != nil {
		t.Fatalf("start %s run: %v", mode, err)
	}
	start := time.Now()
	rep, err := env.Follow(ctx, runID, func(e *curev1.TimelineEntry) {
		t.Logf("%6.1fs %-11s %-20s %-11s %-8s %s", time.Since(start).Seconds(), e.GetSource(), e.GetPhase(), e.GetKind(), e.GetStatus(), e.GetMessage())
		if hook != nil {
			hook(e)
		}
	})
	if err != nil {
		t.Fatalf("follow run %s: %v", runID, err)
	}
	t.Logf("run %s: %s in %s, %d reboots", runID, rep.GetStatus(), time.Since(start).Round(time.Second), rep.GetReboots())
	return rep
}

// once fires f the first time an entry matches.
func once(match func(*curev1.TimelineEntry) bool, f func()) func(*curev1.TimelineEntry) {
	var o sync.Once
	return func(e *curev1.TimelineEntry) {
		if match(e) {
			o.Do(f)
		}
	}
}

func isEntry(source, phase, kind string) func(*curev1.TimelineEntry) bool {
	return func(e *curev1.TimelineEntry) bool {
		return e.GetSource() == source && e.GetPhase() == phase && e.GetKind() == kind
	}
}

func storeRun(t *testing.T, st *store.Store, runID string) store.Run {
	t.Helper()
	r, err := st.GetRun(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func storePhases(t *testing.T, st *store.Store, runID string) map[modes.PhaseName]store.Phase {
	t.Helper()
	ps, err := st.Phases(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	m := map[modes.PhaseName]store.Phase{}
	for _, p := range ps {
		m[p.Name] = p
	}
	return m
}

func storeEvents(t *testing.T, st *store.Store, runID string) []store.Event {
	t.Helper()
	evs, err := st.Events(context.Background(), runID, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func countEvents(evs []store.Event, match func(store.Event) bool) int {
	n := 0
	for _, e := range evs {
		if match(e) {
			n++
		}
	}
	return n
}

// checkInstalled asserts what every successful provision leaves behind: the
// phase sequence, the installed OS's callback and the image on the disk.
func checkInstalled(t *testing.T, env *harness.Env, st *store.Store, rep *curev1.RunReport) {
	t.Helper()
	if rep.GetStatus() != "succeeded" {
		t.Fatalf("run %s ended %s: %s", rep.GetRunId(), rep.GetStatus(), rep.GetMessage())
	}
	checkPhaseOrder(t, st, rep.GetRunId())
	evs := storeEvents(t, st, rep.GetRunId())
	if countEvents(evs, func(e store.Event) bool {
		return e.Kind == "host_ready" && strings.Contains(e.Message, "instance_id="+rep.GetRunId())
	}) == 0 {
		t.Error("no host_ready callback carrying the run's instance id in the store")
	}
	checkDisk(t, env, env.Nodes[0])
}

func bootDevices(n *harness.Node) []string {
	var devs []string
	for _, b := range n.BMC.History() {
		devs = append(devs, string(b.Device))
	}
	return devs
}

func firmwareVersion(t *testing.T, n *harness.Node, id string) string {
	t.Helper()
	v, pending, ok := n.BMC.FirmwareVersion(id)
	if !ok {
		t.Fatalf("virtual BMC has no firmware %s", id)
	}
	if pending != "" {
		t.Errorf("%s still has %s staged (pending activation)", id, pending)
	}
	return v
}

func gpuIDs() []string {
	var ids []string
	for i := 1; i <= 8; i++ {
		ids = append(ids, fmt.Sprintf("HGX_FW_GPU_SXM_%d", i))
	}
	return ids
}

// firmwareEnv is the node TestFirmwareAllDrift updates and
// TestFirmwareRerunSkips provisions again (one QEMU setup for both).
var firmwareEnv *harness.Env

func allDriftEnv(t *testing.T) *harness.Env {
	t.Helper()
	if firmwareEnv != nil {
		return firmwareEnv
	}
	out := outDir(t)
	work, err := os.MkdirTemp("", "cure-e2e-fw-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, err := harness.Start(ctx, harness.Options{Out: out, Work: work, Bin: harnessBin(t), Firmware: fwInventory(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	firmwareEnv = env
	pinFirmware(t, env, []fwPin{pinBMC, pinBIOS, pinGPU}, map[string]any{"ProcTurboMode": "Disabled"})
	return env
}

// allDriftRun is the all-drift provision's report, once it ran.
var allDriftRun *curev1.RunReport

func TestFirmwareAllDrift(t *testing.T) {
	env := allDriftEnv(t)
	dumpOnFailure(t, env)
	n := env.Nodes[0]
	// Preconditions: every pinned component differs from the manifest.
	if v := firmwareVersion(t, n, "BMC"); v == bmcTarget {
		t.Fatalf("BMC already at %s", v)
	}
	if v := firmwareVersion(t, n, "BIOS"); v != biosStart {
		t.Fatalf("BIOS at %s, want %s", v, biosStart)
	}
	if got := n.BMC.BiosAttributes()["ProcTurboMode"]; got == "Disabled" {
		t.Fatalf("ProcTurboMode already %v", got)
	}
	rep := followRun(t, env, modes.Provision, false, nil)
	allDriftRun = rep
	st := openStore(t, env)
	checkInstalled(t, env, st, rep)

	ps := storePhases(t, st, rep.GetRunId())
	for _, p := range []modes.PhaseName{modes.BMC, modes.BIOS, modes.BIOSSettings, modes.HGX} {
		if ps[p].Status != curev1.PhaseStatus_PHASE_OK || ps[p].Attempts != 1 {
			t.Errorf("phase %s = %s after %d attempts (%s), want ok in one", p, ps[p].Status, ps[p].Attempts, ps[p].Message)
		}
	}
	// On the node: running versions, each flashed once, one BMC reset.
	if v := firmwareVersion(t, n, "BMC"); v != bmcTarget {
		t.Errorf("BMC runs %s, want %s", v, bmcTarget)
	}
	if v := firmwareVersion(t, n, "BIOS"); v != biosTarget {
		t.Errorf("BIOS runs %s, want %s", v, biosTarget)
	}
	for _, id := range append([]string{"BMC", "BIOS"}, gpuIDs()...) {
		if f := n.BMC.Flashes(id); f != 1 {
			t.Errorf("%s flashed %d times, want 1", id, f)
		}
	}
	for _, id := range gpuIDs() {
		if v := firmwareVersion(t, n, id); v != gpuTarget {
			t.Errorf("%s runs %s, want %s", id, v, gpuTarget)
		}
	}
	if v := firmwareVersion(t, n, "HGX_FW_NVSwitch_0"); v == gpuTarget || n.BMC.Flashes("HGX_FW_NVSwitch_0") != 0 {
		t.Errorf("unpinned NVSwitch 0 was touched: runs %s, %d flashes", v, n.BMC.Flashes("HGX_FW_NVSwitch_0"))
	}
	if r := n.BMC.BMCResets(); r != 1 {
		t.Errorf("BMC resets = %d, want 1 (BMC firmware activation)", r)
	}
	if got := n.BMC.BiosAttributes()["ProcTurboMode"]; got != "Disabled" {
		t.Errorf("ProcTurboMode = %v, want Disabled", got)
	}
	if staged := n.BMC.StagedBiosAttributes(); len(staged) != 0 {
		t.Errorf("BIOS attributes still staged: %v", staged)
	}
	// Activation reboots: power on, BIOS, BIOS settings, HGX, the OS.
	if rep.GetReboots() != 5 || storeRun(t, st, rep.GetRunId()).Reboots != 5 {
		t.Errorf("reboots = %d, want 5 (power on, BIOS, BIOS settings, HGX activations, reboot into the OS)", rep.GetReboots())
	}
	if devs := bootDevices(n); !slices.Equal(devs, []string{"Pxe", "Pxe", "Pxe", "Pxe", "Hdd"}) {
		t.Errorf("boots = %v, want 4 PXE boots into CURE then the disk", devs)
	}
	// Verified after activation, in the store.
	pass := map[string]bool{}
	for _, v := range rep.GetVerdicts() {
		if v.GetCheck() == "firmware_update" && v.GetStatus() == curev1.VerdictStatus_PASS {
			pass[v.GetComponent()] = true
		}
	}
	if len(pass) != 10 || !pass["bmc"] || !pass["bios"] || !pass["hgx/HGX_FW_GPU_SXM_8"] {
		t.Errorf("firmware_update PASS verdicts for %v, want bmc, bios and 8 GPUs", pass)
	}
	if v := verdict(rep, "bios", "settings"); v == nil || v.GetStatus() != curev1.VerdictStatus_PASS {
		t.Errorf("bios settings verdict = %v, want PASS", v)
	}
}

// TestFirmwareRerunSkips provisions the all-drift node again (running
// TestFirmwareAllDrift's provisioning first when run alone): every firmware
// phase is skipped and nothing is flashed, reset or rebooted for firmware.
func TestFirmwareRerunSkips(t *testing.T) {
	env := allDriftEnv(t)
	// The last user of the shared node: an installed OS idling under TCG
	// would slow every later test down.
	t.Cleanup(func() {
		env.Close()
		os.RemoveAll(env.Opts.Work)
		firmwareEnv = nil
	})
	dumpOnFailure(t, env)
	n := env.Nodes[0]
	st := openStore(t, env)
	if allDriftRun == nil {
		if rep := followRun(t, env, modes.Provision, false, nil); rep.GetStatus() != "succeeded" {
			t.Fatalf("all-drift provision ended %s: %s", rep.GetStatus(), rep.GetMessage())
		}
	}
	flashes := map[string]int{}
	for _, id := range append([]string{"BMC", "BIOS"}, gpuIDs()...) {
		flashes[id] = n.BMC.Flashes(id)
	}
	resets, boots := n.BMC.BMCResets(), len(n.BMC.History())

	rep := followRun(t, env, modes.Provision, false, nil)
	checkInstalled(t, env, st, rep)
	ps := storePhases(t, st, rep.GetRunId())
	for _, p := range []modes.PhaseName{modes.BMC, modes.BIOS, modes.BIOSSettings, modes.HGX} {
		if ps[p].Status != curev1.PhaseStatus_PHASE_SKIPPED {
			t.Errorf("rerun phase %s = %s (%s), want skipped", p, ps[p].Status, ps[p].Message)
		}
	}
	for id, before := range flashes {
		if f := n.BMC.Flashes(id); f != before {
			t.Errorf("rerun flashed %s (%d -> %d)", id, before, f)
		}
	}
	if r := n.BMC.BMCResets(); r != resets {
		t.Errorf("rerun reset the BMC (%d -> %d)", resets, r)
	}
	if rep.GetReboots() != 2 {
		t.Errorf("rerun reboots = %d, want 2 (into CURE, into the OS)", rep.GetReboots())
	}
	if devs := bootDevices(n)[boots:]; !slices.Equal(devs, []string{"Pxe", "Hdd"}) {
		t.Errorf("rerun boots = %v, want [Pxe Hdd]", devs)
	}
	for _, c := range []string{"bmc", "bios", "hgx/HGX_FW_GPU_SXM_1", "hgx/HGX_FW_GPU_SXM_8"} {
		if v := verdict(rep, c, "firmware"); v == nil || v.GetStatus() != curev1.VerdictStatus_MATCH {
			t.Errorf("%s firmware verdict = %v, want MATCH", c, v)
		}
	}
	if v := verdict(rep, "bios", "settings"); v == nil || v.GetStatus() != curev1.VerdictStatus_MATCH {
		t.Errorf("bios settings verdict = %v, want MATCH", v)
	}
	for _, v := range rep.GetVerdicts() {
		if v.GetCheck() == "firmware_update" {
			t.Errorf("rerun updated %s: %v", v.GetComponent(), v)
		}
	}
}

// TestResumeAfterVMKilled kills the QEMU process mid os_install, behind the
// BMC's back: the coordinator notices the runner gone, reboots the node into
// CURE once the reconnect budget runs out, and the run resumes at
// os_install without redoing the phases before it.
func TestResumeAfterVMKilled(t *testing.T) {
	t.Parallel() // its own environment: see startEnv
	env := startEnv(t, harness.Options{ExtraCoordinatorArgs: []string{"--reconnect", "20s"}})
	n := env.Nodes[0]
	killed := false
	rep := followRun(t, env, modes.Provision, false, once(isEntry("runner", string(modes.OSInstall), "phase_start"), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := n.Machine.Stop(ctx, true); err != nil {
			t.Errorf("kill the VM: %v", err)
			return
		}
		killed = true
		t.Log("killed the VM mid os_install")
	}))
	if !killed {
		t.Fatal("the VM was never killed: no runner os_install phase_start seen")
	}
	st := openStore(t, env)
	checkInstalled(t, env, st, rep)
	run := storeRun(t, st, rep.GetRunId())
	if run.Disconnects != 1 {
		t.Errorf("disconnects = %d, want 1", run.Disconnects)
	}
	if run.Reboots != 3 {
		t.Errorf("reboots = %d, want 3 (power on, recovery reboot, into the OS)", run.Reboots)
	}
	if devs := bootDevices(n); !slices.Equal(devs, []string{"Pxe", "Pxe", "Hdd"}) {
		t.Errorf("boots = %v, want [Pxe Pxe Hdd]", devs)
	}
	ps := storePhases(t, st, rep.GetRunId())
	for _, p := range []modes.PhaseName{modes.WaitForCURE, modes.NVMe, modes.SEDRevert} {
		if ps[p].Attempts != 1 {
			t.Errorf("%s ran %d times: the resume restarted earlier phases", p, ps[p].Attempts)
		}
	}
	if ps[modes.OSInstall].Attempts != 2 {
		t.Errorf("os_install attempts = %d, want 2 (the killed one and the resumed one)", ps[modes.OSInstall].Attempts)
	}
	evs := storeEvents(t, st, rep.GetRunId())
	for _, p := range []modes.PhaseName{modes.NVMe, modes.SEDRevert} {
		if c := countEvents(evs, func(e store.Event) bool { return e.Source == "runner" && e.Phase == p && e.Kind == "phase_start" }); c != 1 {
			t.Errorf("runner started %s %d times, want once", p, c)
		}
	}
	if countEvents(evs, func(e store.Event) bool {
		return e.Source == "coordinator" && strings.Contains(e.Message, "assignment sent: phases=os_install resume_count=1")
	}) != 1 {
		t.Error("no assignment of just os_install with resume_count=1 after the crash")
	}
}

// TestStreamCutReattaches cuts the runner's gRPC stream mid os_install: the
// runner dials again, the coordinator re-attaches to the running phase, and
// no retry or reboot is spent.
func TestStreamCutReattaches(t *testing.T) {
	t.Parallel() // its own environment: see startEnv
	env := startEnv(t, harness.Options{ProxyRunnerStreams: true})
	n := env.Nodes[0]
	cut := 0
	rep := followRun(t, env, modes.Provision, false, once(isEntry("runner", string(modes.OSInstall), "phase_start"), func() {
		cut = env.CutRunnerStreams()
		t.Logf("cut %d runner stream(s) mid os_install", cut)
	}))
	if cut == 0 {
		t.Fatal("no runner stream was cut: the runner does not go through the proxy, or os_install never started")
	}
	st := openStore(t, env)
	checkInstalled(t, env, st, rep)
	run := storeRun(t, st, rep.GetRunId())
	if run.PhaseFailures != 0 || run.Disconnects != 0 {
		t.Errorf("phase failures = %d, disconnects = %d, want 0 and 0", run.PhaseFailures, run.Disconnects)
	}
	if a := storePhases(t, st, rep.GetRunId())[modes.OSInstall].Attempts; a != 1 {
		t.Errorf("os_install attempts = %d, want 1", a)
	}
	evs := storeEvents(t, st, rep.GetRunId())
	if c := countEvents(evs, func(e store.Event) bool {
		return e.Source == "runner" && e.Phase == modes.OSInstall && e.Kind == "phase_end"
	}); c != 1 {
		t.Errorf("%d runner phase_end events for os_install, want exactly 1", c)
	}
	if countEvents(evs, func(e store.Event) bool {
		return e.Source == "coordinator" && strings.Contains(e.Message, "re-attached mid-phase "+string(modes.OSInstall))
	}) == 0 {
		t.Error("no re-attached event for os_install in the store")
	}
	if devs := bootDevices(n); !slices.Equal(devs, []string{"Pxe", "Hdd"}) {
		t.Errorf("boots = %v, want [Pxe Hdd]: the cut must not cost a reboot", devs)
	}
}

// TestLostUpdateResponseNoDoubleFlash: the BMC takes the SimpleUpdate but
// its answer never arrives; the coordinator finds the task on the BMC
// instead of submitting again, and the BMC is flashed exactly once.
func TestLostUpdateResponseNoDoubleFlash(t *testing.T) {
	t.Parallel() // its own environment: see startEnv
	// A short per-call timeout, so the withheld answer times out quickly.
	env := startEnv(t, harness.Options{Firmware: fwInventory(), ExtraCoordinatorArgs: []string{"--bmc-timeout", "10s"}})
	n := env.Nodes[0]
	pinFirmware(t, env, []fwPin{pinBMC}, nil)
	// Armed while the node PXE-boots: no BMC mutation happens between
	// powering_on and the bmc phase's SimpleUpdate, so the fault hits it.
	rep := followRun(t, env, modes.Provision, false, once(isEntry("coordinator", string(modes.WaitForCURE), "phase_start"), func() {
		n.BMC.AcceptThenTimeout(5 * time.Minute)
	}))
	st := openStore(t, env)
	checkInstalled(t, env, st, rep)
	if f := n.BMC.Flashes("BMC"); f != 1 {
		t.Errorf("BMC flashed %d times after a lost response, want exactly 1", f)
	}
	if tasks := n.BMC.Tasks(); len(tasks) != 1 {
		t.Errorf("BMC update tasks = %v, want exactly one", tasks)
	}
	if v := firmwareVersion(t, n, "BMC"); v != bmcTarget {
		t.Errorf("BMC runs %s, want %s", v, bmcTarget)
	}
	if r := n.BMC.BMCResets(); r != 1 {
		t.Errorf("BMC resets = %d, want 1", r)
	}
	p := storePhases(t, st, rep.GetRunId())[modes.BMC]
	if p.Status != curev1.PhaseStatus_PHASE_OK || p.Attempts != 1 {
		t.Errorf("bmc phase = %s after %d attempts (%s), want ok in one", p.Status, p.Attempts, p.Message)
	}
	evs := storeEvents(t, st, rep.GetRunId())
	if countEvents(evs, func(e store.Event) bool {
		return e.Phase == modes.BMC && strings.Contains(e.Message, "outcome unknown")
	}) == 0 {
		t.Error("no event recording the unknown submission outcome: the fault did not hit SimpleUpdate")
	}
}

// TestCoordinatorRestartMidRun kills provisioner-lite in the middle of the
// bmc phase, right after the BMC's update task completed and before the new
// firmware is activated and verified, and starts it again: the restarted
// coordinator resumes the run from the store, finds the image already on the
// BMC instead of flashing it again, and the run completes without another
// boot.
//
// The restart is placed in a coordinator phase on purpose: the coordinator
// also serves the artifacts, so killing it while the runner downloads the OS
// image fails that download (a legitimate os_install retry, not a resume).
func TestCoordinatorRestartMidRun(t *testing.T) {
	t.Parallel() // its own environment: see startEnv
	env := startEnv(t, harness.Options{Firmware: fwInventory()})
	n := env.Nodes[0]
	pinFirmware(t, env, []fwPin{pinBMC}, nil)
	restarted := false
	taskDone := func(e *curev1.TimelineEntry) bool {
		return isEntry("coordinator", string(modes.BMC), "info")(e) && strings.Contains(e.GetMessage(), "update task Completed")
	}
	rep := followRun(t, env, modes.Provision, false, once(taskDone, func() {
		if err := env.StopCoordinator(true); err != nil {
			t.Errorf("kill coordinator: %v", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := env.StartCoordinator(ctx); err != nil {
			t.Errorf("restart coordinator: %v", err)
			return
		}
		restarted = true
		t.Log("coordinator killed and restarted mid bmc phase")
	}))
	if !restarted {
		t.Fatal("the coordinator was never restarted: no completed BMC update task seen")
	}
	st := openStore(t, env)
	checkInstalled(t, env, st, rep)
	evs := storeEvents(t, st, rep.GetRunId())
	if countEvents(evs, func(e store.Event) bool {
		return e.Source == "coordinator" && strings.Contains(e.Message, "coordinator restarted; resuming from "+string(modes.BMC))
	}) != 1 {
		t.Error("no event of the restarted coordinator resuming the run at the bmc phase")
	}
	if f := n.BMC.Flashes("BMC"); f != 1 {
		t.Errorf("BMC flashed %d times across the restart, want 1", f)
	}
	if tasks := n.BMC.Tasks(); len(tasks) != 1 {
		t.Errorf("BMC update tasks = %v, want exactly one", tasks)
	}
	if v := firmwareVersion(t, n, "BMC"); v != bmcTarget {
		t.Errorf("BMC runs %s, want %s", v, bmcTarget)
	}
	if r := n.BMC.BMCResets(); r != 1 {
		t.Errorf("BMC resets = %d, want 1", r)
	}
	if v := verdict(rep, "bmc", "firmware_update"); v == nil || v.GetStatus() != curev1.VerdictStatus_PASS {
		t.Errorf("bmc firmware_update verdict = %v, want PASS", v)
	}
	ps := storePhases(t, st, rep.GetRunId())
	if ps[modes.WaitForCURE].Attempts != 1 || ps[modes.OSInstall].Attempts != 1 {
		t.Errorf("wait_for_cure attempts = %d, os_install attempts = %d, want 1 and 1", ps[modes.WaitForCURE].Attempts, ps[modes.OSInstall].Attempts)
	}
	if devs := bootDevices(n); !slices.Equal(devs, []string{"Pxe", "Hdd"}) {
		t.Errorf("boots = %v, want [Pxe Hdd]: the restart must not cost a reboot", devs)
	}
}

// TestAuditVerifyReadOnly runs audit, then verify, against a node where the
// BMC, the GPUs and one BIOS attribute drift while the BIOS firmware and a
// second attribute match: both report exactly the drifted components and
// neither flashes, resets, stages or writes anything.
func TestAuditVerifyReadOnly(t *testing.T) {
	t.Parallel() // its own environment: see startEnv
	env := startEnv(t, harness.Options{Firmware: fwInventory(), EditManifest: func(sku *manifests.SKU) {
		// Verify insists that every firmware artifact resolves; the NVMe
		// entry's is a placeholder, and a matching component needs none.
		for i := range sku.Spec.Firmware {
			if sku.Spec.Firmware[i].Component == "nvme" {
				sku.Spec.Firmware[i].Artifact = nil
			}
		}
	}})
	n := env.Nodes[0]
	attrs := n.BMC.BiosAttributes()
	matching := ""
	for k, v := range attrs {
		if k != "ProcTurboMode" {
			if s, ok := v.(string); ok && s != "" {
				matching = k
				break
			}
		}
	}
	if matching == "" {
		t.Fatalf("no string BIOS attribute besides ProcTurboMode to pin as matching: %v", attrs)
	}
	pinFirmware(t, env, []fwPin{pinBMC, {"bios", "bios", "BIOS", biosStart, "host-reboot"}, pinGPU},
		map[string]any{"ProcTurboMode": "Disabled", matching: attrs[matching]})
	diskBefore := seedDisk(t, n.Disk, 131)
	st := openStore(t, env)

	wantDrift := []string{"bios", "bmc"} // "bios" here is the settings verdict
	for _, id := range gpuIDs() {
		wantDrift = append(wantDrift, "hgx/"+id)
	}
	slices.Sort(wantDrift)
	for i, mode := range []modes.Mode{modes.Audit, modes.Verify} {
		rep := followRun(t, env, mode, false, nil)
		if rep.GetStatus() != "succeeded" {
			t.Fatalf("%s ended %s: %s", mode, rep.GetStatus(), rep.GetMessage())
		}
		var drift []string
		for _, v := range rep.GetVerdicts() {
			if v.GetStatus() == curev1.VerdictStatus_DRIFT {
				drift = append(drift, v.GetComponent())
			}
			if v.GetCheck() == "firmware_update" {
				t.Errorf("%s updated %s", mode, v.GetComponent())
			}
		}
		slices.Sort(drift)
		if !slices.Equal(drift, wantDrift) {
			t.Errorf("%s DRIFT verdicts for\n %v\nwant exactly\n %v", mode, drift, wantDrift)
		}
		if v := verdict(rep, "bios", "firmware"); v == nil || v.GetStatus() != curev1.VerdictStatus_MATCH || v.GetObserved() != biosStart {
			t.Errorf("%s bios firmware verdict = %v, want MATCH %s", mode, v, biosStart)
		}
		if v := verdict(rep, "bios", "settings"); v == nil || !strings.Contains(v.GetObserved(), "ProcTurboMode") || strings.Contains(v.GetObserved(), matching) {
			t.Errorf("%s bios settings verdict = %v, want ProcTurboMode and not %s", mode, v, matching)
		}
		if v := verdict(rep, "nvme/0", "firmware"); v == nil || v.GetStatus() != curev1.VerdictStatus_MATCH {
			t.Errorf("%s nvme/0 firmware verdict = %v, want MATCH", mode, v)
		}
		ps := storePhases(t, st, rep.GetRunId())
		if _, ok := ps[modes.OSInstall]; ok {
			t.Errorf("%s ran os_install", mode)
		}
		// One boot into CURE per run, nothing else.
		if devs := bootDevices(n); len(devs) != i+1 || devs[i] != "Pxe" {
			t.Errorf("after %s boots = %v, want one PXE boot per run", mode, devs)
		}
	}
	// The node: nothing flashed, reset, staged or changed.
	for _, id := range append([]string{"BMC", "BIOS", "HGX_FW_NVSwitch_0"}, gpuIDs()...) {
		if f := n.BMC.Flashes(id); f != 0 {
			t.Errorf("%s flashed %d times by a read-only mode", id, f)
		}
	}
	if v := firmwareVersion(t, n, "HGX_FW_GPU_SXM_1"); v != gpuStart {
		t.Errorf("GPU 1 runs %s, want %s untouched", v, gpuStart)
	}
	if n.BMC.BMCResets() != 0 || len(n.BMC.Tasks()) != 0 {
		t.Errorf("read-only modes reset the BMC (%d) or started update tasks %v", n.BMC.BMCResets(), n.BMC.Tasks())
	}
	if staged := n.BMC.StagedBiosAttributes(); len(staged) != 0 {
		t.Errorf("read-only modes staged BIOS attributes: %v", staged)
	}
	if got := n.BMC.BiosAttributes()["ProcTurboMode"]; got != attrs["ProcTurboMode"] {
		t.Errorf("ProcTurboMode changed to %v", got)
	}
	if fileSum(t, n.Disk) != diskBefore {
		t.Error("a read-only mode changed the disk's bytes")
	}
}
