package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/runner/boot"
	"github.com/cure-oss/cure/runner/transport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// coordinator sends one audit assignment after Hello, acks every event and
// asks for a reboot once the last phase ended.
type coordinator struct {
	curev1.UnimplementedRunnerServiceServer
	manifest []byte
	mu       sync.Mutex
	hello    *curev1.Hello
	events   []*curev1.Event
}

func (c *coordinator) Session(s grpc.BidiStreamingServer[curev1.RunnerMessage, curev1.CoordinatorMessage]) error {
	m, err := s.Recv()
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.hello = m.GetHello()
	c.mu.Unlock()
	s.Send(&curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_Assignment{Assignment: &curev1.Assignment{
		RunId: "run-1", NodeId: "node-1", Mode: curev1.Mode_MODE_AUDIT, ManifestYaml: c.manifest, ManifestName: "qemu-nvme.yaml",
		Phases: []string{"nvme", "nic"}}}})
	for {
		m, err := s.Recv()
		if err != nil {
			return err
		}
		ev := m.GetEvent()
		c.mu.Lock()
		c.events = append(c.events, ev)
		c.mu.Unlock()
		s.Send(&curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_Ack{Ack: &curev1.Ack{Seq: ev.Seq}}})
		if ev.Phase == "nic" && ev.GetPhaseEnd() != nil {
			s.Send(&curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_Reboot{Reboot: &curev1.Reboot{Reason: "done"}}})
		}
	}
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func tlsPair(t *testing.T) ([]byte, tls.Certificate) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "coordinator"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestDryRunWiring runs the real wiring (TLS dial, session, agent, phase
// executor, inventory on a fixture root) against an in-process coordinator.
func TestDryRunWiring(t *testing.T) {
	root := t.TempDir()
	c := "sys/class/nvme/nvme0/"
	writeFile(t, filepath.Join(root, c+"model"), "QEMU NVMe Ctrl\n")
	writeFile(t, filepath.Join(root, c+"serial"), "deadbeef\n")
	writeFile(t, filepath.Join(root, c+"firmware_rev"), "7.2.22\n")
	writeFile(t, filepath.Join(root, c+"address"), "0000:00:04.0\n")
	writeFile(t, filepath.Join(root, c+"device/vendor"), "0x1b36\n")
	writeFile(t, filepath.Join(root, "sys/class/dmi/id/product_serial"), "SN1\n")
	writeFile(t, filepath.Join(root, "proc/uptime"), "12.5 20.0\n")
	writeFile(t, filepath.Join(root, "proc/sys/kernel/random/boot_id"), "boot-1\n")
	manifest, err := os.ReadFile("../../../manifests/examples/qemu-nvme.yaml")
	if err != nil {
		t.Fatal(err)
	}

	caPEM, cert := tlsPair(t)
	caFile := filepath.Join(root, "ca.pem")
	writeFile(t, caFile, string(caPEM))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewServerTLSFromCert(&cert)))
	co := &coordinator{manifest: manifest}
	curev1.RegisterRunnerServiceServer(srv, co)
	go srv.Serve(lis)
	defer srv.Stop()

	var console bytes.Buffer
	var cmu sync.Mutex
	r := &runner{opt: options{dryRun: true, root: root, caFile: caFile}, console: lockedWriter{&cmu, &console},
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), procRoot: filepath.Join(root, "proc"),
		cmd:      boot.ParseCmdline("cure.coordinator=" + lis.Addr().String() + " cure.token=tok cure.node=node-1"),
		timeline: boot.NewTimeline()}
	r.timeline.Add(boot.Stage{Name: boot.StageInitStarted, Uptime: 2 * time.Second})
	inv, id := r.inventory(context.Background(), &boot.Lease{MAC: "52:54:00:00:00:01"})
	conn, err := transport.Dial(r.cmd.Coordinator, caFile)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	a, sess := r.newAgent(inv, id, conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go sess.Run(ctx)
	err = a.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), agent.ErrNoReboot.Error()) {
		t.Fatalf("agent.Run = %v, want the dry-run reboot refusal", err)
	}

	co.mu.Lock()
	defer co.mu.Unlock()
	h := co.hello
	if h.GetToken() != "tok" || h.GetBootId() != "boot-1" || h.GetUptimeMs() != 12500 || h.GetState().GetKind() != curev1.RunnerState_IDLE ||
		h.GetIdentity().GetSystemSerial() != "SN1" || len(h.GetInventory().GetNvme()) != 1 {
		t.Errorf("hello = %v", h)
	}
	// The first Hello carries the boot timeline: the kernel's stage added
	// above, then connected and hello_sent.
	got := map[string]int64{}
	for _, st := range h.GetBootStages() {
		got[st.GetName()] = st.GetUptimeMs()
	}
	if got[boot.StageInitStarted] != 2000 || got[boot.StageConnected] <= 0 || got[boot.StageHelloSent] < got[boot.StageConnected] {
		t.Errorf("hello boot stages = %v", h.GetBootStages())
	}
	cmu.Lock()
	consoleText := console.String()
	cmu.Unlock()
	if !strings.Contains(consoleText, "CURE-RUNNER: boot timeline ") {
		t.Errorf("console lacks the boot timeline line:\n%s", consoleText)
	}
	var kinds []string
	for i, ev := range co.events {
		if ev.Seq != uint64(i+1) {
			t.Errorf("event %d has seq %d", i, ev.Seq)
		}
		switch b := ev.Body.(type) {
		case *curev1.Event_PhaseStart:
			kinds = append(kinds, ev.Phase+":start")
		case *curev1.Event_PhaseEnd:
			kinds = append(kinds, ev.Phase+":"+b.PhaseEnd.Status.String())
		case *curev1.Event_Verdict:
			kinds = append(kinds, ev.Phase+":"+b.Verdict.Component+":"+b.Verdict.Status.String())
		}
	}
	want := "nvme:start nvme:nvme/0:MATCH nvme:PHASE_SKIPPED nic:start nic:PHASE_SKIPPED"
	if got := strings.Join(kinds, " "); got != want {
		t.Errorf("events\n got %s\nwant %s", got, want)
	}
	for _, line := range []string{"CURE-RUNNER: registered node=node-1 uptime=12.5s", "CURE-RUNNER: phase nvme done status=PHASE_SKIPPED", "CURE-RUNNER: phase nic done status=PHASE_SKIPPED"} {
		if !strings.Contains(consoleText, line) {
			t.Errorf("console lacks %q:\n%s", line, consoleText)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
