package main

// The coordinator process under connection floods: this test binary runs
// main() in a child process (TestMain) under a low file descriptor limit,
// with a virtual BMC in front of a node the test plays.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/qemu-test/vbmc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) { b.mu.Lock(); defer b.mu.Unlock(); return b.b.Write(p) }
func (b *syncBuf) String() string              { b.mu.Lock(); defer b.mu.Unlock(); return b.b.String() }

// coordProc is a coordinator process and what the test knows of it.
type coordProc struct {
	t                        *testing.T
	cmd                      *exec.Cmd
	logs                     *syncBuf
	pkiDir                   string
	caPEM                    []byte
	http, grpc, web, metrics string // addresses the listeners bound
}

const (
	floodNode   = "n1"
	floodMAC    = "52:54:00:f1:00:01"
	floodSerial = "SER-FLOOD-1"
	nodeIP      = "127.0.0.10" // the node's address: all of 127/8 is local
)

// startCoordinator starts provisioner-lite with every listener on, one
// node (n1) behind a virtual BMC, the file descriptor limit nofile (0:
// inherited) and extra flags; it returns once the coordinator is ready.
func startCoordinator(t *testing.T, nofile int, extra ...string) *coordProc {
	t.Helper()
	root := t.TempDir()
	state := filepath.Join(root, "state")
	if _, err := initState(state, "admin", "127.0.0.1", "", "/proc", quiet()); err != nil {
		t.Fatal(err)
	}
	pkiDir := filepath.Join(state, "pki")
	caPEM, err := os.ReadFile(filepath.Join(pkiDir, pki.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(root, "image")
	writeImage(t, img, caPEM)
	bm, err := vbmc.New(vbmc.Config{Name: floodNode, Serial: floodSerial, MAC: floodMAC, Logger: quiet()}, vbmc.NewFakeMachine())
	if err != nil {
		t.Fatal(err)
	}
	bs, err := vbmc.Listen("127.0.0.1:0", bm, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Shutdown(context.Background()) })
	nodes := filepath.Join(root, "nodes.yaml")
	if err := os.WriteFile(nodes, []byte(fmt.Sprintf(`nodes:
  - id: %s
    sku: qemu-nvme
    serial: %s
    macs: [%s]
    bmc: {url: %q, username: admin, password: password, fingerprint: %q}
`, floodNode, floodSerial, floodMAC, bs.URL, bs.Fingerprint())), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--state-dir", state, "--manifests", "../../../manifests/examples", "--nodes", nodes, "--image-dir", img,
		"--advertise", "127.0.0.1", "--http-listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0", "--web-listen", "127.0.0.1:0",
		"--metrics-listen", "127.0.0.1:0", "--stats-every", "0", "--retry-base", "100ms"}, extra...)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CURE_TEST_MAIN_ARGS="+strings.Join(args, "\x1f"))
	if nofile > 0 {
		cmd.Env = append(cmd.Env, "CURE_TEST_NOFILE="+strconv.Itoa(nofile))
	}
	logs := &syncBuf{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if strings.Contains(logs.String(), "WARNING: DATA RACE") {
			t.Errorf("the coordinator hit a data race (go test -race):\n%s", logs.String())
		}
		if t.Failed() {
			t.Logf("coordinator log:\n%s", tail(logs.String(), 80))
		}
	})
	p := &coordProc{t: t, cmd: cmd, logs: logs, pkiDir: pkiDir, caPEM: caPEM}
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(logs.String(), "provisioner-lite ready") {
		select {
		case <-done:
			t.Fatalf("the coordinator exited:\n%s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the coordinator is not ready:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	out := logs.String()
	addr := func(re string) string {
		m := regexp.MustCompile(re).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no %s in the log:\n%s", re, out)
		}
		return m[1]
	}
	p.http, p.grpc = addr(`ready.* http=(\S+)`), addr(`ready.* grpc=(\S+)`)
	p.metrics, p.web = addr(`"metrics listening" addr=(\S+)`), addr(`"dashboard listening" addr=(\S+)`)
	return p
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[max(0, len(l)-lines):], "\n")
}

// operator is a gRPC client with the named operator's certificate.
func (p *coordProc) operator(name string) curev1.OperatorServiceClient {
	p.t.Helper()
	cert, err := pki.LoadOperatorCert(pki.OperatorCertFiles(p.pkiDir, name))
	if err != nil {
		p.t.Fatal(err)
	}
	cfg, err := pki.ClientTLSConfig(p.caPEM, "127.0.0.1", &cert)
	if err != nil {
		p.t.Fatal(err)
	}
	c, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { c.Close() })
	return curev1.NewOperatorServiceClient(c)
}

// webClient is an HTTPS client of the dashboard with an operator's certificate.
func (p *coordProc) webClient(name string) *http.Client {
	p.t.Helper()
	cert, err := pki.LoadOperatorCert(pki.OperatorCertFiles(p.pkiDir, name))
	if err != nil {
		p.t.Fatal(err)
	}
	cfg, err := pki.ClientTLSConfig(p.caPEM, "127.0.0.1", &cert)
	if err != nil {
		p.t.Fatal(err)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 30 * time.Second}
}

// waitForCURE starts an audit run of the node and waits until the
// coordinator powered it on and waits for its runner: the boot window is open.
func (p *coordProc) waitForCURE(op curev1.OperatorServiceClient) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := op.Provision(ctx, &curev1.ProvisionRequest{NodeIds: []string{floodNode}, Mode: curev1.Mode_MODE_AUDIT})
	if err != nil || len(resp.GetRuns()) != 1 {
		p.t.Fatalf("provision: %v %v", resp, err)
	}
	run := resp.GetRuns()[0].GetRunId()
	for {
		rep, err := op.Report(ctx, &curev1.ReportRequest{RunId: run})
		if err != nil {
			p.t.Fatalf("report: %v", err)
		}
		for _, ph := range rep.GetPhases() {
			if ph.GetName() == string(modes.WaitForCURE) && ph.GetStatus() == "running" {
				return run
			}
		}
		if rep.GetStatus() != "running" && rep.GetStatus() != "pending" {
			p.t.Fatalf("run %s ended before waiting for CURE: %s %s", run, rep.GetStatus(), rep.GetMessage())
		}
		select {
		case <-ctx.Done():
			p.t.Fatalf("run %s never reached %s: %+v", run, modes.WaitForCURE, rep.GetPhases())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

var (
	kernelLine = regexp.MustCompile(`(?m)^kernel (\S+) .*cure\.token=([0-9a-f]+)`)
	initrdLine = regexp.MustCompile(`(?m)^initrd (\S+)$`)
)

// bootNode is the node's boot path from iPXE on, from nodeIP: its script,
// kernel and initramfs over HTTP, then its runner's Hello over gRPC with
// the script's token, and one event acknowledged. Each step has a deadline
// far beyond a working coordinator's answer (a guard against a hang).
func (p *coordProc) bootNode() error {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(nodeIP)}, Timeout: 10 * time.Second}
	hc := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext, DisableKeepAlives: true}, Timeout: 20 * time.Second}
	get := func(url string) ([]byte, error) {
		resp, err := hc.Get(url)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return b, err
	}
	script, err := get("http://" + p.http + "/ipxe/" + floodMAC)
	if err != nil {
		return fmt.Errorf("iPXE script: %w", err)
	}
	km, im := kernelLine.FindSubmatch(script), initrdLine.FindSubmatch(script)
	if km == nil || im == nil {
		return fmt.Errorf("the iPXE script does not boot CURE:\n%s", script)
	}
	for url, want := range map[string]string{string(km[1]): "k", string(im[1]): "i"} {
		if b, err := get(url); err != nil || string(b) != want {
			return fmt.Errorf("fetch %s: %q %v", url, b, err)
		}
	}
	cfg, err := pki.ClientTLSConfig(p.caPEM, "127.0.0.1", nil)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return dialer.DialContext(ctx, "tcp", addr) }))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := curev1.NewRunnerServiceClient(conn).Session(ctx)
	if err != nil {
		return fmt.Errorf("runner session: %w", err)
	}
	err = s.Send(&curev1.RunnerMessage{Msg: &curev1.RunnerMessage_Hello{Hello: &curev1.Hello{Token: string(km[2]), BootId: "boot-under-flood",
		SessionSecret: strings.Repeat("s", 40), Identity: &curev1.Identity{BootMac: floodMAC, SystemSerial: floodSerial, NodeId: floodNode},
		RunnerVersion: "flood-test"}}})
	if err == nil {
		err = s.Send(&curev1.RunnerMessage{Msg: &curev1.RunnerMessage_Event{Event: &curev1.Event{Seq: 1, TimeUnixMs: time.Now().UnixMilli(),
			Body: &curev1.Event_Log{Log: &curev1.Log{Level: "INFO", Message: "booted under a flood"}}}}})
	}
	for err == nil {
		var m *curev1.CoordinatorMessage
		if m, err = s.Recv(); err == nil && m.GetAck().GetSeq() == 1 {
			return nil
		}
	}
	return fmt.Errorf("runner Hello: %w", err)
}

// flood is a persistent attacker of addr: it opens connections from 400
// sources without pause and holds each until the coordinator closes it,
// silent ones (TCP only, never a byte) and, with slowTLS, every other one
// sending the first bytes of a TLS ClientHello and stalling. dialed counts
// the connections made; all are closed once stop is closed.
func flood(addr string, slowTLS bool, stop <-chan struct{}) (dialed *atomic.Int64, done <-chan struct{}) {
	dialed = &atomic.Int64{}
	fin := make(chan struct{})
	var mu sync.Mutex
	held := map[net.Conn]bool{}
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond):
				}
				n := dialed.Add(1)
				src := fmt.Sprintf("127.0.%d.%d", 100+n%4, 2+(n/4)%100)
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					continue
				}
				if slowTLS && n%2 == 0 {
					c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}) // a handshake record of 512 bytes, one sent
				}
				mu.Lock()
				held[c] = true
				mu.Unlock()
				go func() {
					io.Copy(io.Discard, c) // until the coordinator closes it (or stop)
					mu.Lock()
					delete(held, c)
					mu.Unlock()
					c.Close()
				}()
			}
		}()
	}
	go func() {
		wg.Wait()
		mu.Lock()
		for c := range held {
			c.Close()
		}
		mu.Unlock()
		close(fin)
	}()
	return dialed, fin
}

// TestListenerFloodKeepsBootPath: the coordinator runs under a file
// descriptor limit of 256; the dashboard and metrics listeners are
// flooded with more connections than that (silent TCP and stalled TLS
// handshakes from 400 sources, each held until the coordinator closes it,
// new ones all along); meanwhile a node fetches its iPXE script, kernel
// and initramfs and its runner says Hello with its boot token: all of it
// succeeds, the process never runs out of descriptors, the refusals are
// logged as summaries, and the dashboard serves an operator again once
// the flood ends.
func TestListenerFloodKeepsBootPath(t *testing.T) {
	const nofile = 256
	p := startCoordinator(t, nofile)
	if !strings.Contains(p.logs.String(), "fd_limit=256") {
		t.Fatalf("the coordinator did not size its caps to the limit:\n%s", p.logs.String())
	}
	run := p.waitForCURE(p.operator("admin"))

	stop := make(chan struct{})
	webDialed, webDone := flood(p.web, true, stop)
	metricsDialed, metricsDone := flood(p.metrics, false, stop)
	// Past the limit before the node starts: the floods hold more
	// connections than the process could ever open.
	for webDialed.Load()+metricsDialed.Load() < 3*nofile {
		time.Sleep(10 * time.Millisecond)
	}
	err := p.bootNode()
	close(stop)
	<-webDone
	<-metricsDone
	t.Logf("flood: %d connections to the dashboard, %d to the metrics listener", webDialed.Load(), metricsDialed.Load())
	if err != nil {
		t.Fatalf("the node's boot path during the flood: %v", err)
	}
	if webDialed.Load() < nofile || metricsDialed.Load() < nofile {
		t.Fatalf("each flood should exceed the fd limit of %d", nofile)
	}

	// The flood over, the dashboard serves an operator again (its slots
	// come back as the flood's connections close).
	hc := p.webClient("admin")
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get("https://" + p.web + "/nodes/" + floodNode)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && bytes.Contains(b, []byte(run)) {
				break
			}
			err = fmt.Errorf("%s", resp.Status)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dashboard after the flood: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// A peer that sends nothing, and one that stalls inside its TLS
	// handshake, are each closed by the dashboard (the read returns).
	var probes sync.WaitGroup
	for i, hello := range [][]byte{nil, {0x16, 0x03, 0x01, 0x02, 0x00, 0x01}} {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.9.%d", 9+i))}}
		c, err := d.Dial("tcp", p.web)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(hello)
		probes.Add(1)
		go func() {
			defer probes.Done()
			defer c.Close()
			start := time.Now()
			c.SetReadDeadline(start.Add(60 * time.Second)) // a guard against a hang, not a timing claim
			_, err := io.Copy(io.Discard, c)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Errorf("the dashboard kept a peer that sent %d bytes open for a minute", len(hello))
				return
			}
			t.Logf("a peer that sent %d bytes was closed after %s", len(hello), time.Since(start).Round(100*time.Millisecond))
		}()
	}
	probes.Wait()

	logs := p.logs.String()
	for _, bad := range []string{"too many open files", "TLS handshake error"} {
		if strings.Contains(logs, bad) {
			t.Errorf("the coordinator log holds %q", bad)
		}
	}
	for _, l := range []string{"web", "metrics"} {
		n := strings.Count(logs, "listener="+l+" ")
		if n == 0 || n > 20 {
			t.Errorf("%d log lines about refused %s peers, want a few summaries for the %d refused", n, l, webDialed.Load())
		}
	}
	if !regexp.MustCompile(`listener=web reason=(conn-cap|source-cap)`).MatchString(logs) {
		t.Errorf("the dashboard's connection caps never acted:\n%s", tail(logs, 40))
	}
	t.Logf("refusal lines:\n%s", grepLines(logs, "refused"))
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// openEvents opens a live dashboard stream: true when it is open (drained
// until the test ends), else the refusal's status and message.
func openEvents(t *testing.T, hc *http.Client, web string) (bool, int, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+web+"/events?nodes="+floodNode, nil)
	resp, err := hc.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return false, resp.StatusCode, string(b)
	}
	t.Cleanup(cancel)
	go func() {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}()
	return true, resp.StatusCode, ""
}

// scrape reads the coordinator's /metrics: value by series as written.
func (p *coordProc) scrape() map[string]float64 {
	p.t.Helper()
	resp, err := http.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := map[string]float64{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok && strings.HasPrefix(k, "cure_dashboard_") {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				out[k] = f
			}
		}
	}
	return out
}

// TestDashboardStreamsCapped: the coordinator started with its live
// stream caps set low: an operator's streams past their cap, and anyone's
// past the total, are refused with 429 and a message saying why; the
// streams that are open share one fleet snapshot per tick (its metrics:
// snapshots taken against stream updates, one per stream per snapshot).
func TestDashboardStreamsCapped(t *testing.T) {
	p := startCoordinator(t, 0, "--web-max-streams", "5", "--web-max-streams-per-operator", "3")
	if _, err := pki.IssueOperatorCert(p.pkiDir, "bob", pki.RoleViewer); err != nil {
		t.Fatal(err)
	}
	admin, bob := p.webClient("admin"), p.webClient("bob")
	for i := 0; i < 3; i++ {
		if ok, code, msg := openEvents(t, admin, p.web); !ok {
			t.Fatalf("admin's stream %d: %d %s", i, code, msg)
		}
	}
	if ok, code, msg := openEvents(t, admin, p.web); ok || code != http.StatusTooManyRequests || !strings.Contains(msg, "admin already has 3 live dashboard streams open") {
		t.Fatalf("admin's 4th stream: %d %q, want 429 naming the per-operator cap", code, msg)
	}
	for i := 0; i < 2; i++ {
		if ok, code, msg := openEvents(t, bob, p.web); !ok {
			t.Fatalf("bob's stream %d: %d %s", i, code, msg)
		}
	}
	if ok, code, msg := openEvents(t, bob, p.web); ok || code != http.StatusTooManyRequests || !strings.Contains(msg, "5 live dashboard streams are open on this coordinator") {
		t.Fatalf("a 6th stream: %d %q, want 429 naming the total cap", code, msg)
	}
	// Five streams open: count snapshots and stream updates over a few ticks.
	before := p.scrape()
	if before["cure_dashboard_streams"] != 5 || before[`cure_dashboard_streams_refused_total{reason="operator-streams"}`] != 1 ||
		before[`cure_dashboard_streams_refused_total{reason="total-streams"}`] != 1 {
		t.Fatalf("dashboard metrics: %v", before)
	}
	var after map[string]float64
	deadline := time.Now().Add(60 * time.Second)
	for {
		after = p.scrape()
		if after["cure_dashboard_snapshots_total"]-before["cure_dashboard_snapshots_total"] >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no snapshots taken: %v", after)
		}
		time.Sleep(200 * time.Millisecond)
	}
	snaps := after["cure_dashboard_snapshots_total"] - before["cure_dashboard_snapshots_total"]
	updates := after["cure_dashboard_stream_updates_total"] - before["cure_dashboard_stream_updates_total"]
	t.Logf("5 streams: %.0f snapshots taken, %.0f stream updates", snaps, updates)
	// Each stream takes every snapshot in; a stream may be one behind at
	// either scrape.
	if updates < 5*(snaps-1) || updates > 5*(snaps+1) {
		t.Fatalf("%.0f snapshots for %.0f stream updates: want one snapshot per tick shared by the 5 streams", snaps, updates)
	}
}
