// End-to-end tests: real CURE images PXE-booted by QEMU under a Redfish
// virtual BMC, provisioned by a real provisioner-lite process. They need the
// outputs of `make image hostos` (CURE_OUT, set by `make test`).
package qemutest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/qemu-test/harness"
	"github.com/cure-oss/cure/qemu-test/vbmc"
)

func outDir(t *testing.T) string {
	t.Helper()
	out := os.Getenv("CURE_OUT")
	if out == "" {
		t.Skip("CURE_OUT not set: run through `make test` / `make e2e`, which build the images first")
	}
	if testing.Short() {
		t.Skip("QEMU end-to-end test skipped in -short mode")
	}
	if miss := harness.Missing(out); len(miss) > 0 {
		t.Fatalf("CURE_OUT=%s lacks %v", out, miss)
	}
	return out
}

// startEnv starts an environment of the test's own. A test that has one
// and no bar tighter than TCG allows with a second VM on the CPUs calls
// t.Parallel: go test runs those after the serial tests, two at a time
// (-parallel is GOMAXPROCS), so one VM's waits (a reconnect budget, a BMC
// task, a sleep, an idle host OS) overlap another's boot. Serial: the
// shared environments (sharedEnv, allDriftEnv), the burn-ins with short
// budgets (shortBudgets), the boot-time measurements, the marginal-node
// fleet (its bar compares the nodes' speeds). The tests in network
// namespaces run in parallel too, one at a time among themselves
// (netnsTests).
func startEnv(t *testing.T, o harness.Options) *harness.Env {
	t.Helper()
	o.Out = outDir(t)
	if o.Bin == "" {
		o.Bin = harnessBin(t)
	}
	if o.Work == "" {
		o.Work = t.TempDir()
	}
	o.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	began := time.Now()
	env, err := harness.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("environment started in %s", time.Since(began).Round(10*time.Millisecond))
	t.Cleanup(func() {
		began := time.Now()
		env.Close()
		t.Logf("environment closed in %s", time.Since(began).Round(10*time.Millisecond))
	})
	dumpOnFailure(t, env) // runs before Close: cleanups are LIFO
	return env
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// provisionAndWait runs one provision to its end, logging the timeline.
func provisionAndWait(t *testing.T, env *harness.Env, node string, resume bool) *curev1.RunReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	runID, err := env.Provision(ctx, node, modes.Provision, resume)
	if err != nil {
		t.Fatalf("provision %s: %v", node, err)
	}
	start := time.Now()
	rep, err := env.Follow(ctx, runID, func(e *curev1.TimelineEntry) {
		t.Logf("%6.1fs %-6s %-20s %-11s %-8s %s", time.Since(start).Seconds(), e.GetSource(), e.GetPhase(), e.GetKind(), e.GetStatus(), e.GetMessage())
	})
	if err != nil {
		t.Fatalf("follow run %s: %v", runID, err)
	}
	t.Logf("run %s: %s in %s, %d reboots", runID, rep.GetStatus(), time.Since(start).Round(time.Second), rep.GetReboots())
	return rep
}

func openStore(t *testing.T, env *harness.Env) *store.Store {
	t.Helper()
	key, err := os.ReadFile(filepath.Join(env.StateDir, "state.key")) // the coordinator's: node secrets are sealed with it
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(env.StateDir, "cure.db"), store.WithStateKey(key))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func phaseStatuses(t *testing.T, st *store.Store, runID string) map[modes.PhaseName]string {
	t.Helper()
	ps, err := st.Phases(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	m := map[modes.PhaseName]string{}
	for _, p := range ps {
		m[p.Name] = runstate.PhaseName(p.Status)
	}
	return m
}

func verdict(rep *curev1.RunReport, component, check string) *curev1.Verdict {
	for _, v := range rep.GetVerdicts() {
		if v.GetComponent() == component && v.GetCheck() == check {
			return v
		}
	}
	return nil
}

var provisionOrder = []modes.PhaseName{
	modes.Preflight, modes.SetBootPXE, modes.PoweringOn, modes.WaitForCURE, modes.Hardware,
	modes.BMC, modes.BIOS, modes.BIOSSettings, modes.HGX,
	modes.NIC, modes.DPU, modes.NVMe, modes.SEDRevert, modes.OSInstall,
	modes.SetBootDisk, modes.WaitForHostOS,
}

// checkPhaseOrder: the run's stored phases are a provision's, in order.
func checkPhaseOrder(t *testing.T, st *store.Store, runID string) {
	t.Helper()
	ps, err := st.Phases(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	var names []modes.PhaseName
	for _, p := range ps {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, provisionOrder) {
		t.Errorf("phase sequence in the store:\n got %v\nwant %v", names, provisionOrder)
	}
}

func checkProvisioned(t *testing.T, env *harness.Env, rep *curev1.RunReport) {
	t.Helper()
	if rep.GetStatus() != "succeeded" {
		t.Fatalf("run %s ended %s: %s", rep.GetRunId(), rep.GetStatus(), rep.GetMessage())
	}
	st := openStore(t, env)
	checkPhaseOrder(t, st, rep.GetRunId())
	got := phaseStatuses(t, st, rep.GetRunId())
	for _, p := range []modes.PhaseName{modes.Preflight, modes.SetBootPXE, modes.PoweringOn, modes.WaitForCURE, modes.Hardware, modes.SEDRevert, modes.OSInstall, modes.SetBootDisk, modes.WaitForHostOS} {
		if got[p] != "ok" {
			t.Errorf("phase %s = %q, want ok", p, got[p])
		}
	}
	// Phases not built yet must say so, never pass.
	for _, p := range []modes.PhaseName{modes.NIC, modes.DPU, modes.BMC, modes.BIOS, modes.HGX, modes.BIOSSettings} {
		if got[p] != "skipped" {
			t.Errorf("phase %s = %q, want skipped", p, got[p])
		}
	}
	// The hardware gate read the real QEMU node (SMBIOS DIMM, virtio link
	// speed, NVMe) and found what the qemu-nvme SKU declares.
	for _, c := range []string{"cpu", "memory", "nic", "nvme"} {
		if v := verdict(rep, c, "hardware"); v == nil || v.GetStatus() != curev1.VerdictStatus_PASS {
			t.Errorf("hardware verdict %s = %v, want PASS", c, v)
		}
	}
	v := verdict(rep, "nvme/0", "firmware")
	if v == nil || v.GetStatus() != curev1.VerdictStatus_MATCH || v.GetObserved() != "7.2.22" {
		t.Errorf("nvme/0 firmware verdict = %v, want MATCH observed 7.2.22", v)
	}
	// The format left zeros, so the installer skipped the image's zero
	// blocks; the disk comparison below proves the skip was right.
	if v := verdict(rep, "disk/nvme0n1", "os_install"); v == nil || v.GetStatus() != curev1.VerdictStatus_PASS || !strings.Contains(v.GetObserved(), "skipped on the erased disk") {
		t.Errorf("os_install verdict = %v, want PASS on disk/nvme0n1 with zero blocks skipped on the erased disk", v)
	}
	// QEMU's NVMe does Format NVM for real; the wipe proves its marker gone.
	if v := verdict(rep, "disk/nvme0n1", "wipe"); v == nil || v.GetStatus() != curev1.VerdictStatus_PASS || !strings.Contains(v.GetObserved(), "nvme-format-user-data") {
		t.Errorf("wipe verdict = %v, want PASS by nvme-format-user-data", v)
	}
	evs, err := st.Events(context.Background(), rep.GetRunId(), 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	ready := false
	for _, e := range evs {
		if e.Kind == "host_ready" && strings.Contains(e.Message, "instance_id="+rep.GetRunId()) {
			ready = true
		}
	}
	if !ready {
		t.Error("no host_ready callback carrying the run's instance id in the store")
	}
	checkDisk(t, env, env.Nodes[0])
}

// checkDisk compares the node's NVMe disk with the host-OS image: identical
// outside the CIDATA partition, and CIDATA holds the runner's NoCloud seed.
func checkDisk(t *testing.T, env *harness.Env, n *harness.Node) {
	t.Helper()
	img, err := os.ReadFile(env.HostOS.RawPath)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(n.Disk)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	disk := make([]byte, len(img))
	if _, err := io.ReadFull(f, disk); err != nil {
		t.Fatal(err)
	}
	seedStart, seedEnd := cidataRange(t, img)
	if !bytes.Equal(disk[:seedStart], img[:seedStart]) || !bytes.Equal(disk[seedEnd:], img[seedEnd:]) {
		t.Fatal("disk bytes differ from the image outside the CIDATA partition")
	}
	out, err := exec.Command("mtype", "-i", fmt.Sprintf("%s@@%d", n.Disk, seedStart), "::meta-data").CombinedOutput()
	if err != nil {
		t.Fatalf("read meta-data from CIDATA: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "local-hostname: "+n.ID) {
		t.Errorf("meta-data lacks the hostname:\n%s", out)
	}
}

// cidataRange finds the MBR partition whose FAT label is CIDATA.
func cidataRange(t *testing.T, img []byte) (int, int) {
	t.Helper()
	for i := 0; i < 4; i++ {
		e := img[446+16*i : 446+16*(i+1)]
		start := int(binary.LittleEndian.Uint32(e[8:])) * 512
		size := int(binary.LittleEndian.Uint32(e[12:])) * 512
		if size == 0 || start+512 > len(img) {
			continue
		}
		bs := img[start : start+512]
		if strings.TrimSpace(string(bs[0x2b:0x36])) == "CIDATA" || strings.TrimSpace(string(bs[0x47:0x52])) == "CIDATA" {
			return start, start + size
		}
	}
	t.Fatal("host-OS image has no CIDATA partition")
	return 0, 0
}

func bootHistory(n *harness.Node) []string {
	var s []string
	for _, c := range n.BMC.Overrides() {
		s = append(s, c.Target+"/"+c.Enabled)
	}
	return s
}

// provisioned is the environment TestProvisionFromPowerOff leaves behind,
// reused by TestReprovisionSkipsMatching: re-provisioning needs a node that
// was provisioned, and a second QEMU setup would only cost time.
var provisioned *harness.Env

// builtBin is provisioner-lite and curectl, built once for every
// environment of this test process (a build per test cost seconds each).
var builtBin struct {
	once sync.Once
	dir  string
	err  error
}

func harnessBin(t *testing.T) string {
	t.Helper()
	builtBin.once.Do(func() {
		root, err := harness.RepoRoot()
		if err == nil {
			builtBin.dir, err = os.MkdirTemp("", "cure-e2e-bin-")
		}
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			err = harness.BuildBinaries(ctx, root, builtBin.dir)
		}
		builtBin.err = err
	})
	if builtBin.err != nil {
		t.Fatal(builtBin.err)
	}
	return builtBin.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtBin.dir != "" {
		os.RemoveAll(builtBin.dir)
	}
	for _, env := range []*harness.Env{provisioned, firmwareEnv} {
		if env != nil {
			env.Close()
			os.RemoveAll(env.Opts.Work)
		}
	}
	if oneBoxRes != nil && oneBoxRes.work != "" {
		os.RemoveAll(oneBoxRes.work)
	}
	os.Exit(code)
}

// sharedEnvUsed says whether a test has already taken the shared
// environment.
func sharedEnvUsed() bool { return provisioned != nil }

// sharedEnv returns the long-lived environment, starting it on first use.
func sharedEnv(t *testing.T) *harness.Env {
	t.Helper()
	if provisioned != nil {
		return provisioned
	}
	out := outDir(t)
	work, err := os.MkdirTemp("", "cure-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, err := harness.Start(ctx, harness.Options{Out: out, Work: work, Bin: harnessBin(t),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	provisioned = env
	return env
}

// dumpOnFailure logs the node console and coordinator log tails when t fails.
func dumpOnFailure(t *testing.T, env *harness.Env) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, n := range env.Nodes {
			if b, err := os.ReadFile(n.Console); err == nil {
				t.Logf("--- %s console (last 4 KiB) ---\n%s", n.ID, tail(b, 4096))
			}
		}
		if b, err := os.ReadFile(filepath.Join(env.Opts.Work, "coordinator.log")); err == nil {
			t.Logf("--- coordinator log (last 6 KiB) ---\n%s", tail(b, 6144))
		}
	})
}

func TestProvisionFromPowerOff(t *testing.T) {
	// The node must start powered off with no history: the shared node is
	// that only if no other test used it first (test order is not fixed:
	// the suite runs with -shuffle on).
	var env *harness.Env
	if sharedEnvUsed() {
		env = startEnv(t, harness.Options{})
	} else {
		env = sharedEnv(t)
		dumpOnFailure(t, env)
	}
	n := env.Nodes[0]
	if n.BMC.PowerState() != vbmc.PowerOff {
		t.Fatalf("node starts %s, want Off", n.BMC.PowerState())
	}
	rep := provisionAndWait(t, env, n.ID, false)
	checkProvisioned(t, env, rep)
	hist := bootHistory(n)
	if !slices.Equal(hist, []string{"Pxe/Once", "Hdd/Continuous"}) {
		t.Errorf("boot override history = %v, want [Pxe/Once Hdd/Continuous]", hist)
	}
	var devs []string
	for _, b := range n.BMC.History() {
		devs = append(devs, string(b.Device))
	}
	if !slices.Equal(devs, []string{"Pxe", "Hdd"}) {
		t.Errorf("boots = %v, want [Pxe Hdd] (one PXE into CURE, one disk boot into the installed OS)", devs)
	}
	if rep.GetReboots() != 2 {
		t.Errorf("reboots = %d, want 2 (power on into CURE, reboot into the OS)", rep.GetReboots())
	}
}

// TestReprovisionSkipsMatching re-provisions the node (running
// TestProvisionFromPowerOff's provisioning first when run alone): the
// matching firmware phase is skipped and the OS is installed again.
func TestReprovisionSkipsMatching(t *testing.T) {
	env := sharedEnv(t)
	dumpOnFailure(t, env)
	n := env.Nodes[0]
	st := openStore(t, env)
	if last, err := st.LatestRun(context.Background(), n.ID); err != nil || last.Status != curev1.RunStatus_RUN_SUCCEEDED {
		checkProvisioned(t, env, provisionAndWait(t, env, n.ID, false))
	}
	before := len(bootHistory(n))
	rep := provisionAndWait(t, env, n.ID, false)
	checkProvisioned(t, env, rep)
	if got := phaseStatuses(t, st, rep.GetRunId())[modes.NVMe]; got != "skipped" {
		t.Errorf("nvme phase on re-provision = %q, want skipped (firmware already matches)", got)
	}
	if got := bootHistory(n)[before:]; !slices.Equal(got, []string{"Pxe/Once", "Hdd/Continuous"}) {
		t.Errorf("boot override changes of the re-provision = %v, want [Pxe/Once Hdd/Continuous]", got)
	}
	var preflight string
	for _, p := range rep.GetPhases() {
		if p.GetName() == string(modes.PoweringOn) {
			preflight = p.GetMessage()
		}
	}
	if !strings.Contains(preflight, "was On") {
		t.Errorf("powering_on on a running node = %q, want a ForceRestart of the running node", preflight)
	}
}

func TestCorruptArtifactFailsOSInstall(t *testing.T) {
	t.Parallel() // its own environment: see startEnv
	env := startEnv(t, harness.Options{PhaseAttempts: 2})
	n := env.Nodes[0]
	cas := filepath.Join(env.StateDir, "artifacts", "sha256", env.HostOS.SHA256)
	good, err := os.ReadFile(cas)
	if err != nil {
		t.Fatal(err)
	}
	bad := slices.Clone(good)
	for i := len(bad) / 2; i < len(bad)/2+4096; i++ {
		bad[i] ^= 0xff // same size: only the hash can tell
	}
	if err := os.WriteFile(cas, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	rep := provisionAndWait(t, env, n.ID, false)
	if rep.GetStatus() != "failed" {
		t.Fatalf("run with a corrupted artifact ended %s, want failed", rep.GetStatus())
	}
	st := openStore(t, env)
	run, err := st.GetRun(context.Background(), rep.GetRunId())
	if err != nil {
		t.Fatal(err)
	}
	if run.Phase != modes.OSInstall {
		t.Errorf("run stopped at %s, want os_install", run.Phase)
	}
	if !strings.Contains(run.Message, "sha256") {
		t.Errorf("run message does not name the hash mismatch: %q", run.Message)
	}
	if slices.Contains(bootHistory(n), "Hdd/Continuous") {
		t.Error("boot override was switched to disk although os_install failed")
	}
	if v := verdict(rep, "disk/nvme0n1", "os_install"); v == nil || v.GetStatus() != curev1.VerdictStatus_FAIL {
		t.Errorf("os_install verdict = %v, want FAIL", v)
	}

	// The operator fixes the artifact and resumes: the run goes on from
	// os_install, not from the start.
	if err := os.WriteFile(cas, good, 0o644); err != nil {
		t.Fatal(err)
	}
	rep2 := provisionAndWait(t, env, n.ID, true)
	if rep2.GetRunId() != rep.GetRunId() {
		t.Errorf("resume started a new run %s", rep2.GetRunId())
	}
	if rep2.GetStatus() != "succeeded" {
		t.Fatalf("resumed run ended %s: %s", rep2.GetStatus(), rep2.GetMessage())
	}
	ps, _ := st.Phases(context.Background(), rep.GetRunId())
	for _, p := range ps {
		if p.Name == modes.WaitForCURE && p.Attempts != 1 {
			t.Errorf("wait_for_cure ran %d times: the resume restarted earlier phases", p.Attempts)
		}
	}
	checkDisk(t, env, n)
}

// TestDiagnosticQEMU runs the RMA diagnostic on the emulated node: memory,
// CPU, NVMe SMART, link and storage checks report per-sub-component verdicts
// through the coordinator, in one boot, and the disk is not written.
func TestDiagnosticQEMU(t *testing.T) {
	t.Parallel() // its own environment: see startEnv
	env := startEnv(t, harness.Options{})
	n := env.Nodes[0]
	before := seedDisk(t, n.Disk, 31)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	runID, err := env.Run(ctx, n.ID, modes.Diagnostic, "qemu-diagnostic", false)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rep, err := env.Follow(ctx, runID, func(e *curev1.TimelineEntry) {
		t.Logf("%6.1fs %-6s %-20s %-11s %-8s %s", time.Since(start).Seconds(), e.GetSource(), e.GetPhase(), e.GetKind(), e.GetStatus(), e.GetMessage())
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.GetStatus() != "succeeded" {
		t.Fatalf("diagnostic ended %s: %s", rep.GetStatus(), rep.GetMessage())
	}
	seen := map[string]curev1.VerdictStatus{}
	for _, v := range rep.GetVerdicts() {
		key := v.GetComponent()
		if strings.HasPrefix(key, "cpu/") {
			key = "cpu/*"
		}
		if old, ok := seen[key]; !ok || v.GetStatus() > old {
			seen[key] = v.GetStatus()
		}
		if v.GetStatus() == curev1.VerdictStatus_FAIL || v.GetStatus() == curev1.VerdictStatus_ERROR {
			t.Errorf("healthy QEMU node got %s %s %s: %s (observed %s)", v.GetComponent(), v.GetCheck(), v.GetStatus(), v.GetMessage(), v.GetObserved())
		}
	}
	for _, c := range []string{"memory", "cpu/*", "nvme/0", "disk/nvme0n1", "nic/eth0"} {
		if seen[c] != curev1.VerdictStatus_PASS {
			t.Errorf("%s: verdict %v, want PASS (all: %v)", c, seen[c], seen)
		}
	}
	if len(n.BMC.History()) != 1 {
		t.Errorf("diagnostic booted the node %d times, want once (no reboots)", len(n.BMC.History()))
	}
	if after := fileSum(t, n.Disk); after != before {
		t.Error("the diagnostic changed the disk's bytes")
	}
}

// seedDisk writes a known 8 MiB pattern at the start of a node's disk, so
// "the disk is unchanged" means something, and returns the disk's sha256.
func seedDisk(t *testing.T, disk string, mul int) string {
	t.Helper()
	pattern := make([]byte, 8<<20)
	for i := range pattern {
		pattern[i] = byte(i*mul + i>>9)
	}
	f, err := os.OpenFile(disk, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(pattern, 0); err != nil {
		t.Fatal(err)
	}
	return fileSum(t, disk)
}

func fileSum(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestNVMeDriftFailsInQEMU pins an NVMe firmware QEMU is not running. QEMU's
// controller rejects Firmware Download, so the run must end in a FAIL
// verdict carrying the controller's own status, and never reach the disk.
func TestNVMeDriftFailsInQEMU(t *testing.T) {
	t.Parallel() // its own environment: see startEnv
	env := startEnv(t, harness.Options{PhaseAttempts: 1, EditManifest: func(sku *manifests.SKU) {
		sku.Spec.Firmware[0].Version = "8.0.1"
	}})
	n := env.Nodes[0]
	// The update path fetches the image before touching the controller.
	art, err := env.AddFirmwarePackage("NVME", "8.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if err := env.EditManifest(func(sku *manifests.SKU) { sku.Spec.Firmware[0].Artifact = art }); err != nil {
		t.Fatal(err)
	}
	rep := provisionAndWait(t, env, n.ID, false)
	if rep.GetStatus() != "failed" {
		t.Fatalf("run with a drifted NVMe ended %s, want failed", rep.GetStatus())
	}
	if v := verdict(rep, "nvme/0", "firmware"); v == nil || v.GetStatus() != curev1.VerdictStatus_DRIFT || v.GetObserved() != "7.2.22" {
		t.Errorf("nvme/0 firmware verdict = %v, want DRIFT observed 7.2.22", v)
	}
	v := verdict(rep, "nvme/0", "firmware_update")
	if v == nil || v.GetStatus() != curev1.VerdictStatus_FAIL || !strings.Contains(v.GetMessage(), "0x4001") {
		t.Fatalf("nvme/0 firmware_update verdict = %v, want FAIL carrying status 0x4001", v)
	}
	t.Logf("QEMU's answer: %s", v.GetMessage())
	st := openStore(t, env)
	got := phaseStatuses(t, st, rep.GetRunId())
	if got[modes.NVMe] != "failed" {
		t.Errorf("nvme phase = %q, want failed", got[modes.NVMe])
	}
	for _, p := range []modes.PhaseName{modes.SEDRevert, modes.OSInstall, modes.SetBootDisk} {
		if _, ran := got[p]; ran {
			t.Errorf("phase %s ran after the firmware failure", p)
		}
	}
}

// TestHardwareGateInQEMU declares hardware the QEMU node lacks (a second
// DIMM, a 100 Gb/s link): the runner's hardware gate reads the real node
// (QEMU's SMBIOS tables, the virtio link's speed) and names each mismatch,
// and the run ends before anything is written: no firmware phase, no wipe,
// the disk's bytes unchanged, one boot.
func TestHardwareGateInQEMU(t *testing.T) {
	t.Parallel() // its own environment: see startEnv
	env := startEnv(t, harness.Options{PhaseAttempts: 1, EditManifest: func(sku *manifests.SKU) {
		sku.Spec.Hardware.Memory.DIMMs = 2
		sku.Spec.Hardware.NICs[0].SpeedMbps = 100000
	}})
	n := env.Nodes[0]
	before := seedDisk(t, n.Disk, 7)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	runID, err := env.Provision(ctx, n.ID, modes.Provision, false)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rep, err := env.Follow(ctx, runID, func(e *curev1.TimelineEntry) {
		t.Logf("%6.1fs %-6s %-20s %-11s %-8s %s", time.Since(start).Seconds(), e.GetSource(), e.GetPhase(), e.GetKind(), e.GetStatus(), e.GetMessage())
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.GetStatus() != "failed" || !strings.Contains(rep.GetMessage(), "phase hardware failed") {
		t.Fatalf("run ended %s: %s", rep.GetStatus(), rep.GetMessage())
	}
	for comp, want := range map[string]string{
		"memory": "1 DIMMs populated, want 2",
		"nic/0":  "link 25000 Mb/s, want 100000",
	} {
		v := verdict(rep, comp, "hardware")
		if v == nil || v.GetStatus() != curev1.VerdictStatus_FAIL || !strings.Contains(v.GetMessage(), want) {
			t.Errorf("%s verdict = %v, want FAIL %q", comp, v, want)
		}
	}
	if v := verdict(rep, "nvme", "hardware"); v == nil || v.GetStatus() != curev1.VerdictStatus_PASS {
		t.Errorf("nvme verdict = %v, want PASS", v)
	}
	got := phaseStatuses(t, openStore(t, env), runID)
	for _, p := range []modes.PhaseName{modes.BMC, modes.BIOS, modes.NVMe, modes.SEDRevert, modes.OSInstall} {
		if s, ran := got[p]; ran {
			t.Errorf("phase %s ran (%s) after the hardware gate failed", p, s)
		}
	}
	if after := fileSum(t, n.Disk); after != before {
		t.Error("the disk changed although the gate failed")
	}
	if len(n.BMC.History()) != 1 {
		t.Errorf("node booted %d times, want once", len(n.BMC.History()))
	}
}
