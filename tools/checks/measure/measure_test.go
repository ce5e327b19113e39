package measure

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/iperfcheck"
)

// sh is a helper stand-in: a real process reading the request on stdin
// and printing what the script prints.
func sh(t *testing.T, script string) *exec.Cmd {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip(err)
	}
	return exec.Command("sh", "-c", script)
}

func TestExec(t *testing.T) {
	dir := t.TempDir()
	req := Request{Type: manifests.CheckNICThroughput, NIC: &iperfcheck.Options{Server: "10.0.2.2:5201", Streams: 2}}
	ok := `{"Verdicts":[{"Component":"nic/eth0","Status":"PASS","Measurements":[{"Metric":"throughputMbps","Value":9400.5,"Unit":"Mb/s"}]}]}`
	vs, err := Exec(sh(t, "cat > "+filepath.Join(dir, "req.json")+"; echo '"+ok+"'"), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 1 || vs[0].Status != checks.Pass || vs[0].Measurements[0] != (checks.Measurement{Metric: "throughputMbps", Value: 9400.5, Unit: "Mb/s"}) {
		t.Errorf("verdicts %+v", vs)
	}
	var got Request
	b, _ := os.ReadFile(filepath.Join(dir, "req.json"))
	if err := json.Unmarshal(b, &got); err != nil || got.NIC == nil || got.NIC.Server != "10.0.2.2:5201" || got.NIC.Streams != 2 || got.Storage != nil {
		t.Errorf("the helper read %s (%v)", b, err)
	}

	if _, err := Exec(sh(t, `cat >/dev/null; echo '{"Error":"iperfcheck: server 10.0.2.2:5201: iperf3: unable to connect"}'`), req); err == nil || !strings.Contains(err.Error(), "unable to connect") {
		t.Errorf("check error: %v", err)
	}
	if _, err := Exec(sh(t, `cat >/dev/null; echo 'no such bundle file' >&2; exit 2`), req); err == nil || !strings.Contains(err.Error(), "exit status 2: no such bundle file") {
		t.Errorf("failed helper: %v", err)
	}
	if _, err := Exec(sh(t, `cat >/dev/null; echo '{"Verdicts":'`), req); err == nil || !strings.Contains(err.Error(), "cure-measure: answer") {
		t.Errorf("truncated answer: %v", err)
	}
}

func TestRunRefusesMismatch(t *testing.T) {
	for _, r := range []Request{
		{Type: manifests.CheckStorageRandom, NIC: &iperfcheck.Options{Server: "a"}},
		{Type: manifests.CheckMemory},
		{},
	} {
		if _, err := Run(context.Background(), r, checks.HostTools, t.TempDir()); err == nil {
			t.Errorf("%+v ran", r)
		}
	}
	if (Request{Type: manifests.CheckCPUThroughput}).Tool() != "stress-ng" {
		t.Error("cpu-throughput does not run stress-ng")
	}
}
