package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// noOutput are the commands that print no data (a script, man pages, help):
// they take no -o.
var noOutput = []string{"completion", "man", "help"}

// Every command's help has an "Exit codes" section, and every command that
// prints data takes -o json|yaml (the cobra tree walked, so a new command
// is held to both).
func TestEveryCommandConventions(t *testing.T) {
	t.Chdir(t.TempDir())
	a := &app{out: io.Discard}
	root := a.rootCmd()
	var walk func(c *cobra.Command, path []string)
	seen := 0
	walk = func(c *cobra.Command, path []string) {
		if c.Hidden {
			return
		}
		seen++
		rc, out, errOut := runCaptured(t, append(slices.Clone(path), "--help")...)
		if rc != 0 || !strings.Contains(out, "Exit codes:\n  0  ") {
			t.Errorf("curectl %s --help: rc %d, no \"Exit codes:\" section:\n%s%s", strings.Join(path, " "), rc, out, errOut)
		}
		if c.Runnable() && len(path) > 0 && !slices.Contains(noOutput, path[0]) {
			f := c.Flags().Lookup("output")
			if f == nil || f.Shorthand != "o" || !strings.Contains(f.Usage, "json|yaml") {
				t.Errorf("curectl %s: no -o json|yaml", strings.Join(path, " "))
			}
		}
		for _, s := range c.Commands() {
			walk(s, append(slices.Clone(path), s.Name()))
		}
	}
	walk(root, nil)
	if seen < 25 {
		t.Fatalf("walked %d commands: the tree is not the one built", seen)
	}
}

// path reads a dotted path (entries.0.nodeId) out of decoded JSON.
func path(v any, p string) any {
	for _, k := range strings.Split(p, ".") {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// Each command's -o json against the coordinator: the documented message,
// decoded, with the field a script would read; the exit code unchanged.
// watch streams one object per line.
func TestOutputJSONEveryCommand(t *testing.T) {
	c := startCoordinator(t)
	dir := t.TempDir()
	t.Setenv("SITE_BMC_PW", "pw")
	csv := filepath.Join(dir, "nodes.csv")
	if err := os.WriteFile(csv, []byte("id,bmc_url,bmc_username,bmc_password,macs,sku,hostname,serial,bmc_insecure\n"+
		"n2,https://192.0.2.12,admin,pw2,52:54:00:aa:00:02,qemu-nvme,,,true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	html := filepath.Join(dir, "n1.html")
	for _, tc := range []struct {
		args  []string
		rc    int
		want  map[string]any // path: value (nil: present)
		lines bool           // JSON Lines (watch)
		setup func()
	}{
		{args: []string{"nodes", "add", "--id", "n1", "--bmc-url", "https://192.0.2.11", "--bmc-user", "admin", "--bmc-password-env", "SITE_BMC_PW",
			"--bmc-insecure", "--mac", "52-54-00-AA-00-01", "--sku", "qemu-nvme"}, want: map[string]any{"added.0": "n1"}},
		{args: []string{"nodes", "import", csv}, want: map[string]any{"added.0": "n2"}},
		{args: []string{"nodes", "label", "n1", "rack=r1"}, want: map[string]any{"nodeId": "n1", "labels.rack": "r1"}},
		{args: []string{"nodes", "show", "n1"}, want: map[string]any{"nodeId": "n1", "sku": "qemu-nvme"}},
		{args: []string{"nodes", "list"}, want: map[string]any{"nodes.0.nodeId": "n1", "nodes.1.nodeId": "n2"}},
		{args: []string{"provision", "n1"}, want: map[string]any{"runs.0.nodeId": "n1", "refused": []any{}, "instance": "test"}},
		{args: []string{"provision", "n1"}, rc: 1, want: map[string]any{"runs": []any{}, "refused.0.nodeId": "n1", "refused.0.reason": "busy"}},
		{args: []string{"report", "n1"}, rc: 3, want: map[string]any{"nodeId": "n1", "runId": nil, "bootPath": ""}},
		{args: []string{"watch", "n1", "n2", "--once"}, lines: true, want: map[string]any{"nodeId": nil, "runStatus": nil}},
		{args: []string{"watch", "--fleet", "--once"}, lines: true, want: map[string]any{"nodes": "2"}},
		// The run may have ended already (its preflight finds no OS image): canceled or refused.
		{args: []string{"cancel", "n1", "--reason", "test"}, want: map[string]any{"canceled": nil, "refused": nil}},
		{args: []string{"watch", "n1"}, lines: true, want: map[string]any{"nodeId": "n1", "kind": nil}},
		{args: []string{"nodes", "drain", "n2", "n1"}, rc: 4, want: map[string]any{"nodes.0.nodeId": "n2", "nodes.0.state": "POOL_DRAINING", "refused.0.nodeId": "n1"},
			setup: func() {
				if _, err := c.st.SetNodePool(context.Background(), store.NodePool{NodeID: "n2", State: "in_service", Actor: "test"}); err != nil {
					t.Fatal(err)
				}
			}},
		{args: []string{"nodes", "admission", "n2"}, want: map[string]any{"nodeId": "n2", "decision": nil}},
		{args: []string{"audit-log", "--limit", "2"}, want: map[string]any{"entries.0.action": nil}},
		{args: []string{"buckets"}, want: map[string]any{"runs": nil}},
		{args: []string{"fleet-bands"}, want: map[string]any{"distributions": []any{}}},
		{args: []string{"manifests"}, want: map[string]any{"skus": []any{"qemu-nvme"}, "suites": []any{"qemu-diagnostic", "rma-quick"},
			"bundleVersion": "0", "invalid": []any{}, "instance": "test"}},
		{args: []string{"report", "n1", "--html", html}, rc: 3, want: map[string]any{"nodeId": "n1"}},
		{args: []string{"nodes", "remove", "n2"}, want: map[string]any{"nodeId": "n2"}},
	} {
		if tc.setup != nil {
			tc.setup()
		}
		rc, out, errOut := c.curectl(t, append(tc.args, "-o", "json")...)
		if rc != tc.rc {
			t.Errorf("%q -o json: rc %d, want %d\n%s%s", tc.args, rc, tc.rc, out, errOut)
			continue
		}
		docs := []string{out}
		if tc.lines {
			docs = strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		}
		for _, d := range docs {
			var v any
			if err := json.Unmarshal([]byte(d), &v); err != nil {
				t.Errorf("%q -o json: not JSON (%v):\n%s", tc.args, err, out)
				break
			}
			for p, want := range tc.want {
				got := path(v, p)
				if got == nil || (want != nil && !jsonEqual(got, want)) {
					t.Errorf("%q -o json: %s = %v, want %v\n%s", tc.args, p, got, want, d)
				}
			}
		}
	}
	// --html writes the file and says so in one line; the text report is not printed.
	rc, out, _ := c.curectl(t, "report", "n1", "--html", html)
	if rc != 3 || !regexp.MustCompile(`^wrote `+regexp.QuoteMeta(html)+` \(run n1-\S+ on n1: (FAILED|CANCELED), \d+ timeline entries\)\n$`).MatchString(out) {
		t.Errorf("report --html: rc %d, out %q", rc, out)
	}
	if b, err := os.ReadFile(html); err != nil || !bytes.Contains(b, []byte("<dt>Boot path</dt>")) {
		t.Errorf("HTML report: %v", err)
	}
	rc, out, _ = c.curectl(t, "provision", "n2", "--watch", "-o", "json")
	if rc != 2 || out != "" {
		t.Errorf("provision --watch -o json: rc %d, out %q (want a usage error)", rc, out)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// auditStub answers AuditDirect: one node differs, as a BMC would report it.
type auditStub struct {
	curev1.UnimplementedOperatorServiceServer
}

func (auditStub) AuditDirect(_ context.Context, req *curev1.AuditDirectRequest) (*curev1.AuditDirectResponse, error) {
	return &curev1.AuditDirectResponse{Nodes: []*curev1.NodeAudit{{NodeId: req.GetNodeIds()[0], DurationMs: 12,
		Verdicts: []*curev1.Verdict{{Component: "bios", Check: "firmware", Status: curev1.VerdictStatus_DRIFT, Observed: "1.0", Expected: "1.1"}}}}}, nil
}

// audit -o json: the AuditDirectResponse, with the table's exit code (1: a
// component differs).
func TestAuditOutputJSON(t *testing.T) {
	dir := t.TempDir()
	tlsCfg, err := pki.ServerTLSConfig(dir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))},
		server.OperatorAuth(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))...)...)
	curev1.RegisterOperatorServiceServer(gs, auditStub{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(l)
	defer gs.Stop()
	if _, err := pki.IssueOperatorCert(dir, "operator", pki.RoleOperator); err != nil {
		t.Fatal(err)
	}
	rc, out, errOut := runCaptured(t, "--server", l.Addr().String(), "--ca", filepath.Join(dir, pki.CACertFile), "audit", "n1", "-o", "yaml")
	if rc != 1 || !strings.Contains(out, "nodeId: n1") || !strings.Contains(out, "status: DRIFT") {
		t.Fatalf("audit -o yaml: rc %d\n%s%s", rc, out, errOut)
	}
}

// Shell completion asks the coordinator: node ids (not those already on the
// line), SKUs and suites (ListManifests; provision --manifest by --mode), modes; an unreachable coordinator offers nothing, at once and
// silently.
func TestCompletion(t *testing.T) {
	c := startCoordinator(t)
	t.Setenv("SITE_BMC_PW", "pw")
	for i, id := range []string{"gpu-001", "gpu-002", "cpu-001"} {
		if rc, out, errOut := c.curectl(t, "nodes", "add", "--id", id, "--bmc-url", "https://192.0.2.11", "--bmc-user", "admin",
			"--bmc-password-env", "SITE_BMC_PW", "--bmc-insecure", "--mac", "52-54-00-AA-00-0"+strconv.Itoa(i), "--sku", "qemu-nvme"); rc != 0 {
			t.Fatalf("nodes add %s: rc %d\n%s%s", id, rc, out, errOut)
		}
	}
	complete := func(args ...string) []string {
		t.Helper()
		rc, out, errOut := c.curectl(t, append([]string{"__complete"}, args...)...)
		if rc != 0 || quiet(errOut) != "" {
			t.Fatalf("__complete %q: rc %d, stderr %q", args, rc, errOut)
		}
		return strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"provision", "gpu"}, []string{"gpu-001", "gpu-002", ":4"}},
		{[]string{"provision", "gpu-001", ""}, []string{"cpu-001", "gpu-002", ":4"}},
		{[]string{"nodes", "show", "cpu-001", ""}, []string{":4"}},
		{[]string{"nodes", "label", "c"}, []string{"cpu-001", ":4"}},
		{[]string{"nodes", "add", "--sku", ""}, []string{"qemu-nvme", ":4"}},
		{[]string{"provision", "--manifest", "q"}, []string{"qemu-nvme", ":4"}},
		{[]string{"provision", "--mode", "diagnostic", "--manifest", ""}, []string{"qemu-diagnostic", "rma-quick", ":4"}},
		{[]string{"provision", "--mode=burnin", "gpu-001", "--manifest", "r"}, []string{"rma-quick", ":4"}},
		{[]string{"nodes", "revalidate", "--suite", ""}, []string{"qemu-diagnostic", "rma-quick", ":4"}},
		{[]string{"fleet-bands", "--sku", ""}, []string{"qemu-nvme", ":4"}},
		{[]string{"audit-log", "--node", "gpu-002"}, []string{"gpu-002", ":4"}},
		{[]string{"provision", "--mode", "b"}, []string{"burnin", ":4"}},
		{[]string{"report", "-o", ""}, []string{"table", "wide", "json", "yaml", ":4"}},
	} {
		if got := complete(tc.args...); !slices.Equal(got, tc.want) {
			t.Errorf("__complete %q = %q, want %q", tc.args, got, tc.want)
		}
	}
	start := time.Now()
	rc, out, errOut := runCaptured(t, "--server", "127.0.0.1:1", "--ca", c.ca, "__complete", "provision", "")
	if rc != 0 || out != ":4\n" || quiet(errOut) != "" || time.Since(start) > 2*completionTimeout {
		t.Errorf("completion with no coordinator: rc %d, out %q, stderr %q, after %s", rc, out, errOut, time.Since(start))
	}
	rc, out, errOut = runCaptured(t, "--ca", "/nonexistent/ca.pem", "__complete", "nodes", "show", "")
	if rc != 0 || out != ":4\n" || quiet(errOut) != "" {
		t.Errorf("completion without a CA: rc %d, out %q, stderr %q", rc, out, errOut)
	}
	rc, out, errOut = runCaptured(t, "--server", "127.0.0.1:1", "--ca", c.ca, "__complete", "nodes", "revalidate", "--suite", "")
	if rc != 0 || out != ":4\n" || quiet(errOut) != "" {
		t.Errorf("suite completion with no coordinator: rc %d, out %q, stderr %q", rc, out, errOut)
	}
}

// quiet is stderr without cobra's own note of the directive (which the
// shells' completion scripts discard with the rest of stderr).
func quiet(stderr string) string {
	return strings.TrimPrefix(stderr, "Completion ended with directive: ShellCompDirectiveNoFileComp\n")
}

// --log-format json: each stderr line a JSON record, the last the exit code.
func TestLogFormatJSON(t *testing.T) {
	t.Chdir(t.TempDir())
	rc, _, errOut := runCaptured(t, "--log-format", "json", "nodes", "list", "--ca", "/nonexistent/ca.pem")
	lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	if rc != 1 || len(lines) != 2 {
		t.Fatalf("rc %d, stderr %q", rc, errOut)
	}
	var first, last map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || first["level"] != "ERROR" || !strings.Contains(first["msg"].(string), "/nonexistent/ca.pem") {
		t.Errorf("first record %q: %v", lines[0], err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &last); err != nil || last["msg"] != "exit" || last["rc"] != 1.0 {
		t.Errorf("last record %q: %v", lines[1], err)
	}
	if rc, _, errOut := runCaptured(t, "--log-format", "xml", "nodes", "list"); rc != 2 || !strings.Contains(errOut, `--log-format "xml": want text or json`) {
		t.Errorf("--log-format xml: rc %d, stderr %q", rc, errOut)
	}
	// Text stays as it was.
	if rc, _, errOut := runCaptured(t, "nodes", "list", "--ca", "/nonexistent/ca.pem"); rc != 1 || !strings.HasPrefix(errOut, "curectl: CA certificate") {
		t.Errorf("text: rc %d, stderr %q", rc, errOut)
	}
}

// curectl manifests: the table names each SKU and suite and where they
// come from; a name whose file does not validate is listed apart, exit 3.
func TestManifestsCommand(t *testing.T) {
	c := startCoordinator(t)
	rc, out, errOut := c.curectl(t, "manifests")
	want := "KIND   NAME\nsku    qemu-nvme\nsuite  qemu-diagnostic\nsuite  rma-quick\n(instance test: its --manifests directory)\n"
	if rc != 0 || out != want {
		t.Fatalf("manifests: rc %d, out\n%s\nwant\n%s%s", rc, out, want, errOut)
	}
	if err := os.WriteFile(filepath.Join(c.manDir, "suites", "half.yaml"), []byte("kind: ValidationSuite\nspec: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, out, errOut = c.curectl(t, "manifests", "-o", "yaml")
	if rc != 3 || !strings.Contains(out, "invalid:\n  - half\n") {
		t.Fatalf("manifests with an invalid file: rc %d, want 3\n%s%s", rc, out, errOut)
	}
}
