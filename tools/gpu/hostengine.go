package gpu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cure-oss/cure/tools/tail"
)

// DCGM is a site's DCGM (the image's driver bundle carries it, see
// docs/VALIDATION.md): dcgmi cannot run a diagnostic without a host
// engine, and a CURE node has none running, so RunDiag starts a private
// one for the diagnostic and stops it after.
//
// DCGM's command lines (hostengine/src/HostEngineCommandLine.cpp,
// dcgmi/CommandLineParser.cpp):
//
//	nv-hostengine -n --domain-socket SOCK --pid FILE -f LOG --log-level ERROR
//	dcgmi diag --host unix://SOCK -r LEVEL -j
//	nv-hostengine --term --pid FILE
//
// -n keeps the engine in the foreground (a child this process can wait
// for); the Unix socket opens no TCP port; --pid keeps it clear of a host
// engine the node might run on the default pid file.
type DCGM struct {
	HostEngine string // nv-hostengine
	Dcgmi      string // dcgmi
	// NVVSDir is where nvvs is when it is not at DCGM's default
	// (/usr/libexec/datacenter-gpu-manager-4/nvvs): the host engine gets
	// NVVS_BIN_PATH=NVVSDir, which DCGM reads to find it.
	NVVSDir string
	// WorkDir holds the socket, pid file and logs (a new directory under
	// it, removed after); "" is os.TempDir().
	WorkDir string
	// StartTimeout bounds the wait for the socket; default one minute.
	StartTimeout time.Duration
	// StopTimeout bounds the wait for the engine to exit after --term;
	// then it is killed. Default 30 s.
	StopTimeout time.Duration
	Log         *slog.Logger
}

// maxSocketPath keeps the socket path inside sockaddr_un's sun_path (108
// bytes with its NUL).
const maxSocketPath = 100

// RunDiag runs DCGM's diagnostic at level (1-4) against a host engine of
// its own and returns the verdicts for targets. The host engine is stopped
// before it returns, whatever happened. A host engine that does not come
// up is one ERROR verdict on "gpu" carrying what it printed and logged.
func (d DCGM) RunDiag(ctx context.Context, level int, timeout time.Duration, targets []DCGMTarget) ([]Verdict, error) {
	if level < 1 || level > 4 {
		return nil, fmt.Errorf("dcgmi diag level %d: must be 1-4", level)
	}
	return d.withHostEngine(ctx, func(host ...string) ([]Verdict, error) {
		return RunDCGMDiag(ctx, OSExec, d.Dcgmi, level, timeout, targets, host...)
	})
}

// RunLoad runs DCGM test (targeted_stress or targeted_power) as the GPU
// load for dur against a host engine of its own, as RunDiag does.
func (d DCGM) RunLoad(ctx context.Context, test string, dur time.Duration, targets []DCGMTarget) ([]Verdict, error) {
	if !slices.Contains(DCGMLoadTests, test) {
		return nil, fmt.Errorf("dcgm load %q: want one of %s", test, strings.Join(DCGMLoadTests, ", "))
	}
	return d.withHostEngine(ctx, func(host ...string) ([]Verdict, error) {
		return RunDCGMLoad(ctx, OSExec, d.Dcgmi, test, dur, targets, host...)
	})
}

// withHostEngine runs f with the dcgmi arguments that reach a host engine
// of its own, started before and stopped after.
func (d DCGM) withHostEngine(ctx context.Context, f func(host ...string) ([]Verdict, error)) ([]Verdict, error) {
	if d.HostEngine == "" || d.Dcgmi == "" {
		return nil, errors.New("dcgm: nv-hostengine and dcgmi paths are both needed")
	}
	log := d.Log
	if log == nil {
		log = slog.Default()
	}
	dir, err := os.MkdirTemp(d.WorkDir, "cure-dcgm-")
	if err != nil {
		return nil, fmt.Errorf("dcgm: work directory: %w", err)
	}
	defer os.RemoveAll(dir)
	he, err := d.start(ctx, dir)
	if err != nil {
		return []Verdict{{Component: "gpu", Check: CheckDCGMDiag, Status: Error, Expected: "nv-hostengine running",
			Message: err.Error()}}, nil
	}
	vs, runErr := f("--host", "unix://"+he.sock)
	if stopErr := he.stop(d); stopErr != nil {
		log.Warn("dcgm: stopping the host engine", "err", stopErr)
		vs = append(vs, Verdict{Component: "gpu", Check: CheckDCGMDiag, Status: Error, Expected: "nv-hostengine stopped",
			Message: stopErr.Error()})
	}
	return vs, runErr
}

// hostEngine is a running nv-hostengine -n.
type hostEngine struct {
	cmd    *exec.Cmd
	sock   string
	pid    string
	log    string
	out    *tail.Buffer
	exited chan struct{}
	err    error // Wait's result, once exited is closed
}

func (d DCGM) start(ctx context.Context, dir string) (*hostEngine, error) {
	he := &hostEngine{
		sock: filepath.Join(dir, "nv-hostengine.sock"),
		pid:  filepath.Join(dir, "nv-hostengine.pid"),
		log:  filepath.Join(dir, "nv-hostengine.log"),
		out:  &tail.Buffer{Max: 2048}, exited: make(chan struct{}),
	}
	if len(he.sock) > maxSocketPath {
		return nil, fmt.Errorf("dcgm: socket path %s is longer than a Unix socket allows (%d bytes): use a shorter work directory", he.sock, maxSocketPath)
	}
	// Not CommandContext: the engine is stopped the way DCGM stops it
	// (stop), never killed first.
	he.cmd = exec.Command(d.HostEngine, "-n", "--domain-socket", he.sock, "--pid", he.pid,
		"-f", he.log, "--log-level", "ERROR")
	he.cmd.Env = os.Environ()
	if d.NVVSDir != "" {
		he.cmd.Env = append(he.cmd.Env, "NVVS_BIN_PATH="+d.NVVSDir)
	}
	he.cmd.Stdout, he.cmd.Stderr = he.out, he.out
	if err := he.cmd.Start(); err != nil {
		return nil, fmt.Errorf("dcgm: starting %s: %w", d.HostEngine, err)
	}
	go func() { he.err = he.cmd.Wait(); close(he.exited) }()
	limit := d.StartTimeout
	if limit <= 0 {
		limit = time.Minute
	}
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if st, err := os.Stat(he.sock); err == nil && st.Mode()&fs.ModeSocket != 0 {
			return he, nil
		}
		select {
		case <-he.exited:
			return nil, fmt.Errorf("dcgm: %s exited before it listened (%v): %s", d.HostEngine, he.err, he.said())
		case <-ctx.Done():
			_ = he.stop(d)
			return nil, fmt.Errorf("dcgm: waiting for %s: %w", d.HostEngine, ctx.Err())
		case <-deadline.C:
			_ = he.stop(d)
			return nil, fmt.Errorf("dcgm: %s did not open %s within %s: %s", d.HostEngine, he.sock, limit, he.said())
		case <-tick.C:
		}
	}
}

// said is what the engine printed and the tail of its log file.
func (he *hostEngine) said() string {
	parts := []string{}
	if s := strings.TrimSpace(he.out.String()); s != "" {
		parts = append(parts, "output: "+s)
	}
	if b, err := os.ReadFile(he.log); err == nil && len(bytes.TrimSpace(b)) > 0 {
		parts = append(parts, "log: "+clip(b, 1024))
	}
	if len(parts) == 0 {
		return "it printed nothing"
	}
	return strings.ToValidUTF8(strings.Join(parts, "; "), "\uFFFD")
}

// stop ends the engine as DCGM does (nv-hostengine --term: SIGTERM to the
// pid in the pid file), waits for it, and kills it if it stays.
func (he *hostEngine) stop(d DCGM) error {
	select {
	case <-he.exited:
		return nil
	default:
	}
	limit := d.StopTimeout
	if limit <= 0 {
		limit = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	termOut, termErr := exec.CommandContext(ctx, d.HostEngine, "--term", "--pid", he.pid).CombinedOutput()
	if termErr != nil {
		// The pid file may be missing (the engine failed half-way):
		// signal the child directly.
		_ = he.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-he.exited:
		return nil
	case <-ctx.Done():
	}
	_ = he.cmd.Process.Kill()
	<-he.exited
	msg := fmt.Sprintf("dcgm: %s did not exit within %s of --term and was killed", d.HostEngine, limit)
	if termErr != nil {
		msg += fmt.Sprintf(" (--term: %v: %s)", termErr, clip(termOut, 256))
	}
	return errors.New(msg)
}
