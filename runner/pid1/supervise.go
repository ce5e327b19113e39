package pid1

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// Program is one command PID 1 starts.
type Program struct {
	Path string
	Args []string // argv, Args[0] included
	// Ctty makes the console the program's controlling terminal (a new
	// session): the debug shell wants job control, the runner does not.
	Ctty bool
}

// Supervisor starts its programs one after the other for ever: the runner
// never ends on its own, so when it does (a crash) it is started again
// after Restart, with a debug shell in between where the kernel command
// line asked for one. While a program runs it reaps every other child that
// ends: PID 1 inherits every orphan (stress-ng's workers when a check
// kills their parent, a shell's background jobs), and an unreaped orphan
// is a zombie holding its PID until the node reboots.
type Supervisor struct {
	Programs []Program
	Env      []string
	// Files are the programs' stdin, stdout and stderr (the console).
	Files   []uintptr
	Restart time.Duration
	// Starts bounds the program starts (0: no bound; tests bound it).
	Starts int
	Logf   func(format string, args ...any)
	reaped int
}

// Reaped is how many children that were not the current program were
// reaped (orphans).
func (s *Supervisor) Reaped() int { return s.reaped }

// Run starts the programs in turn until Starts is reached (for ever when it
// is 0). It returns only when bounded.
func (s *Supervisor) Run() error {
	if len(s.Programs) == 0 {
		return errors.New("pid1: nothing to supervise")
	}
	var errs []error
	for n := 0; s.Starts == 0 || n < s.Starts; n++ {
		p := s.Programs[n%len(s.Programs)]
		status, err := s.runOne(p)
		if err != nil {
			s.logf("cure-init: %s: %v", p.Path, err)
			errs = append(errs, err)
		} else {
			s.logf("cure-init: %s ended (%s)", p.Path, describe(status))
		}
		if s.Starts != 0 && n+1 >= s.Starts {
			break
		}
		time.Sleep(s.Restart)
	}
	return errors.Join(errs...)
}

// runOne starts p and waits for it, reaping whatever else ends meanwhile.
func (s *Supervisor) runOne(p Program) (syscall.WaitStatus, error) {
	attr := &syscall.ProcAttr{Env: s.Env, Files: s.Files, Sys: &syscall.SysProcAttr{}}
	if p.Ctty {
		attr.Sys.Setsid, attr.Sys.Setctty, attr.Sys.Ctty = true, true, 0
	}
	pid, err := syscall.ForkExec(p.Path, p.Args, attr)
	if err != nil {
		return 0, fmt.Errorf("starting: %w", err)
	}
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return 0, fmt.Errorf("waiting for pid %d: %w", pid, err)
		case got == pid:
			return ws, nil
		default:
			s.reaped++
		}
	}
}

func (s *Supervisor) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
}

func describe(ws syscall.WaitStatus) string {
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		return "killed by " + ws.Signal().String()
	default:
		return fmt.Sprintf("wait status %#x", uint32(ws))
	}
}

// heldSignals are the signals HoldSignals catches.
var heldSignals = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE}

// HoldSignals keeps the signals that would end a Go program (a stray
// `kill -TERM 1`, Ctrl-Alt-Del's SIGINT, a hang-up on the console) from
// ending PID 1, whose exit panics the kernel: each is caught and logged.
// Caught, not ignored: an ignored signal stays ignored across exec, and
// the runner, its tools and the debug shell's commands must get them.
func HoldSignals(logf func(format string, args ...any)) {
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, heldSignals...)
	go func() {
		for sig := range ch {
			if logf != nil {
				logf("cure-init: %s received and ignored (PID 1 does not exit)", sig)
			}
		}
	}()
}

// Env is PID 1's environment for the programs it starts: the busybox's
// commands and the image's tools on PATH (u-root's busybox cannot look up
// bare names itself, but os/exec can).
func Env() []string {
	return []string{
		"PATH=/bbin:/bin:/usr/bin:/usr/sbin:/sbin",
		"HOME=/",
		"USER=root",
		"TERM=linux",
	}
}

// DebugShell reports whether the kernel command line in cmdline asks for
// the debug shell (cure.debug=1, as the runner reads it).
func DebugShell(cmdline string) bool {
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, "cure.debug="); ok {
			return v == "1" || v == "true" || v == "yes"
		}
	}
	return false
}

// QuietConsole lowers the kernel's console log level to warnings and worse
// (as u-root's init did), so driver chatter does not bury the runner's
// lines on a serial console; everything stays in the kernel log.
func QuietConsole() error {
	// Messages below the level are printed: 5 keeps KERN_WARNING (4) and worse.
	const syslogActionConsoleLevel, level = 8, 5
	if _, _, e := syscall.Syscall(syscall.SYS_SYSLOG, syslogActionConsoleLevel, 0, level); e != 0 {
		return fmt.Errorf("setting the console log level: %w", e)
	}
	return nil
}

// ReadCmdline is /proc/cmdline ("" when unreadable).
func ReadCmdline() string {
	b, _ := os.ReadFile("/proc/cmdline")
	return string(b)
}
