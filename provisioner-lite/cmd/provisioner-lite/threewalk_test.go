package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/store/pgtest"
	"github.com/cure-oss/cure/tools/mdsh"
)

// The walk of docs/OPERATIONS.md that TestThreeInstanceWalk runs.
const (
	opsGuide     = "docs/OPERATIONS.md"
	threeHeading = "### Three instances on one host"
)

// walkStep is one sh block of the walk and how long it ran.
type walkStep struct {
	line  int
	first string
	took  time.Duration
}

// TestThreeInstanceWalk runs every sh block of docs/OPERATIONS.md's
// "Three instances on one host", in order, with bash, as a site engineer
// would: on a private PostgreSQL (CURE_DB), with this test binary as
// provisioner-lite (TestMain runs main()) and the real curectl on PATH.
// The instances run the pushed bundle alike, the artifact imported on
// instance 1 is served by instance 2 after a verified peer fetch, the
// front door moves within the lease TTL when its holder is SIGKILLed, and
// curectl reads the shared store through either survivor.
func TestThreeInstanceWalk(t *testing.T) {
	for _, c := range []string{"bash", "curl", "sha256sum", "awk", "timeout"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Fatalf("%s: %v (scripts/install-deps.sh tests installs it)", c, err)
		}
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, opsGuide))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := mdsh.SectionBlocks(opsGuide, string(doc), threeHeading)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) < 8 {
		t.Fatalf("%s %q: %d sh blocks, want the whole walk (8 or more)", opsGuide, threeHeading, len(blocks))
	}
	dsn := pgtest.Start(t).NewDatabase(t)
	bin := walkBinaries(t)
	work := t.TempDir()
	env := append(os.Environ(), "W="+work, "P="+strconv.Itoa(freePortBase(t)), "CURE_DB="+dsn,
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, steps, wall, err := runWalk(t, root, env, blocks)
	logSteps(t, steps, wall)
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", opsGuide, threeHeading, err, tail(out, 60))
	}
	checkWalk(t, work, out)
	if t.Failed() {
		t.Logf("the walk's output:\n%s", tail(out, 80))
	}
}

// walkBinaries is a PATH dir holding provisioner-lite (a script running
// this test binary's main(): no link of its own) and the real curectl.
func walkBinaries(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := "#!/bin/bash\nIFS=$'\\x1f'\nCURE_TEST_MAIN_ARGS=\"$*\" exec " + strconv.Quote(self) + " -test.run='^$'\n"
	if err := os.WriteFile(filepath.Join(dir, "provisioner-lite"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(builtCurectl(t), filepath.Join(dir, "curectl")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// freePortBase is a P whose 12 walk ports (P+11 … P+33, TCP and UDP) are
// free now: other tests and checkouts may run beside this one.
func freePortBase(t *testing.T) int {
	t.Helper()
	for range 50 {
		p := 20000 + 100*rand.IntN(400)
		free := true
		for i := 1; i <= 3 && free; i++ {
			for k := range 4 {
				addr := "127.0.0.1:" + strconv.Itoa(p+10*i+k)
				l, err := net.Listen("tcp", addr)
				if err != nil {
					free = false
					break
				}
				l.Close()
				u, err := net.ListenPacket("udp", addr)
				if err != nil {
					free = false
					break
				}
				u.Close()
			}
		}
		if free {
			return p
		}
	}
	t.Fatal("no free port base for the walk after 50 tries")
	return 0
}

var walkMarker = regexp.MustCompile(`^\+ : ` + regexp.QuoteMeta(opsGuide) + `:(\d+)$`)

// runWalk runs the blocks as one bash script in the repository root and
// times each block by its marker in bash's trace.
func runWalk(t *testing.T, root string, env []string, blocks []mdsh.Block) (string, []walkStep, time.Duration, error) {
	prelude := `cleanup() { set +e; kill $(jobs -p) 2>/dev/null; wait; true; }` + "\ntrap cleanup EXIT\nset -x\n"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", mdsh.Script(opsGuide, blocks, prelude))
	cmd.Dir, cmd.Env = root, env
	// Its own process group: a timeout ends the instances too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	first := map[int]string{}
	for _, b := range blocks {
		first[b.Line], _, _ = strings.Cut(b.Text, "\n")
	}
	var b strings.Builder
	var steps []walkStep
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			now := time.Since(start)
			if m := walkMarker.FindStringSubmatch(sc.Text()); m != nil {
				if n := len(steps); n > 0 {
					steps[n-1].took = now - steps[n-1].took
				}
				line, _ := strconv.Atoi(m[1])
				steps = append(steps, walkStep{line: line, first: first[line], took: now})
			}
			b.WriteString(sc.Text() + "\n")
		}
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	wall := time.Since(start)
	if n := len(steps); n > 0 {
		steps[n-1].took = wall - steps[n-1].took
	}
	return b.String(), steps, wall, err
}

func logSteps(t *testing.T, steps []walkStep, wall time.Duration) {
	var b strings.Builder
	for _, s := range steps {
		fmt.Fprintf(&b, "  %s:%d %6.2fs  %s\n", opsGuide, s.line, s.took.Seconds(), s.first)
	}
	t.Logf("the walk took %.1fs, by block:\n%s", wall.Seconds(), b.String())
}

var (
	walkBundle   = regexp.MustCompile(`(?m)^cure-(\d): manifest bundle (\S*), front door held (\S*)$`)
	walkTakeover = regexp.MustCompile(`(?m)^cure-(\d) took the front door (\d+) ms after cure-(\d) was killed`)
	walkServed   = regexp.MustCompile(`(?m)^\(instance (cure-\d): manifest bundle (\d+) from the store\)$`)
)

// checkWalk asserts what the walk printed and logged.
func checkWalk(t *testing.T, work, out string) {
	t.Helper()
	holders := 0
	bundles := walkBundle.FindAllStringSubmatch(out, -1)
	for _, m := range bundles {
		if m[2] != "1" {
			t.Errorf("cure-%s runs manifest bundle %q, want 1 (the one pushed)", m[1], m[2])
		}
		if m[3] == "1" {
			holders++
		}
	}
	if len(bundles) != 3 || holders != 1 {
		t.Errorf("%d instances reported their bundle and front door, %d holding it; want 3 and 1", len(bundles), holders)
	}
	checkPeerFetch(t, work, out)
	m := walkTakeover.FindStringSubmatch(out)
	if m == nil {
		t.Fatal("the walk did not print the front door's takeover")
	}
	oldH, newH := m[3], m[1]
	ms, _ := strconv.Atoi(m[2])
	// The lease lapses at most a TTL (3 s) after the holder's last
	// renewal; a survivor's tick (TTL/3) adds 1 s, a loaded machine more.
	if newH == oldH || ms > 6000 {
		t.Errorf("front door: cure-%s took it %d ms after cure-%s was killed; want another instance within 6 s (TTL 3 s)", newH, ms, oldH)
	}
	for _, h := range []string{oldH, newH} {
		if !strings.Contains(out, "cure-"+h+" answers TFTP") {
			t.Errorf("cure-%s, holding the front door, did not answer TFTP", h)
		}
	}
	if log, _ := os.ReadFile(filepath.Join(work, "i"+newH+".log")); !strings.Contains(string(log), `msg="front door lease taken`) {
		t.Errorf("cure-%s's log lacks the front door's takeover", newH)
	}
	served := walkServed.FindAllStringSubmatch(out, -1)
	if len(served) != 2 || served[0][1] == served[1][1] || served[0][2] != "1" || served[1][2] != "1" {
		t.Errorf("curectl manifests through the two survivors: %q, want bundle 1 from each", served)
	}
	if !regexp.MustCompile(`(?mi)^added 2: gpu-001, gpu-002$`).MatchString(out) || !regexp.MustCompile(`(?m)^gpu-002\s+hgx-b200\s+idle`).MatchString(out) {
		t.Error("the nodes imported through one survivor are not listed by the other")
	}
}

// checkPeerFetch: instance 2 served the artifact only instance 1 imported,
// fetched from cure-1 and verified, and keeps it.
func checkPeerFetch(t *testing.T, work, out string) {
	t.Helper()
	if !strings.Contains(out, work+"/fetched.raw: OK") {
		t.Error("the artifact fetched from cure-2 does not match its sha256")
	}
	log, _ := os.ReadFile(filepath.Join(work, "i2.log"))
	ok := false
	for _, l := range strings.Split(string(log), "\n") {
		ok = ok || strings.Contains(l, `msg="artifact fetched and verified"`) && strings.Contains(l, "source=cure-1")
	}
	if !ok {
		t.Error(`cure-2's log lacks "artifact fetched and verified" from cure-1`)
	}
	m, _ := filepath.Glob(filepath.Join(work, "i2", "artifacts", "sha256", "*"))
	if len(m) != 1 {
		t.Errorf("cure-2's artifact store holds %d artifacts, want the one fetched", len(m))
	}
}
