package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/bootserver"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/qemu-test/vbmc"
	"github.com/cure-oss/cure/tools/chunklist"
)

// The README's site path, as a new site meets it: `check` with the state dir
// names the SKU whose OS image is not in the artifact store (file, line,
// digest, the command that fixes it) instead of "no problems";
// `artifacts add --sku` imports the image and puts its digest in the SKU;
// check is then clean.
func TestCheckFlagsMissingImage(t *testing.T) {
	root := t.TempDir()
	state := filepath.Join(root, "state")
	if _, err := initState(state, "admin", "127.0.0.1", "", "/proc", slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	man := filepath.Join(root, "manifests")
	if err := os.MkdirAll(man, 0o755); err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../../../manifests/examples/qemu-nvme.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sku := filepath.Join(man, "qemu-nvme.yaml")
	if err := os.WriteFile(sku, example, 0o644); err != nil {
		t.Fatal(err)
	}
	placeholder, err := manifests.ParseSKU(sku, example)
	if err != nil {
		t.Fatal(err)
	}
	nodesFile := filepath.Join(root, "nodes.yaml")
	os.WriteFile(nodesFile, []byte("nodes:\n  - id: node1\n    bmc: {url: https://10.0.0.1, username: admin, passwordEnv: BMC_PW, insecure: true}\n    macs: [52:54:00:c0:de:01]\n    sku: qemu-nvme\n"), 0o600)
	t.Setenv("BMC_PW", "secret") // check resolves password references as the coordinator will
	args := []string{"--manifests", man, "--nodes", nodesFile, "--state-dir", state}

	var out bytes.Buffer
	if rc := checkCmd(args, &out); rc != 1 {
		t.Fatalf("check with the placeholder image: rc %d, want 1\n%s", rc, out.String())
	}
	line := bytes.Count(example[:bytes.Index(example, []byte("sha256: "+placeholder.Spec.OS.Image.SHA256))], []byte("\n")) + 1
	want := fmt.Sprintf("%s:%d: spec.os.image: sha256:%s (%d bytes) is not in the artifact store %s: every provision of SKU qemu-nvme fails its preflight; "+
		"import the image and set its digest with `provisioner-lite artifacts add --state-dir %s --sku %s IMAGE`",
		sku, line, placeholder.Spec.OS.Image.SHA256, placeholder.Spec.OS.Image.Size, filepath.Join(state, "artifacts"), state, sku)
	if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "check: 1 problem(s)") {
		t.Fatalf("check output:\n%s\nwant the line\n%s", out.String(), want)
	}

	// The fix the message names.
	img := filepath.Join(root, "disk.raw.zst")
	if err := os.WriteFile(img, bytes.Repeat([]byte("cure"), 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if rc := artifactsCmd([]string{"add", "--state-dir", state, "--sku", sku, img}, &out); rc != 0 {
		t.Fatalf("artifacts add: rc %d\n%s", rc, out.String())
	}
	if !regexp.MustCompile(`spec.os.image is now sha256:[0-9a-f]{64}, size 16384, format raw.zst`).MatchString(out.String()) {
		t.Errorf("artifacts add said:\n%s", out.String())
	}
	edited, err := os.ReadFile(sku)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(edited, []byte("# The SKU the QEMU end-to-end tests use.")) {
		t.Error("artifacts add dropped the SKU's comments")
	}
	// The image's chunk list is in the store, pinned by the SKU and bound
	// to the image.
	parsed, err := manifests.ParseSKU(sku, edited)
	if err != nil {
		t.Fatal(err)
	}
	im := parsed.Spec.OS.Image
	lb, err := os.ReadFile(bootserver.ArtifactPath(filepath.Join(state, "artifacts"), im.Chunks))
	if err != nil || im.Chunks == "" {
		t.Fatalf("chunk list %q: %v", im.Chunks, err)
	}
	if l, err := chunklist.Parse(lb, im.SHA256, im.Size); err != nil || l.Alg != chunklist.DefaultAlg || chunklist.SumHex(lb) != im.Chunks {
		t.Fatalf("chunk list: %v", err)
	}
	out.Reset()
	if rc := checkCmd(args, &out); rc != 0 || !strings.Contains(out.String(), "check: no problems") {
		t.Fatalf("check after artifacts add: rc %d\n%s", rc, out.String())
	}

	// A SKU with no OS image block is refused before anything is imported.
	bare := filepath.Join(root, "bare.yaml")
	os.WriteFile(bare, []byte("apiVersion: cure.dev/v1\nkind: SKU\nmetadata:\n  name: bare\nspec: {}\n"), 0o644)
	other := filepath.Join(root, "other.raw")
	os.WriteFile(other, []byte("other"), 0o644)
	out.Reset()
	if rc := artifactsCmd([]string{"add", "--state-dir", state, "--sku", bare, other}, &out); rc != 1 {
		t.Errorf("artifacts add --sku of a SKU without spec.os: rc %d", rc)
	}
	if entries, _ := os.ReadDir(filepath.Join(state, "artifacts", "sha256")); len(entries) != 2 {
		t.Errorf("the artifact store holds %d files, want only the first image and its chunk list", len(entries))
	}
}

// A wrong BMC password, as a site meets it on day one: the password comes
// from the coordinator's environment variable (passwordEnv) and the BMC
// refuses the login. `curectl provision --watch` says so in one line naming
// the user, the BMC and where the password came from, never the BMC's JSON
// answer, and at most twice (the phase and the run); the coordinator tries
// to log in once: a refused login is not retried (on a real BMC every try
// counts toward locking the account).
func TestBMCAuthErrorOneLine(t *testing.T) {
	s := newSite(t)
	bm, err := vbmc.New(vbmc.Config{Name: "node1", Serial: "S1", MAC: "52:54:00:c0:de:01", Logger: quiet()}, vbmc.NewFakeMachine())
	if err != nil {
		t.Fatal(err)
	}
	var logins atomic.Int64
	bmcSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.TrimSuffix(r.URL.Path, "/") == "/redfish/v1/SessionService/Sessions" {
			logins.Add(1)
		}
		bm.Handler().ServeHTTP(w, r)
	}))
	bmcSrv.StartTLS()
	t.Cleanup(bmcSrv.Close)
	sum := sha256.Sum256(bmcSrv.Certificate().Raw)

	man := filepath.Join(s.root, "manifests")
	if err := os.MkdirAll(man, 0o755); err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(filepath.Join(s.manifests, "qemu-nvme.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(man, "qemu-nvme.yaml"), example, 0o644)
	img := filepath.Join(s.root, "disk.raw")
	os.WriteFile(img, []byte("an installed OS"), 0o644)
	var out bytes.Buffer
	if rc := artifactsCmd([]string{"add", "--state-dir", s.state, "--sku", filepath.Join(man, "qemu-nvme.yaml"), img}, &out); rc != 0 {
		t.Fatalf("artifacts add: %d\n%s", rc, out.String())
	}
	nodesFile := filepath.Join(s.root, "nodes.yaml")
	os.WriteFile(nodesFile, fmt.Appendf(nil, "nodes:\n  - id: node1\n    bmc: {url: %q, username: admin, passwordEnv: CURE_TEST_BMC_PW, fingerprint: \"sha256:%x\"}\n    macs: [52:54:00:c0:de:01]\n    sku: qemu-nvme\n",
		bmcSrv.URL, sum[:]), 0o600)
	t.Setenv("CURE_TEST_BMC_PW", "not-the-password") // the coordinator's environment
	c := s.start("--manifests", man, "--nodes", nodesFile)

	rc, stdout, stderr := s.curectl(c, s.admin, "", "provision", "--watch", "node1")
	all := stdout + stderr
	if rc == 0 {
		t.Fatalf("provision with a wrong BMC password exited 0:\n%s", all)
	}
	want := fmt.Sprintf(`BMC %s refused the login of user "admin" (HTTP 401): the password was read from the coordinator's environment variable CURE_TEST_BMC_PW (passwordEnv of node node1)`, bmcSrv.URL)
	if !strings.Contains(all, want) {
		t.Errorf("curectl output lacks\n  %s\n%s", want, all)
	}
	shown := 0
	for _, line := range strings.Split(all, "\n") {
		if strings.Contains(line, "refused the login") {
			shown++
			if len(line) > len(want)+200 {
				t.Errorf("a %d-character line: %s", len(line), line)
			}
		}
	}
	// The live timeline's phase and run end, the report's header and its
	// phase table: once per view (it was 7 lines of a kilobyte each).
	if shown == 0 || shown > 4 {
		t.Errorf("the refused login is shown %d times, want at most once per view (phase, run end, report, phase table):\n%s", shown, all)
	}
	for _, raw := range []string{"{", "@Message.ExtendedInfo", "@odata", "ResourceAtUriUnauthorized"} {
		if strings.Contains(all, raw) {
			t.Errorf("curectl shows the BMC's raw answer (%q):\n%s", raw, all)
		}
	}
	if n := logins.Load(); n != 1 {
		t.Errorf("%d logins tried at the BMC, want 1: a refused login is not retried", n)
	}
	if !strings.Contains(all, "not retried") {
		t.Errorf("the run's end does not say the login is not retried:\n%s", all)
	}
}

var readyHTTP = regexp.MustCompile(`msg="provisioner-lite ready".* http=(\S+)`)

// A node whose inventory MAC is wrong boots as a stranger: its iPXE asks
// for the script of its real MAC and is told "not in the inventory". The
// coordinator logs that at info (no flag needed), and the node's run,
// waiting for CURE after its BMC was told to boot, shows the stranger on
// its timeline, once per MAC, naming the inventory's MACs, which is what
// the operator must fix. The proxy DHCP's inventory lookup tells the same
// observer
// (netboot's TestProxyDHCPSilentForOthers checks that it is told).
func TestUnknownMACVisible(t *testing.T) {
	s := newSite(t)
	bm, err := vbmc.New(vbmc.Config{Name: "node1", Serial: "S1", MAC: "52:54:00:c0:de:99", Logger: quiet()}, vbmc.NewFakeMachine())
	if err != nil {
		t.Fatal(err)
	}
	bmcSrv, err := vbmc.Listen("127.0.0.1:0", bm, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bmcSrv.Shutdown(context.Background()) })
	nodesFile := filepath.Join(s.root, "nodes.yaml")
	// The site typed ...:01; the machine's NIC is ...:99.
	os.WriteFile(nodesFile, fmt.Appendf(nil, "nodes:\n  - id: node1\n    bmc: {url: %q, username: admin, passwordEnv: CURE_TEST_BMC_PW, fingerprint: %q}\n    macs: [52:54:00:c0:de:01]\n    sku: qemu-nvme\n",
		bmcSrv.URL, bmcSrv.Fingerprint()), 0o600)
	t.Setenv("CURE_TEST_BMC_PW", "password")
	before := len(s.coordinatorLog())
	// A diagnostic run: it reaches wait_for_cure without an OS image.
	c := s.start("--nodes", nodesFile)
	m := readyHTTP.FindStringSubmatch(s.coordinatorLog()[before:])
	if m == nil {
		t.Fatal("no http address in the coordinator's ready line")
	}
	if rc, out, errOut := s.curectl(c, s.admin, "", "provision", "--mode", "diagnostic", "--manifest", "rma-quick", "node1"); rc != 0 {
		t.Fatalf("provision: %d\n%s%s", rc, out, errOut)
	}
	st := s.openStore()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runWaiting := func() store.Run {
		for {
			r, err := st.LatestRun(ctx, "node1")
			if err == nil && r.Phase == modes.WaitForCURE {
				return r
			}
			if ctx.Err() != nil {
				t.Fatalf("the run never reached wait_for_cure: %+v %v", r, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	r := runWaiting()
	// What the node's iPXE fetches, again every second as iPXE retries: the
	// run's stored phase can read wait_for_cure a moment before its wait
	// is registered to show strangers.
	stranger := func() {
		resp, err := http.Get("http://" + m[1] + "/ipxe/52-54-00-C0-DE-99")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "not in the inventory") {
			t.Fatalf("script for the stranger: %d %s", resp.StatusCode, body)
		}
	}
	want := "iPXE request from 52:54:00:c0:de:99 from 127.0.0.1, a MAC not in the node inventory, while this node waits for CURE: " +
		"if it is this node, its inventory MACs (52:54:00:c0:de:01) are wrong"
	var evs []store.Event
	for i := 0; ; i++ {
		if i%20 == 0 {
			stranger()
		}
		var err error
		if evs, err = st.Events(ctx, r.ID, 0, 1000); err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(evs, func(e store.Event) bool { return strings.Contains(e.Message, want) }) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the run's timeline never showed the stranger: %+v", evs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if rc, out, errOut := s.curectl(c, s.admin, "", "cancel", "node1", "--reason", "test done"); rc != 0 {
		t.Fatalf("cancel: %d\n%s%s", rc, out, errOut)
	}
	_, out, _ := s.curectl(c, s.admin, "", "watch", "node1")
	t.Logf("curectl watch node1:\n%s", out)
	shown := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, want) {
			shown++
			if !strings.Contains(line, string(modes.WaitForCURE)) {
				t.Errorf("the stranger is not shown on wait_for_cure: %s", line)
			}
		}
	}
	if shown != 1 {
		t.Errorf("curectl watch shows the stranger %d times, want once:\n%s", shown, out)
	}
	log := s.coordinatorLog()
	if !strings.Contains(log, `level=INFO msg=refused listener="boot server" reason="iPXE script for a MAC not in the inventory" source=52:54:00:c0:de:99@127.0.0.1`) {
		t.Errorf("the coordinator's log (at info) does not name the stranger:\n%s", log)
	}
}

var flagLine = regexp.MustCompile(`(?m)^  -([a-z0-9.-]+)`)

// `provisioner-lite --help` lists the coordinator's flags by topic, each
// flag once, none renamed: the network boot flags together, the listeners
// together.
func TestHelpGroupsFlags(t *testing.T) {
	rc, out := runMain(t, t.TempDir(), "--help")
	if rc != 0 {
		t.Fatalf("--help: rc %d\n%s", rc, out)
	}
	seen := map[string]int{}
	for _, m := range flagLine.FindAllStringSubmatch(out, -1) {
		if !strings.HasPrefix(m[1], "test.") { // this test binary's own, under "other"
			seen[m[1]]++
		}
	}
	for name, n := range seen {
		if n != 1 {
			t.Errorf("-%s listed %d times", name, n)
		}
	}
	if len(seen) < 50 {
		t.Errorf("%d flags listed", len(seen))
	}
	section := func(title string) string {
		i := strings.Index(out, "\n"+title+":\n")
		if i < 0 {
			t.Fatalf("no %q section:\n%s", title, out)
		}
		rest := out[i+len(title)+3:]
		if j := strings.Index(rest, "\n\n"); j >= 0 {
			rest = rest[:j]
		}
		return rest
	}
	for title, flags := range map[string][]string{
		"site: state, manifests, nodes, images":                       {"state-dir", "nodes", "image-dir", "log-level"},
		"network boot: how nodes reach the coordinator and boot CURE": {"pxe-interface", "proxy-dhcp", "advertise", "ipxe-efi"},
		"listeners and their limits":                                  {"http-listen", "grpc-listen", "web-listen", "http-max-conns"},
		"BMCs (Redfish) and power":                                    {"bmc-timeout", "bmc-ca", "power-on-rate"},
	} {
		s := section(title)
		for _, f := range flags {
			if !strings.Contains(s, "  -"+f+" ") && !strings.Contains(s, "  -"+f+"\n") {
				t.Errorf("-%s is not under %q", f, title)
			}
		}
	}
}
