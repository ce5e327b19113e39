package pid1

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSupervisorRestartsAndReapsOrphans runs the supervisor in a child
// process made a subreaper (so orphans come to it as they come to PID 1):
// the first program leaves two background jobs behind and exits 3, a
// program that cannot start is reported and skipped, and the orphans are
// reaped while the last program runs; no zombie is left.
func TestSupervisorRestartsAndReapsOrphans(t *testing.T) {
	if os.Getenv("PID1_SUPERVISOR_CHILD") == "1" {
		supervisorChild()
		return
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestSupervisorRestartsAndReapsOrphans$")
	cmd.Env = append(os.Environ(), "PID1_SUPERVISOR_CHILD=1", "PID1_SH="+sh)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("supervisor child: %v\n%s", err, out)
	}
	s := string(out)
	for _, want := range []string{
		"leaver ended (exit status 3)",
		"/nonexistent/runner: starting: no such file or directory",
		"sleeper ended (exit status 0)",
		"reaped=2 zombies=0",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	// HoldSignals catches its signals in PID 1; the children must not
	// inherit them ignored. Only those bits are checked: a signal the
	// test's own parent ignores (CI's ignores realtime signal 32) is
	// rightly inherited.
	ign, err := sigIgnMask(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range heldSignals {
		n := sig.(syscall.Signal)
		if ign&(1<<(uint(n)-1)) != 0 {
			t.Errorf("the child inherited %v ignored (SigIgn %#x)", sig, ign)
		}
	}
}

// sigIgnMask reads the SigIgn line /proc/self/status printed.
func sigIgnMask(out string) (uint64, error) {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("no SigIgn line in:\n%s", out)
}

// TestSigIgnMaskFindsHeldSignal checks the mask check itself: a child
// started with SIGTERM ignored shows it in the mask that the test reads.
func TestSigIgnMaskFindsHeldSignal(t *testing.T) {
	m, err := sigIgnMask("x\nSigIgn:\t0000000080004000\n")
	if err != nil {
		t.Fatal(err)
	}
	if m&(1<<(uint(syscall.SIGTERM)-1)) == 0 || m&(1<<31) == 0 {
		t.Fatalf("mask %#x: SIGTERM or signal 32 not read", m)
	}
}

func supervisorChild() {
	HoldSignals(func(f string, a ...any) { fmt.Printf(f+"\n", a...) })
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Println("prctl:", err)
		os.Exit(1)
	}
	sh := os.Getenv("PID1_SH")
	dir, _ := os.MkdirTemp("", "pid1-")
	defer os.RemoveAll(dir)
	// argv[0] names the program in the log lines.
	leaver, sleeper := filepath.Join(dir, "leaver"), filepath.Join(dir, "sleeper")
	os.Symlink(sh, leaver)
	os.Symlink(sh, sleeper)
	s := &Supervisor{
		Programs: []Program{
			{Path: leaver, Args: []string{"leaver", "-c", "(sleep 0.2) & (sleep 0.3) & exit 3"}},
			{Path: "/nonexistent/runner", Args: []string{"runner"}},
			{Path: sleeper, Args: []string{"sleeper", "-c", "grep SigIgn /proc/self/status; sleep 1"}},
		},
		Env:     os.Environ(),
		Files:   []uintptr{0, 1, 2},
		Restart: 10 * time.Millisecond,
		Starts:  3,
		Logf:    func(f string, a ...any) { fmt.Printf(f+"\n", a...) },
	}
	err := s.Run()
	fmt.Printf("run: %v\n", err)
	fmt.Printf("reaped=%d zombies=%d\n", s.Reaped(), zombies())
	os.Exit(0)
}

// zombies counts this process's children that are zombies.
func zombies() int {
	n := 0
	ents, _ := os.ReadDir("/proc")
	me := fmt.Sprint(os.Getpid())
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[0] == "Z" && f[1] == me {
			n++
		}
	}
	return n
}

func TestDebugShell(t *testing.T) {
	for in, want := range map[string]bool{
		"console=ttyS0 cure.debug=1":    true,
		"cure.debug=yes quiet":          true,
		"cure.debug=0":                  false,
		"console=ttyS0 cure.debugger=1": false,
		"":                              false,
	} {
		if got := DebugShell(in); got != want {
			t.Errorf("DebugShell(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestEnvHasBusyboxOnPath(t *testing.T) {
	for _, kv := range Env() {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok && strings.HasPrefix(p, "/bbin:") {
			return
		}
	}
	t.Fatalf("Env() = %v: want PATH starting with /bbin", Env())
}
