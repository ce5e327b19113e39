package qemutest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/timebuckets"
	"github.com/cure-oss/cure/qemu-test/harness"
	"github.com/cure-oss/cure/tools/mdsh"
	"github.com/cure-oss/cure/tools/testenv"
)

// siteGuide is the site guide whose every sh block TestSiteGuideCommands
// runs, in order, as one bash script.
const siteGuide = "docs/SITE.md"

// netnsTests serialises the tests that build a site in network namespaces
// (this walk, TestUEFIProxyDHCPProvision, TestNodePairBurnin): each runs
// in parallel with the rest of the package but not with the others, so
// at most one of these multi-VM, timing-sensitive walks shares the CPUs
// with one other test. Their namespaces carry the test binary's pid and
// their devices live inside them, so nothing else would collide.
var netnsTests sync.Mutex

// lockNetns takes netnsTests until the test's cleanups have run: the
// unlock is registered first, so it runs last (cleanups run in reverse),
// after the namespaces are deleted. A deferred unlock would let the next
// namespace test in while this one's namespaces still exist.
func lockNetns(t *testing.T) {
	netnsTests.Lock()
	t.Cleanup(netnsTests.Unlock)
}

// netnsSeq makes each site's namespace names unique within the test binary
// (the pid makes them unique across binaries).
var netnsSeq atomic.Int64

// oneBoxRun is one run of the site guide's commands: TestSiteGuideCommands
// and TestCleanRunNoSecurityEvent both look at it (one walk, not two).
type oneBoxRun struct {
	work string // the guide's W: state, logs, the HTML report
	out  string
	err  error
	wall time.Duration
}

var (
	oneBoxOnce sync.Once
	oneBoxRes  *oneBoxRun
)

// guideBlocks returns the guide's sh blocks in order (mdsh.Blocks: a
// command block in another shell's fence, or an unclosed fence, is an
// error naming its line).
func guideBlocks(name, doc string) ([]mdsh.Block, error) { return mdsh.Blocks(name, doc) }

// guideScript is the blocks as one bash script: strict mode, each block
// announced with its line, and a trap that stops the background jobs and
// deletes the namespaces if a block fails before the guide's own "Stop".
func guideScript(name string, blocks []mdsh.Block) string {
	cleanup := `cleanup() { set +e; kill $(jobs -p) 2>/dev/null; wait; ip netns delete "$NS-dhcp" 2>/dev/null; ip netns delete "$NS" 2>/dev/null; true; }`
	return mdsh.Script(name, blocks, cleanup+"\ntrap cleanup EXIT\nset -x\n")
}

// oneBox runs the guide's commands once per test binary (the first
// caller's t logs their output) and returns what they left. W, OUT and NS
// are the only settings: the guide keeps a value the environment gives.
func oneBox(t *testing.T) *oneBoxRun {
	t.Helper()
	out := outDir(t)
	testenv.RequireRoot(t, "the guide creates network namespaces, a bridge and a tap device")
	var missing []string
	for _, f := range []string{"/usr/share/OVMF/OVMF_CODE.fd", "/usr/share/OVMF/OVMF_VARS.fd", "/usr/lib/ipxe/snponly.efi"} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f)
		}
	}
	for _, c := range []string{"ip", "dnsmasq", "qemu-system-x86_64", "timeout"} {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("missing %v: run scripts/install-deps.sh tests", missing)
	}
	t.Parallel() // one walk at a time among the namespace tests: netnsTests
	oneBoxOnce.Do(func() {
		netnsTests.Lock()
		defer netnsTests.Unlock()
		oneBoxRes = runGuide(t, out)
	})
	if oneBoxRes.work == "" && oneBoxRes.err != nil {
		t.Fatal(oneBoxRes.err)
	}
	return oneBoxRes
}

// runGuide runs the guide's sh blocks in a fresh work dir.
func runGuide(t *testing.T, out string) *oneBoxRun {
	root, err := harness.RepoRoot()
	if err != nil {
		return &oneBoxRun{err: err}
	}
	doc, err := os.ReadFile(filepath.Join(root, siteGuide))
	if err != nil {
		return &oneBoxRun{err: err}
	}
	blocks, err := guideBlocks(siteGuide, string(doc))
	if err != nil {
		return &oneBoxRun{err: err}
	}
	work, err := os.MkdirTemp("", "cure-one-box-")
	if err != nil {
		return &oneBoxRun{err: err}
	}
	script := guideScript(siteGuide, blocks)
	if err := os.WriteFile(filepath.Join(work, "site-guide.sh"), []byte(script), 0o644); err != nil {
		return &oneBoxRun{err: err}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(work, "site-guide.sh"))
	cmd.Dir = root
	// Namespace names unique per run: other checkouts may run it too.
	cmd.Env = append(os.Environ(), "W="+work, "OUT="+out, fmt.Sprintf("NS=cure-ob-%d", os.Getpid()))
	cmd.WaitDelay = 30 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var b strings.Builder
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
			t.Logf("%6.1fs| %s", time.Since(start).Seconds(), sc.Text())
		}
	}()
	err = cmd.Run()
	pw.Close()
	<-done
	return &oneBoxRun{work: work, out: b.String(), err: err, wall: time.Since(start)}
}

// startedRuns are the run ids `curectl provision` printed, in order.
var startedRun = regexp.MustCompile(`(?m)^run (\S+) started on node1\b`)

func startedRuns(out string) []string {
	var ids []string
	for _, m := range startedRun.FindAllStringSubmatch(out, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// TestSiteGuideCommands runs every sh block of docs/SITE.md in the order
// written, on one box: a UEFI QEMU node on a bridge beside a DHCP server
// that hands out addresses only, the project's virtual BMC configured for
// tap networking and UEFI, the OS image imported with `artifacts add`, the
// coordinator's proxy DHCP: the node is provisioned through PXE, iPXE and
// CURE to the installed OS's callback, then drained and diagnosed with
// the suite copied into the site's manifests, and its HTML report
// written, with no step outside the guide.
func TestSiteGuideCommands(t *testing.T) {
	ob := oneBox(t)
	if ob.err != nil {
		dumpOneBox(t, ob)
		t.Fatalf("%s: %v", siteGuide, ob.err)
	}
	t.Logf("site guide: %s from its first command to the HTML report (2 cores shared, QEMU TCG)", ob.wall.Round(time.Second))
	for _, want := range []string{"check: no problems", "spec.os.image is now sha256:", "wrote " + filepath.Join(ob.work, "node1.html"), "node node1 sent to its installed OS"} {
		if !strings.Contains(ob.out, want) {
			t.Errorf("the guide's output lacks %q", want)
		}
	}
	if n := strings.Count(ob.out, "■ run SUCCEEDED"); n != 2 {
		t.Errorf("the guide's output has %d \"■ run SUCCEEDED\", want 2 (the provision, the diagnostic)", n)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(ob.work, name))
		if err != nil {
			t.Error(err)
		}
		return string(b)
	}
	checkOneBoxChain(t, read)
	checkDiagnostic(t, ob, read("node1.html"))
	if t.Failed() {
		dumpOneBox(t, ob)
	}
}

// checkOneBoxChain: the chain, as the site's DHCP server, the coordinator
// and the node's console saw it.
func checkOneBoxChain(t *testing.T, read func(string) string) {
	t.Helper()
	coord := read("coordinator.log")
	for _, want := range []string{
		`msg="proxy DHCP: answered" node=node1 mac=52:54:00:c0:de:01 port=67 reply=OFFER arch=7 stage=pxe-firmware file=snponly.efi`,
		`msg="tftp: sent" file=snponly.efi peer=10.88.0.10`,
		`stage=ipxe file=http://10.88.0.1:8080/boot.ipxe`,
		`msg="runner connected"`,
	} {
		if !strings.Contains(coord, want) {
			t.Errorf("coordinator log lacks %q", want)
		}
	}
	// UEFI PXE, iPXE, CURE, the installed OS; then the diagnostic's boot.
	if n := strings.Count(read("dnsmasq.log"), "DHCPACK(veth1) 10.88.0.10 52:54:00:c0:de:01"); n < 6 {
		t.Errorf("the site DHCP server acked the node's address %d times, want at least 6 (UEFI PXE, iPXE, CURE, installed OS, then PXE, iPXE, CURE again)", n)
	}
	con := read("vbmc/node1/console.log")
	for _, want := range []string{"Start PXE over IPv4", "NBP filename is snponly.efi", "cure.token=", "UEFI QEMU NVMe"} {
		if !strings.Contains(con, want) {
			t.Errorf("the node's console lacks %q", want)
		}
	}
}

// checkDiagnostic: the guide's second run is the diagnostic, succeeded
// with verdicts, and the HTML report is that run's.
func checkDiagnostic(t *testing.T, ob *oneBoxRun, html string) {
	t.Helper()
	ids := startedRuns(ob.out)
	if len(ids) != 2 {
		t.Fatalf("runs started %v: want the provision and the diagnostic", ids)
	}
	st := openOneBoxStore(t, ob)
	ctx := context.Background()
	r, err := st.GetRun(ctx, ids[1])
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != modes.Diagnostic || r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Errorf("run %s: mode %s, %s (%s): want a succeeded diagnostic", r.ID, r.Mode, r.Status, r.Message)
	}
	for _, want := range []string{"<html", ids[1], "qemu-diagnostic", "memory-patterns", "disk-read"} {
		if !strings.Contains(html, want) {
			t.Errorf("the HTML report lacks %q", want)
		}
	}
}

// openOneBoxStore opens the walk's store, closed at the test's end.
func openOneBoxStore(t *testing.T, ob *oneBoxRun) *store.Store {
	t.Helper()
	state := filepath.Join(ob.work, "state")
	key, err := os.ReadFile(filepath.Join(state, "state.key"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(state, "cure.db"), store.WithStateKey(key))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestCleanRunNoSecurityEvent looks at the site guide's walk: a clean
// provision and diagnostic on a real (bridged) network where a node that
// resets leaves its CURE stream open: no security event up to the
// diagnostic's end (the installed OS's callback is accepted at once, not
// refused as "not rebooted out of CURE yet"; what a runner left in CURE
// by a suite without spec.end does afterwards is
// TestEndedRunnerNoSecurityEvents' matter), and the provision's time
// after the reboot order is the installed OS's boot, not the reboot
// request's: reboot_request under 5 s, the reboot mark before the callback.
func TestCleanRunNoSecurityEvent(t *testing.T) {
	ob := oneBox(t)
	if ob.err != nil {
		dumpOneBox(t, ob)
		t.Fatalf("%s: %v", siteGuide, ob.err)
	}
	ids := startedRuns(ob.out)
	if len(ids) != 2 {
		t.Fatalf("runs started %v: want the provision and the diagnostic", ids)
	}
	st := openOneBoxStore(t, ob)
	ctx := context.Background()
	diag, err := st.GetRun(ctx, ids[1])
	if err != nil {
		t.Fatal(err)
	}
	sec, err := st.AuditLog(ctx, store.AuditFilter{Kind: store.AuditSecurity, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range sec {
		if diag.EndedAt.IsZero() || !a.Time.After(diag.EndedAt) {
			t.Errorf("security event on a clean run: %s %s from %s: %s", a.Action, a.Result, a.Peer, a.Detail)
		}
	}
	r, err := st.GetRun(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != modes.Provision || r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("run %s: mode %s, %s: %s", r.ID, r.Mode, r.Status, r.Message)
	}
	phases, err := st.Phases(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	events, err := st.Events(ctx, r.ID, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	b := timebuckets.Compute(r, phases, events, time.Now())
	req, _ := b.Get(timebuckets.RebootRequest)
	boot, _ := b.Get(timebuckets.OSBootCallback)
	t.Logf("boot_installed_os: reboot_request %s, os_boot_to_callback %s", req.Duration.Round(time.Millisecond), boot.Duration.Round(time.Millisecond))
	if req.Duration <= 0 || req.Duration >= 5*time.Second || boot.Duration <= req.Duration {
		t.Errorf("reboot_request %s, os_boot_to_callback %s: want the reboot order under 5 s and the installed OS's boot the larger part",
			req.Duration, boot.Duration)
	}
	var waitStart, ready time.Time
	for _, p := range phases {
		if p.Name == modes.WaitForHostOS {
			waitStart = p.StartedAt
			if p.Attempts != 1 {
				t.Errorf("wait_for_host_os took %d attempts", p.Attempts)
			}
		}
	}
	for _, e := range events {
		if e.Kind == runstate.EventHostReady {
			ready = e.Time
		}
	}
	marks := timebuckets.RebootTimes(phases, events)
	if len(marks) != 2 {
		t.Fatalf("reboot marks %v: want the power-on and the reboot into the installed OS", marks)
	}
	if m := marks[1]; m.Before(waitStart) || m.Sub(waitStart) >= 5*time.Second || !m.Before(ready) {
		t.Errorf("reboot mark at %s: want it within 5 s of wait_for_host_os's start (%s) and before the callback (%s)",
			m.Format(time.RFC3339Nano), waitStart.Format(time.RFC3339Nano), ready.Format(time.RFC3339Nano))
	}
}

// dumpOneBox logs the tails of the one-box run's logs.
func dumpOneBox(t *testing.T, ob *oneBoxRun) {
	for _, name := range []string{"vbmc/node1/console.log", "coordinator.log", "vbmc.log", "dnsmasq.log"} {
		if b, err := os.ReadFile(filepath.Join(ob.work, name)); err == nil {
			t.Logf("--- %s (last 4 KiB) ---\n%s", name, tail(b, 4096))
		}
	}
}

// TestSiteGuideBlocks reads docs/SITE.md as TestSiteGuideCommands does,
// without running it: the walk's steps are there in order, and a command
// block the test would skip (another shell's fence) or an unclosed fence
// is refused naming its line.
func TestSiteGuideBlocks(t *testing.T) {
	doc, err := os.ReadFile("../" + siteGuide)
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := guideBlocks(siteGuide, string(doc))
	if err != nil {
		t.Fatal(err)
	}
	script := guideScript(siteGuide, blocks)
	last := -1
	for _, step := range []string{
		"W=${W:-", "make image hostos", "ip netns add $NS", "dnsmasq", "provisioner-lite init",
		"vbmc -config", "cp manifests/examples/suites/qemu-diagnostic.yaml $W/manifests/suites/", "artifacts add",
		"provisioner-lite check", "--proxy-dhcp", "curectl provision --watch node1", "curectl nodes drain node1",
		"curectl nodes drained node1", "--mode diagnostic --manifest qemu-diagnostic", "curectl report --html", "curectl nodes boot-os node1", "ip netns delete $NS",
	} {
		i := strings.Index(script, step)
		if i < 0 || i < last {
			t.Errorf("%s: %q missing or out of order", siteGuide, step)
		}
		last = i
	}
	for _, c := range []struct{ doc, want string }{
		{"a\n```bash\nls\n```\n", "x.md:2: a \"bash\" block"},
		{"```sh\nls\n", "x.md:1: fence not closed"},
	} {
		if _, err := guideBlocks("x.md", c.doc); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.doc, err, c.want)
		}
	}
	if b, err := guideBlocks("x.md", "```yaml\na: 1\n```\n```sh\necho hi\n```\n"); err != nil || len(b) != 1 || b[0].Line != 4 || b[0].Text != "echo hi" {
		t.Errorf("blocks %+v, %v: want the sh block at line 4", b, err)
	}
}
