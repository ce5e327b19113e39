package phases

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	builder "github.com/cure-oss/cure/builder/toolbundle"
	"github.com/cure-oss/cure/runner/agent"
	"google.golang.org/protobuf/proto"
)

// iperfServer starts a real iperf3 server on loopback.
func iperfServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("iperf3", "--server", "--forceflush", "--bind", "127.0.0.1", "--port", fmt.Sprint(port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	stuck := time.AfterFunc(20*time.Second, func() { cmd.Process.Kill() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "Server listening on") {
			stuck.Stop()
			go io.Copy(io.Discard, out)
			return fmt.Sprintf("127.0.0.1:%d", port)
		}
	}
	t.Fatal("iperf3 server exited before listening")
	return ""
}

// TestValidateFetchesToolBundle: a suite with a nic-throughput check makes
// the runner fetch the assignment's tool bundle over HTTP, verify it and
// run the check in the bundle's cure-measure, which runs the bundle's own
// iperf3 (its loader and libraries) against a real server; the verdict
// comes back with its measurement and unit, and the bundle is gone from
// tmpfs afterwards. A bundle whose digest does not match is never run.
func TestValidateFetchesToolBundle(t *testing.T) {
	for _, tool := range []string{"dpkg-query", "iperf3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s missing: the bundle is built from Debian's iperf3 (scripts/install-deps.sh)", tool)
		}
	}
	spec, err := builder.LoadSpec("../../initramfs/toolbundle.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range spec.Tools {
		if tl.Name == "iperf3" {
			spec.Tools = []builder.SpecTool{tl}
		}
	}
	bundleDir := t.TempDir()
	rep, err := builder.Build(spec, builder.Host{TmpDir: t.TempDir()}, bundleDir)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(bundleDir)))
	defer srv.Close()
	suite := fmt.Sprintf(`apiVersion: cure.dev/v1
kind: ValidationSuite
metadata: {name: net}
spec:
  checks:
    - name: nic-rate
      type: nic-throughput
      duration: 1s
      params: {server: %q}
      thresholds:
        throughputMbps: {min: 1}
`, iperfServer(t))
	run := func(ref *curev1.ToolBundleRef) (*recEmitter, agent.PhaseOutcome) {
		tmp := t.TempDir()
		e := New(Config{Log: quiet(), Root: t.TempDir(), TmpDir: tmp})
		em := &recEmitter{}
		out := e.Run(context.Background(), "validate", &curev1.Assignment{RunId: "r", Mode: curev1.Mode_MODE_DIAGNOSTIC,
			ManifestYaml: []byte(suite), ManifestName: "net.yaml", ToolBundle: ref}, em)
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Errorf("left in the runner's tmpfs: %v", left)
		}
		// Only the suite's check: the phase adds the host's own.
		var vs []*curev1.Verdict
		for _, v := range em.verdicts {
			if v.GetCheck() == "nic-rate" {
				vs = append(vs, v)
			}
		}
		em.verdicts = vs
		return em, out
	}
	ref := &curev1.ToolBundleRef{Url: srv.URL + "/" + builder.ArchiveName, Sha256: rep.SHA256, Size: rep.Size, Tools: []string{"iperf3"}}

	em, out := run(ref)
	if out.Status != curev1.PhaseStatus_PHASE_OK || len(em.verdicts) != 1 {
		t.Fatalf("outcome %v, verdicts %v", out, em.verdicts)
	}
	v := em.verdicts[0]
	if v.GetComponent() != "nic/lo" || v.GetStatus() != curev1.VerdictStatus_PASS || len(v.GetMeasurements()) != 1 {
		t.Fatalf("verdict %v", v)
	}
	if m := v.GetMeasurements()[0]; m.GetMetric() != "throughputMbps" || m.GetUnit() != "Mb/s" || m.GetValue() <= 1 {
		t.Errorf("measurement %v", m)
	}

	bad := proto.Clone(ref).(*curev1.ToolBundleRef)
	bad.Sha256 = strings.Repeat("ab", 32)
	em, out = run(bad)
	if out.Status != curev1.PhaseStatus_PHASE_FAILED || len(em.verdicts) != 1 || em.verdicts[0].GetStatus() != curev1.VerdictStatus_ERROR ||
		!strings.Contains(em.verdicts[0].GetMessage(), "sha256 mismatch") {
		t.Errorf("wrong digest: %v %v", out, em.verdicts)
	}
	em, _ = run(nil)
	if len(em.verdicts) != 1 || !strings.Contains(em.verdicts[0].GetMessage(), "the suite runs iperf3 from the tool bundle, and the coordinator sent none (start it with --tool-bundle)") {
		t.Errorf("no bundle: %v", em.verdicts)
	}
}
