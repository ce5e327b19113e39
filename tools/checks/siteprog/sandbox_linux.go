package siteprog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cure-oss/cure/tools/tail"
	"golang.org/x/sys/unix"
)

// masked are the files that carry the run's secrets, or could: the
// kernel command line holds cure.token=, the kernel log printed it at boot.
// Each is covered with /dev/null, read-only, in the program's mount
// namespace; an unprivileged program cannot unmount it, and the kernel
// refuses it a fresh procfs while /proc has a file mounted over
// (mount_too_revealing), so a user namespace of its own does not help.
// /proc/cmdline must be masked; the others where the kernel has them.
var masked = []struct {
	path     string
	required bool
}{{"/proc/cmdline", true}, {"/proc/bootconfig", false}, {"/dev/kmsg", false}}

// run runs prog in the sandbox and collects what it printed. The mount
// namespace is made on a thread of its own (locked, never unlocked, so it
// ends with this run), and the program is started from that thread, which
// is how it inherits the namespace; the rest of the runner never sees it.
func (s Sandbox) run(ctx context.Context, prog []byte, env []string, limit time.Duration, maxOut int64, grace time.Duration) (*result, error) {
	s = s.withDefaults()
	if os.Geteuid() != 0 {
		return nil, errors.New("site programs are sandboxed with namespaces and another uid, which needs root: this process is not")
	}
	if err := s.restrictKernelLog(); err != nil {
		return nil, err
	}
	type answer struct {
		res *result
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread holds the private namespace and
		// must exit with this goroutine instead of serving others.
		res, err := s.runLocked(ctx, prog, env, limit, maxOut, grace)
		ch <- answer{res, err}
	}()
	a := <-ch
	return a.res, a.err
}

// restrictKernelLog makes sure an unprivileged process cannot read the
// kernel log (syslog(2) and /dev/kmsg), which holds the boot's command
// line: kernel.dmesg_restrict=1.
func (s Sandbox) restrictKernelLog() error {
	p := filepath.Join(s.ProcSys, "kernel/dmesg_restrict")
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	if strings.TrimSpace(string(b)) == "1" {
		return nil
	}
	if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("sandbox: the kernel log holds the boot token and %s is %s: setting it to 1: %w", p, strings.TrimSpace(string(b)), err)
	}
	return nil
}

func (s Sandbox) runLocked(ctx context.Context, prog []byte, env []string, limit time.Duration, maxOut int64, grace time.Duration) (*result, error) {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return nil, fmt.Errorf("sandbox: new mount namespace: %w", err)
	}
	// Nothing mounted here reaches the node's namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("sandbox: private mounts: %w", err)
	}
	for _, m := range masked {
		if err := mask(m.path); err != nil {
			if !m.required && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("sandbox: mask %s: %w", m.path, err)
		}
	}
	opts := fmt.Sprintf("size=%d,mode=1777", s.TmpBytes)
	if err := unix.Mount("tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return nil, fmt.Errorf("sandbox: private /tmp: %w", err)
	}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if err := unix.Mount("tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return nil, fmt.Errorf("sandbox: private /dev/shm: %w", err)
		}
	}
	if err := os.WriteFile(ProgramPath, prog, 0o555); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if err := os.Chmod(ProgramPath, 0o555); err != nil { // past the umask
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if err := os.Mkdir(WorkDir, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if err := os.Chown(WorkDir, int(s.UID), int(s.GID)); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	// Inherited by the program (a per-thread flag that clone copies): no
	// setuid program gives it back privileges.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("sandbox: no_new_privs: %w", err)
	}
	if err := closeOnExec(); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	tctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var cmd *exec.Cmd
	var stdout, stderr *capped
	for try := 0; ; try++ {
		cmd, stdout, stderr = s.command(tctx, env, maxOut, grace)
		err := cmd.Start()
		if err == nil {
			break
		}
		// Another goroutine's fork may still hold the program's write
		// descriptor for an instant (until its child execs).
		if errors.Is(err, syscall.ETXTBSY) && try < 20 {
			time.Sleep(time.Duration(try+1) * 5 * time.Millisecond)
			continue
		}
		return nil, fmt.Errorf("sandbox: start: %w", err)
	}
	werr := cmd.Wait()
	res := &result{timedOut: errors.Is(tctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil}
	res.stdout, _, res.overStdout = stdout.state()
	_, res.stderrTail, res.overStderr = stderr.state()
	var exitErr *exec.ExitError
	switch {
	case werr == nil:
	case errors.As(werr, &exitErr):
		res.exitErr = exitStatus(exitErr)
	case res.overStdout || res.overStderr || res.timedOut || ctx.Err() != nil:
		// The copy's errOver, or the wait delay's: said by the flags.
	default:
		return nil, fmt.Errorf("sandbox: %w", werr)
	}
	return res, nil
}

// command is the program's exec.Cmd: its own PID namespace (its first
// process is that namespace's init: when it dies, everything it started
// dies), its own IPC namespace, its own network namespace unless the
// suite gives it the node's, a process group, the unprivileged ids,
// no supplementary groups, killed if the runner dies; over the time limit
// SIGTERM to the group, SIGKILL after grace.
func (s Sandbox) command(ctx context.Context, env []string, maxOut int64, grace time.Duration) (*exec.Cmd, *capped, *capped) {
	cmd := exec.CommandContext(ctx, ProgramPath)
	cmd.Dir = WorkDir
	cmd.Env = env
	flags := uintptr(syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC)
	if !s.Network {
		flags |= syscall.CLONE_NEWNET
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Cloneflags: flags,
		Credential: &syscall.Credential{Uid: s.UID, Gid: s.GID, Groups: []uint32{}},
	}
	killGroup := func(sig syscall.Signal) {
		if cmd.Process != nil {
			syscall.Kill(-cmd.Process.Pid, sig)
		}
	}
	cmd.Cancel = func() error { killGroup(syscall.SIGTERM); return nil }
	cmd.WaitDelay = grace
	stdout := &capped{max: maxOut, keep: true, kill: func() { killGroup(syscall.SIGKILL) }}
	stderr := &capped{max: maxOut, tail: tail.Buffer{Max: 2048}, kill: func() { killGroup(syscall.SIGKILL) }}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	return cmd, stdout, stderr
}

// mask covers path with /dev/null, read-only.
func mask(path string) error {
	if _, err := os.Lstat(path); err != nil {
		return err
	}
	if err := unix.Mount("/dev/null", path, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	return unix.Mount("", path, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, "")
}

// closeOnExec marks every descriptor above stderr close-on-exec, so the
// program inherits none but the three os/exec gives it (stdin /dev/null,
// the stdout and stderr pipes). Go opens its own that way; this catches
// any the process was started with.
func closeOnExec() error {
	err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if err == nil || !(errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL)) {
		return err
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
	}
	return nil
}

// exitStatus says how the program ended: "exited with status 3" or
// "was killed by signal killed".
func exitStatus(e *exec.ExitError) error {
	if ws, ok := e.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Errorf("was killed by signal %s", ws.Signal())
	}
	return fmt.Errorf("exited with status %d", e.ExitCode())
}
