package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// site is a state dir made by `provisioner-lite init`, with a viewer's
// certificate beside the admin's, for coordinator processes to run on.
type site struct {
	t                   *testing.T
	root, state, pkiDir string
	ca                  string
	admin, viewer       pki.OperatorCert
	manifests, coordLog string
	caPEM               []byte
}

func newSite(t *testing.T) *site {
	t.Helper()
	root := t.TempDir()
	s := &site{t: t, root: root, state: filepath.Join(root, "state"), coordLog: filepath.Join(root, "coordinator.log")}
	r, err := initState(s.state, "ada", "127.0.0.1", "", "/proc", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s.pkiDir, s.ca, s.admin = filepath.Join(s.state, "pki"), r.caFile, r.op
	if s.viewer, err = pki.IssueOperatorCert(s.pkiDir, "vic", pki.RoleViewer); err != nil {
		t.Fatal(err)
	}
	if s.caPEM, err = os.ReadFile(s.ca); err != nil {
		t.Fatal(err)
	}
	if s.manifests, err = filepath.Abs("../../../manifests/examples"); err != nil {
		t.Fatal(err)
	}
	return s
}

// coordProcess is a provisioner-lite process (this test binary running
// main(), see TestMain) on the site's state dir: its real listeners,
// store, audit recorder and log (appended to site.coordLog).
type coordProcess struct {
	cmd  *exec.Cmd
	grpc string
	done chan struct{}
}

// args are the coordinator flags of a test site: loopback, no metrics
// listener (tests run in parallel), no image (warned about).
func (s *site) args(extra ...string) []string {
	return append([]string{"--state-dir", s.state, "--manifests", s.manifests, "--image-dir", filepath.Join(s.root, "no-image"),
		"--http-listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0", "--advertise", "127.0.0.1", "--metrics-listen", "",
		"--stats-every", "0", "--instance-id", "test"}, extra...)
}

var readyGRPC = regexp.MustCompile(`msg="provisioner-lite ready".* grpc=(\S+)`)

// start runs the coordinator and waits until it serves; stop ends it.
func (s *site) start(extra ...string) *coordProcess {
	s.t.Helper()
	logf, err := os.OpenFile(s.coordLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	defer logf.Close()
	before, _ := os.ReadFile(s.coordLog)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Dir = s.root
	cmd.Env = append(os.Environ(), "CURE_TEST_MAIN_ARGS="+strings.Join(s.args(extra...), "\x1f"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	c := &coordProcess{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(c.done) }()
	s.t.Cleanup(func() { c.stop(s.t) })
	deadline := time.After(60 * time.Second)
	for {
		b, _ := os.ReadFile(s.coordLog)
		if m := readyGRPC.FindSubmatch(b[len(before):]); m != nil {
			c.grpc = string(m[1])
			return c
		}
		select {
		case <-c.done:
			s.t.Fatalf("the coordinator exited before it was ready:\n%s", b[len(before):])
		case <-deadline:
			s.t.Fatalf("the coordinator was not ready after 60 s:\n%s", b[len(before):])
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop ends the coordinator as an operator does (SIGTERM) and waits.
func (c *coordProcess) stop(t *testing.T) {
	select {
	case <-c.done:
		return
	default:
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
		t.Error("the coordinator did not stop within 30 s of SIGTERM")
	}
}

// client is a gRPC operator client of the coordinator, with the given
// operator certificate or none.
func (s *site) client(c *coordProcess, oc *pki.OperatorCert) curev1.OperatorServiceClient {
	s.t.Helper()
	return curev1.NewOperatorServiceClient(s.conn(c, oc))
}

func (s *site) conn(c *coordProcess, oc *pki.OperatorCert) *grpc.ClientConn {
	s.t.Helper()
	var cert *tls.Certificate
	if oc != nil {
		kp, err := pki.LoadOperatorCert(oc.CertFile, oc.KeyFile)
		if err != nil {
			s.t.Fatal(err)
		}
		cert = &kp
	}
	cfg, err := pki.ClientTLSConfig(s.caPEM, "127.0.0.1", cert)
	if err != nil {
		s.t.Fatal(err)
	}
	conn, err := grpc.NewClient(c.grpc, grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(4<<20)))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { conn.Close() })
	return conn
}

// openStore opens the site's database beside the running coordinator
// (SQLite in WAL mode takes a second reader and writer): what is stored,
// not what an answer shows.
func (s *site) openStore() *store.Store {
	s.t.Helper()
	st, err := store.Open(filepath.Join(s.state, "cure.db"))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { st.Close() })
	return st
}

var (
	curectlOnce sync.Once
	curectlBin  string
	curectlErr  error
)

// curectl runs the real curectl command (built once per test binary)
// against the coordinator as the given operator; it returns the exit
// code, stdout and stderr.
func (s *site) curectl(c *coordProcess, oc pki.OperatorCert, stdin string, args ...string) (int, string, string) {
	s.t.Helper()
	bin := builtCurectl(s.t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--server", c.grpc, "--ca", s.ca, "--cert", oc.CertFile, "--key", oc.KeyFile}, args...)...)
	cmd.Dir = s.root
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		s.t.Fatalf("curectl %q: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// builtCurectl is the real curectl binary, built once per test binary.
func builtCurectl(t testing.TB) string {
	t.Helper()
	curectlOnce.Do(func() {
		dir, err := os.MkdirTemp("", "curectl-bin-")
		if err != nil {
			curectlErr = err
			return
		}
		curectlBin = filepath.Join(dir, "curectl")
		cmd := exec.Command("go", "build", "-o", curectlBin, "github.com/cure-oss/cure/provisioner-lite/cmd/curectl")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			curectlErr = &buildError{err: err, out: string(out)}
		}
	})
	if curectlErr != nil {
		t.Fatalf("go build curectl: %v", curectlErr)
	}
	return curectlBin
}

// removeCurectl removes the binary curectl built, if any (TestMain).
func removeCurectl() {
	if curectlBin != "" {
		os.RemoveAll(filepath.Dir(curectlBin))
	}
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// coordinatorLog is everything the site's coordinator processes logged.
func (s *site) coordinatorLog() string {
	b, _ := os.ReadFile(s.coordLog)
	return string(b)
}
