package phases

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/tools/checks/siteprog"
	"github.com/cure-oss/cure/tools/testenv"
)

// siteArtifacts is the coordinator's artifact server as a node sees it:
// /artifacts/sha256/<sha256>, whatever bytes it holds under that name.
type siteArtifacts struct {
	srv   *httptest.Server
	files map[string]string
}

func newSiteArtifacts(t *testing.T) *siteArtifacts {
	a := &siteArtifacts{files: map[string]string{}}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := a.files[strings.TrimPrefix(r.URL.Path, "/artifacts/sha256/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, b)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// add serves src and returns the suite's program pin for it.
func (a *siteArtifacts) add(src string) (sum string, size int) {
	h := sha256.Sum256([]byte(src))
	sum = hex.EncodeToString(h[:])
	a.files[sum] = src
	return sum, len(src)
}

const sitePrograms = `#!/bin/sh
echo '{"metadata":{"name":"bmc-health","description":"BMC event log and FRU records","timeout":"1m","parameters":["maxCritical"]}}'
echo '{"component":"bmc/sel","status":"PASS","observed":"0 critical","expected":"at most '"$CURE_PARAM_maxCritical"' critical"}'
echo '{"component":"bmc/fru","status":"FAIL","observed":"2 missing","expected":"0 missing","detail":"PSU 2 FRU unreadable","measurements":[{"metric":"fruMissing","value":2,"unit":"records"}]}'
`

// TestSiteCheck: the runner's validate phase runs a suite's site checks,
// each program fetched from the artifact server and checked against its
// pin. A program pinned by sha256 reports two verdicts (with a
// measurement, its params in its environment); a program whose served
// bytes do not match the pin, one past its time limit and one printing
// more than 1 MiB are each refused with one ERROR saying why; a line that
// names a run is refused and nothing of that program reaches the wire;
// the kernel command line, where the boot token is, reads empty.
func TestSiteCheck(t *testing.T) {
	testenv.RequireRoot(t, "site programs are sandboxed with namespaces and another uid")
	host, err := os.ReadFile("/proc/cmdline")
	if err != nil || len(host) == 0 {
		t.Fatalf("host /proc/cmdline: %d bytes, %v", len(host), err)
	}
	a := newSiteArtifacts(t)
	goodSum, goodSize := a.add(sitePrograms)
	// The store serves other bytes, of the same size, under a pinned name.
	tampered := strings.Replace(sitePrograms, `"status":"FAIL"`, `"status":"PASS"`, 1)
	badSum := strings.Repeat("e", 64)
	a.files[badSum] = tampered
	slowSum, slowSize := a.add("#!/bin/sh\necho '{\"component\":\"x/0\",\"status\":\"PASS\"}'\nsleep 60\n")
	chattySum, chattySize := a.add("#!/bin/sh\nhead -c 1100000 /dev/zero | tr '\\0' x\n")
	otherSum, otherSize := a.add("#!/bin/sh\necho '{\"component\":\"disk/nvme0n1\",\"status\":\"PASS\",\"detail\":\"wiped\"}'\n" +
		"echo '{\"component\":\"disk/nvme1n1\",\"status\":\"PASS\",\"detail\":\"wiped\",\"run_id\":\"runB\",\"node\":\"nodeB\"}'\n")
	tokenSum, tokenSize := a.add("#!/bin/sh\nn=$(cat /proc/cmdline | wc -c)\nk=$(dmesg 2>/dev/null | grep -c cure.token)\n" +
		"echo '{\"component\":\"cmdline\",\"status\":\"PASS\",\"observed\":\"'$n' bytes\"}'\n" +
		"echo '{\"component\":\"kernel-log\",\"status\":\"PASS\",\"observed\":\"'$k' lines\"}'\n")
	prog := func(sum string, size int, extra string) string {
		return fmt.Sprintf("{sha256: %s, size: %d, description: a site check%s}", sum, size, extra)
	}
	suite := fmt.Sprintf(`apiVersion: cure.dev/v1
kind: ValidationSuite
metadata: {name: site}
spec:
  checks:
    - {name: bmc-health, type: site, params: {maxCritical: 0}, program: %s}
    - {name: wrong-digest, type: site, program: %s}
    - {name: slow, type: site, program: %s}
    - {name: chatty, type: site, program: %s}
    - {name: other-run, type: site, program: %s}
    - {name: token, type: site, program: %s}
`, prog(goodSum, goodSize, ""), prog(badSum, goodSize, ""), prog(slowSum, slowSize, ", timeout: 500ms"),
		prog(chattySum, chattySize, ""), prog(otherSum, otherSize, ""), prog(tokenSum, tokenSize, ""))

	e := New(Config{Log: quiet(), Root: t.TempDir(), Site: siteprog.Runner{KillGrace: 200 * time.Millisecond}})
	em := &recEmitter{}
	out := e.Run(context.Background(), "validate", &curev1.Assignment{RunId: "runA", NodeId: "nodeA", Mode: curev1.Mode_MODE_DIAGNOSTIC,
		ManifestYaml: []byte(suite), ManifestName: "site.yaml", ArtifactBaseUrl: a.srv.URL + "/artifacts/"}, em)
	byCheck := map[string][]*curev1.Verdict{}
	for _, v := range em.verdicts {
		byCheck[v.GetCheck()] = append(byCheck[v.GetCheck()], v)
	}
	refused := func(check, want string) {
		t.Helper()
		vs := byCheck[check]
		if len(vs) != 1 || vs[0].GetComponent() != "site" || vs[0].GetStatus() != curev1.VerdictStatus_ERROR || !strings.Contains(vs[0].GetMessage(), want) {
			t.Errorf("%s: %v, want one ERROR containing %q", check, vs, want)
		}
	}

	t.Run("a pinned program reports two verdicts", func(t *testing.T) {
		vs := byCheck["bmc-health"]
		if len(vs) != 2 {
			t.Fatalf("verdicts %v", vs)
		}
		sel, fru := vs[1], vs[0] // sorted by component
		if sel.GetComponent() != "bmc/sel" || sel.GetStatus() != curev1.VerdictStatus_PASS || sel.GetExpected() != "at most 0 critical" {
			t.Errorf("sel %v", sel)
		}
		m := fru.GetMeasurements()
		if fru.GetComponent() != "bmc/fru" || fru.GetStatus() != curev1.VerdictStatus_FAIL || fru.GetMessage() != "PSU 2 FRU unreadable" ||
			len(m) != 1 || m[0].GetMetric() != "fruMissing" || m[0].GetValue() != 2 || m[0].GetUnit() != "records" {
			t.Errorf("fru %v", fru)
		}
		if out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, "bmc/fru bmc-health") {
			t.Errorf("outcome %v", out)
		}
	})
	t.Run("a wrong digest is refused", func(t *testing.T) {
		got := sha256.Sum256([]byte(tampered))
		refused("wrong-digest", fmt.Sprintf("sha256 mismatch: expected %s, got %s", badSum, hex.EncodeToString(got[:])))
	})
	t.Run("a program past its time limit is killed and refused", func(t *testing.T) {
		refused("slow", "still running at its time limit 500ms: killed with its process group, nothing it printed is reported")
	})
	t.Run("oversized output is refused", func(t *testing.T) {
		refused("chatty", "printed more than 1048576 bytes on stdout")
	})
	t.Run("a line naming another run is refused", func(t *testing.T) {
		refused("other-run", `line 2: unknown field "run_id"`)
		for _, v := range em.verdicts {
			if strings.HasPrefix(v.GetComponent(), "disk/") || strings.Contains(v.String(), "runB") || strings.Contains(v.String(), "nodeB") {
				t.Errorf("the refused program's words reached the wire: %v", v)
			}
		}
	})
	t.Run("the boot token cannot be read", func(t *testing.T) {
		got := map[string]string{}
		for _, v := range byCheck["token"] {
			got[v.GetComponent()] = v.GetObserved()
		}
		if got["cmdline"] != "0 bytes" || got["kernel-log"] != "0 lines" {
			t.Errorf("the program read %v; the kernel command line here has %d bytes", got, len(host))
		}
	})
	if left, _ := os.ReadDir(os.TempDir()); len(left) > 0 {
		for _, f := range left {
			if strings.HasPrefix(f.Name(), "site-program") {
				t.Errorf("the program was left in the node's tmp: %s", f.Name())
			}
		}
	}
}
