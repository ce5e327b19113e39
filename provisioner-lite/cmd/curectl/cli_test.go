package main

import (
	"bytes"
	"context"
	"encoding/json"
	"gopkg.in/yaml.v3"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// runCaptured runs curectl and returns its exit code, stdout and stderr.
func runCaptured(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	stderr := captureStderr(t)
	var out bytes.Buffer
	rc := run(args, &out)
	return rc, out.String(), stderr()
}

// Help, --version and completion never read a CA; a real command without
// one fails naming the path it looked at.
func TestCLIHelpWithoutCA(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("HOME", t.TempDir())
	for _, k := range []string{"CURE_SERVER", "CURE_CA", "CURE_CERT", "CURE_KEY"} {
		t.Setenv(k, "")
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"Available Commands:", "provision", "watch", "audit-log", "--server", "--ca"}},
		{[]string{"report", "--help"}, []string{"curectl report [NODE] | --run RUN", "--html", "-o, --output"}},
		// A first-day operator learns the common calls and what a script can test.
		{[]string{"provision", "--help"}, []string{"Examples:", "curectl provision --watch gpu-001", "--resume gpu-001", "Exit codes:",
			"3  with --watch: a run ended failed", "4  without --watch: some nodes started, others were refused"}},
		{[]string{"nodes", "add", "--help"}, []string{"--bmc-password-stdin", "--mac", "-f, --f"}},
		// Flags after the command and its flags, too.
		{[]string{"nodes", "list", "--help", "--server", "x:1"}, []string{"curectl nodes list"}},
		{[]string{"--version"}, []string{"curectl "}},
		{[]string{"completion", "bash"}, []string{"bash completion", "__start_curectl"}},
	} {
		rc, out, errOut := runCaptured(t, tc.args...)
		if rc != 0 {
			t.Errorf("%q: rc %d, stderr %q", tc.args, rc, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%q: output lacks %q:\n%s", tc.args, w, out)
			}
		}
	}
	dir := t.TempDir()
	if rc, out, errOut := runCaptured(t, "man", "--dir", dir); rc != 0 || !strings.Contains(out, dir) {
		t.Errorf("man: rc %d %s %s", rc, out, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "curectl-nodes-add.1")); err != nil || !bytes.Contains(b, []byte(`\fB--bmc-password-stdin\fP`)) {
		t.Errorf("man page of nodes add: %v\n%s", err, b)
	}

	rc, _, errOut := runCaptured(t, "nodes", "list")
	if rc != 1 || !strings.Contains(errOut, "--ca "+filepath.Join("state", "pki", "ca.pem")) || !strings.Contains(errOut, "no such file") {
		t.Errorf("nodes list without a CA: rc %d, stderr %q", rc, errOut)
	}
	rc, _, errOut = runCaptured(t, "report", "n1", "--ca", "/nonexistent/ca.pem")
	if rc != 1 || !strings.Contains(errOut, "/nonexistent/ca.pem") {
		t.Errorf("report with --ca after the command: rc %d, stderr %q", rc, errOut)
	}
	if rc, _, errOut := runCaptured(t, "report"); rc != 2 || !strings.Contains(errOut, "give a NODE or --run RUN") {
		t.Errorf("report without a node: rc %d, stderr %q", rc, errOut)
	}
	if rc, _, errOut := runCaptured(t, "nodes", "list", "-o", "xml"); rc != 2 || !strings.Contains(errOut, `-o "xml"`) {
		t.Errorf("-o xml: rc %d, stderr %q", rc, errOut)
	}
}

// TLS verifies the host of --server as the operator gave it: a name the
// coordinator's certificate carries works, another fails naming it.
func TestServerNameAsGiven(t *testing.T) {
	dir := t.TempDir()
	// The certificate names localhost only (not 127.0.0.1).
	tlsCfg, err := pki.ServerTLSConfig(dir, []string{"localhost"})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))},
		server.OperatorAuth(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))...)...)
	curev1.RegisterOperatorServiceServer(gs, nodesStub{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(l)
	defer gs.Stop()
	if _, err := pki.IssueOperatorCert(dir, "operator", pki.RoleOperator); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	ca := filepath.Join(dir, pki.CACertFile)

	rc, out, errOut := runCaptured(t, "nodes", "-o", "json", "--ca", ca, "--server", net.JoinHostPort("localhost", port))
	if rc != 0 || !strings.Contains(out, `"nodeId": "node7"`) {
		t.Fatalf("--server localhost: rc %d\n%s%s", rc, out, errOut)
	}
	rc, _, errOut = runCaptured(t, "nodes", "--ca", ca, "--server", l.Addr().String())
	if rc != 1 || !strings.Contains(errOut, "127.0.0.1") || !strings.Contains(errOut, "certificate carries") {
		t.Fatalf("--server 127.0.0.1 (not in the certificate): rc %d, stderr %q", rc, errOut)
	}
	if rc, _, errOut := runCaptured(t, "nodes", "--ca", ca, "--server", "localhost"); rc != 2 || !strings.Contains(errOut, "want HOST:PORT") {
		t.Fatalf("--server without a port: rc %d, stderr %q", rc, errOut)
	}
}

// A wipe asks first: refused without --yes when stdin is no terminal, with
// nothing started; started after "yes" on a terminal, or with --yes.
func TestWipeNeedsConfirmation(t *testing.T) {
	c := startCoordinator(t)
	ctx := context.Background()
	t.Setenv("SITE_BMC_PW", "pw")
	for _, id := range []string{"n1", "n2"} {
		if rc, out, errOut := c.curectl(t, "nodes", "add", "--id", id, "--bmc-url", "https://192.0.2.11", "--bmc-user", "admin",
			"--bmc-password-env", "SITE_BMC_PW", "--bmc-insecure", "--mac", "52-54-00-AA-00-0"+id[1:], "--sku", "qemu-nvme", "--label", "pool=wipe"+id[1:]); rc != 0 {
			t.Fatalf("nodes add %s: rc %d\n%s%s", id, rc, out, errOut)
		}
	}
	started := func() map[string]bool {
		runs, err := c.st.LatestRunSummaries(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for id := range runs {
			m[id] = true
		}
		return m
	}
	oldIn, oldTTY := stdin, stdinIsTerminal
	t.Cleanup(func() { stdin, stdinIsTerminal = oldIn, oldTTY })

	// Not a terminal, no --yes: refused, the nodes and disks named, nothing started.
	stdin = strings.NewReader("yes\n")
	rc, out, errOut := c.curectl(t, "provision", "--mode", "wipe", "n1")
	if rc != 2 || !strings.Contains(errOut, "stdin is not a terminal") || !strings.Contains(errOut, "give --yes") ||
		!strings.Contains(errOut, "node n1  sku qemu-nvme") || !strings.Contains(errOut, "disks: not inventoried yet") {
		t.Fatalf("wipe without --yes: rc %d\n%s%s", rc, out, errOut)
	}
	if s := started(); len(s) != 0 {
		t.Fatalf("refused wipe started runs on %v", s)
	}
	// A terminal, a wrong answer: refused.
	stdinIsTerminal = func(io.Reader) bool { return true }
	r, w, _ := os.Pipe()
	stdin = r
	w.WriteString("y\n")
	if rc, _, errOut := c.curectl(t, "provision", "--mode", "wipe", "--selector", "pool=wipe1"); rc != 2 || !strings.Contains(errOut, `answer "y" is neither yes nor 1`) {
		t.Fatalf("wipe answered y: rc %d %s", rc, errOut)
	}
	if s := started(); len(s) != 0 {
		t.Fatalf("wipe answered y started runs on %v", s)
	}
	// "yes" typed: the selector's one node, and only it, is wiped.
	w.WriteString("yes\n")
	rc, out, errOut = c.curectl(t, "provision", "--mode", "wipe", "--selector", "pool=wipe1")
	if rc != 0 || !strings.Contains(out, "started on n1") || !strings.Contains(errOut, "type 1 (the number of nodes) or yes") {
		t.Fatalf("wipe answered yes: rc %d\n%s%s", rc, out, errOut)
	}
	if s := started(); !s["n1"] || s["n2"] {
		t.Fatalf("after yes: runs on %v, want n1 only", s)
	}
	w.Close()
	// --yes on a non-terminal: started without a question.
	stdinIsTerminal = oldTTY
	stdin = strings.NewReader("")
	rc, out, errOut = c.curectl(t, "provision", "n2", "--mode", "wipe", "--yes")
	if rc != 0 || !strings.Contains(out, "started on n2") || strings.Contains(errOut, "type 1") {
		t.Fatalf("wipe --yes: rc %d\n%s%s", rc, out, errOut)
	}
	if s := started(); !s["n2"] {
		t.Fatalf("after --yes: runs on %v", s)
	}
	runs, _ := c.st.LatestRunSummaries(ctx)
	if runs["n2"].Mode != "wipe" {
		t.Fatalf("n2's run mode %q", runs["n2"].Mode)
	}
	// Both runs in one live summary (no terminal: plain lines, one round).
	rc, out, errOut = c.curectl(t, "watch", "n1", "n2", "--once")
	if rc != 0 || !strings.Contains(out, "\nn2  ") || !strings.HasPrefix(out, "n1  ") || !strings.Contains(out, "2 nodes: ") || strings.Contains(out, "\x1b[") {
		t.Fatalf("watch n1 n2 --once: rc %d\n%s%s", rc, out, errOut)
	}
	rc, out, errOut = c.curectl(t, "watch", "--selector", "sku=qemu-nvme", "--once")
	if rc != 0 || !strings.Contains(out, "2 nodes: ") {
		t.Fatalf("watch --selector --once: rc %d\n%s%s", rc, out, errOut)
	}
	if rc, _, _ := c.curectl(t, "cancel", "n1", "n2"); rc != 0 {
		t.Fatalf("cancel: rc %d", rc)
	}
}

// -o json and -o yaml carry the same fields (the API's protojson); --json
// stays an alias; -o is accepted before or after the command.
func TestOutputFormats(t *testing.T) {
	c := startCoordinator(t)
	t.Setenv("SITE_BMC_PW", "pw")
	if rc, out, errOut := c.curectl(t, "nodes", "add", "--id", "n1", "--bmc-url", "https://192.0.2.11", "--bmc-user", "admin",
		"--bmc-password-env", "SITE_BMC_PW", "--bmc-insecure", "--mac", "52-54-00-AA-00-01", "--sku", "qemu-nvme"); rc != 0 {
		t.Fatalf("nodes add: rc %d\n%s%s", rc, out, errOut)
	}
	decode := func(format, text string) any {
		t.Helper()
		var v any
		var err error
		if format == "json" {
			err = json.Unmarshal([]byte(text), &v)
		} else {
			err = yaml.Unmarshal([]byte(text), &v)
		}
		if err != nil {
			t.Fatalf("%s output does not parse: %v\n%s", format, err, text)
		}
		if format == "yaml" { // numbers as JSON has them (float64)
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			v = nil
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
		}
		return v
	}
	for _, args := range [][]string{{"nodes"}, {"nodes", "list"}, {"audit-log"}, {"watch", "--fleet", "--once"}, {"nodes", "show", "n1"}} {
		rc, js, errOut := c.curectl(t, append(args, "-o", "json")...)
		if rc != 0 {
			t.Fatalf("%q -o json: rc %d %s", args, rc, errOut)
		}
		rc, ym, errOut := c.curectl(t, append([]string{"-o", "yaml"}, args...)...)
		if rc != 0 {
			t.Fatalf("%q -o yaml: rc %d %s", args, rc, errOut)
		}
		j, y := decode("json", js), decode("yaml", ym)
		if args[0] != "audit-log" && args[0] != "watch" && !reflect.DeepEqual(j, y) {
			t.Errorf("%q: json and yaml differ:\n%v\n%v", args, j, y)
		}
		if args[0] == "nodes" && !strings.Contains(js, `"nodeId": "n1"`) {
			t.Errorf("%q -o json lacks n1:\n%s", args, js)
		}
	}
	// The audit log grows with every call: compare field names, not values.
	_, js, _ := c.curectl(t, "audit-log", "--json", "--limit", "1")
	_, ym, _ := c.curectl(t, "audit-log", "-o", "yaml", "--limit", "1")
	je := decode("json", js).(map[string]any)["entries"].([]any)[0].(map[string]any)
	ye := decode("yaml", ym).(map[string]any)["entries"].([]any)[0].(map[string]any)
	if len(je) == 0 || len(je) != len(ye) {
		t.Fatalf("audit entry fields: json %v, yaml %v", je, ye)
	}
	for k := range je {
		if _, ok := ye[k]; !ok {
			t.Errorf("yaml audit entry lacks %q", k)
		}
	}
	rc, wide, _ := c.curectl(t, "audit-log", "-o", "wide")
	if rc != 0 || !strings.Contains(wide, "TIME") || !strings.Contains(wide, "AddNodes") {
		t.Errorf("audit-log -o wide: rc %d\n%s", rc, wide)
	}
}
