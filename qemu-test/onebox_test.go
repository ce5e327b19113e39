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
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/timebuckets"
	"github.com/cure-oss/cure/qemu-test/harness"
	"github.com/cure-oss/cure/tools/testenv"
)

// oneBoxScript is README "Try it on one box" as a script.
const oneBoxScript = "scripts/try-one-box.sh"

// oneBoxRun is one run of the script: TestSiteWalkOneBox and
// TestCleanRunNoSecurityEvent both look at it (one QEMU provision, not two).
type oneBoxRun struct {
	work string // the script's W: state, logs
	out  string
	err  error
	wall time.Duration
}

var (
	oneBoxOnce sync.Once
	oneBoxRes  *oneBoxRun
)

// oneBox runs the script once per test binary (the first caller's t logs
// its output) and returns what it left.
func oneBox(t *testing.T) *oneBoxRun {
	t.Helper()
	out := outDir(t)
	testenv.RequireRoot(t, "the script creates network namespaces, a bridge and a tap device")
	var missing []string
	for _, f := range []string{"/usr/share/OVMF/OVMF_CODE.fd", "/usr/share/OVMF/OVMF_VARS.fd", "/usr/lib/ipxe/snponly.efi"} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f)
		}
	}
	for _, c := range []string{"ip", "dnsmasq", "qemu-system-x86_64"} {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("missing %v: run scripts/install-deps.sh", missing)
	}
	oneBoxOnce.Do(func() {
		root, err := harness.RepoRoot()
		if err != nil {
			oneBoxRes = &oneBoxRun{err: err}
			return
		}
		work, err := os.MkdirTemp("", "cure-one-box-")
		if err != nil {
			oneBoxRes = &oneBoxRun{err: err}
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, oneBoxScript))
		cmd.Dir = root
		// Namespace names unique per run: other checkouts may run it too.
		cmd.Env = append(os.Environ(), "W="+work, "OUT="+out, fmt.Sprintf("NS=cure-ob-%d", os.Getpid()), "KEEP=")
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
		oneBoxRes = &oneBoxRun{work: work, out: b.String(), err: err, wall: time.Since(start)}
	})
	if oneBoxRes.work == "" && oneBoxRes.err != nil {
		t.Fatal(oneBoxRes.err)
	}
	return oneBoxRes
}

// readmeOneBox returns the commands of README "Try it on one box" (its
// first sh block, continuation lines joined, comments and the settings
// line dropped).
func readmeOneBox(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n## Try it on one box\n")
	if i < 0 {
		t.Fatal(`README has no "## Try it on one box" section`)
	}
	s = s[i:]
	j := strings.Index(s, "```sh\n")
	k := strings.Index(s[j+6:], "\n```")
	if j < 0 || k < 0 {
		t.Fatal(`README "Try it on one box" has no sh block`)
	}
	return commands(s[j+6 : j+6+k])
}

var settingsLine = regexp.MustCompile(`^([A-Z]+=\S+\s*)+(#.*)?$`)

// commands are the lines of a shell text with continuations joined and
// spaces trimmed, without comments, blank lines and settings (A=b C=d).
func commands(text string) []string {
	var out []string
	cur := ""
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasSuffix(line, "\\") {
			cur += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		line = strings.Join(strings.Fields(cur+line), " ")
		cur = ""
		if line == "" || strings.HasPrefix(line, "#") || settingsLine.MatchString(line) {
			continue
		}
		out = append(out, line)
	}
	return out
}

// TestSiteWalkOneBox runs README "Try it on one box" (the script that
// holds exactly its commands) end to end: a UEFI QEMU node on a bridge
// beside a DHCP server that hands out addresses only, the project's
// virtual BMC configured for tap networking and UEFI, the OS image imported
// with `artifacts add`, the coordinator's proxy DHCP: the node is
// provisioned through PXE, iPXE and CURE to the installed OS's callback,
// with no step outside the documentation.
func TestSiteWalkOneBox(t *testing.T) {
	// The documentation and the script say the same, before anything runs.
	script, err := os.ReadFile("../" + oneBoxScript)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, c := range commands(string(script)) {
		have[c] = true
	}
	doc := readmeOneBox(t)
	if len(doc) < 20 {
		t.Fatalf("README's one-box block has %d commands", len(doc))
	}
	for _, c := range doc {
		if !have[c] {
			t.Errorf("README's %q is not in %s", c, oneBoxScript)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	ob := oneBox(t)
	if ob.err != nil {
		dumpOneBox(t, ob)
		t.Fatalf("%s: %v", oneBoxScript, ob.err)
	}
	t.Logf("one box: %s from the script's start to the installed OS's callback (2 cores shared, QEMU TCG)", ob.wall.Round(time.Second))
	for _, want := range []string{"check: no problems", "spec.os.image is now sha256:", "■ run SUCCEEDED", "try-one-box: node1 provisioned in"} {
		if !strings.Contains(ob.out, want) {
			t.Errorf("the script's output lacks %q", want)
		}
	}
	// The chain, as the site's DHCP server, the coordinator and the
	// node's console saw it.
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(ob.work, name))
		if err != nil {
			t.Error(err)
		}
		return string(b)
	}
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
	if n := strings.Count(read("dnsmasq.log"), "DHCPACK(veth1) 10.88.0.10 52:54:00:c0:de:01"); n < 4 {
		t.Errorf("the site DHCP server acked the node's address %d times, want at least 4 (UEFI PXE, iPXE, CURE, installed OS)", n)
	}
	con := read("vbmc/node1/console.log")
	for _, want := range []string{"Start PXE over IPv4", "NBP filename is snponly.efi", "cure.token=", "UEFI QEMU NVMe"} {
		if !strings.Contains(con, want) {
			t.Errorf("the node's console lacks %q", want)
		}
	}
	if t.Failed() {
		dumpOneBox(t, ob)
	}
}

// TestCleanRunNoSecurityEvent looks at the one-box run, a clean provision
// on a real (bridged) network where a node that resets leaves its CURE
// stream open: no security event (the installed OS's callback is accepted
// at once, not refused as "not rebooted out of CURE yet"), and the time
// after the reboot order is the installed OS's boot, not the reboot
// request's: reboot_request under 5 s, the reboot mark before the callback.
func TestCleanRunNoSecurityEvent(t *testing.T) {
	ob := oneBox(t)
	if ob.err != nil {
		dumpOneBox(t, ob)
		t.Fatalf("%s: %v", oneBoxScript, ob.err)
	}
	state := filepath.Join(ob.work, "state")
	key, err := os.ReadFile(filepath.Join(state, "state.key"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(state, "cure.db"), store.WithStateKey(key))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	sec, err := st.AuditLog(ctx, store.AuditFilter{Kind: store.AuditSecurity, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range sec {
		t.Errorf("security event on a clean run: %s %s from %s: %s", a.Action, a.Result, a.Peer, a.Detail)
	}
	r, err := st.LatestRun(ctx, "node1")
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("run %s: %s", r.Status, r.Message)
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
