package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cure-oss/cure/builder"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/statedir"
)

// TestMain lets a test run main() itself in a child process, to see what a
// command line does (exit code, output) without building a binary.
func TestMain(m *testing.M) {
	if args := os.Getenv("CURE_TEST_MAIN_ARGS"); args != "" {
		os.Args = append([]string{"provisioner-lite"}, strings.Split(args, "\x1f")...)
		// CURE_TEST_NOFILE: run under that file descriptor limit, soft and
		// hard, as a supervisor's LimitNOFILE= would set it.
		if n, err := strconv.ParseUint(os.Getenv("CURE_TEST_NOFILE"), 10, 64); err == nil {
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
				fmt.Fprintln(os.Stderr, "setrlimit:", err)
				os.Exit(3)
			}
		}
		main()
		os.Exit(0)
	}
	code := m.Run()
	removeCurectl()
	os.Exit(code)
}

// runMain runs `provisioner-lite args...` in a child process in dir.
func runMain(t *testing.T, dir string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CURE_TEST_MAIN_ARGS="+strings.Join(args, "\x1f"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-ctx.Done():
		cmd.Process.Kill()
		<-done
		t.Fatalf("provisioner-lite %q did not exit:\n%s", args, out.String())
	}
	return cmd.ProcessState.ExitCode(), out.String()
}

// A typo'd subcommand or an unknown flag is a usage error, never a
// coordinator start with a fresh CA.
func TestUnknownCommandsNeverStartACoordinator(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"pkk"}, {"chek", "--nodes", "x.yaml"}, {"--state-dir", "state", "pkk"}, {"--no-such-flag"}, {"check", "--no-such-flag"}, {"init", "extra"}} {
		rc, out := runMain(t, dir, args...)
		if rc != 2 || !strings.Contains(out, "usage") && !strings.Contains(out, "unexpected arguments") && !strings.Contains(out, "flag provided but not defined") {
			t.Errorf("provisioner-lite %q: rc %d, want 2 with usage:\n%s", args, rc, out)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a usage error created %v", entries)
	}
}

// TestCheckLintsSiteConfig: a site with several mistakes in its manifests,
// suites and nodes files; check reports each with file:line and field, and
// the coordinator refuses to start on the same config (before creating
// anything).
func TestCheckLintsSiteConfig(t *testing.T) {
	site := filepath.Join("testdata", "badsite")
	man := filepath.Join(site, "manifests")
	want := []string{
		man + "/gpu-b.yaml:9: spec.firmware[0].component: \"gpu\" is not one of",
		man + "/gpu-c.yaml:5: metadata.name: \"gpu-c-v2\" differs from the file name",
		man + "/gpu-d.yml: never read: the coordinator finds manifests as NAME.yaml",
		man + "/suites/gpu-a.yaml: never read: " + man + "/gpu-a.yaml has the same name",
		man + "/suites/slow.yaml:8: spec.checks[0].nmae: unknown field",
		site + "/nodes.yaml:7:10: nodes[0].sku: unknown SKU \"gpu-z\": no gpu-z.yaml in " + man,
		site + "/nodes.yaml:12:10: nodes[1].sku: \"quick\" is a ValidationSuite, not a SKU",
		site + "/nodes.yaml:16:12: nodes[2].macs[0]: MAC 52:54:00:00:00:01 already used by node n1 at " + site + "/nodes.yaml:6:12",
		site + "/nodes.yaml:17:9: nodes[3].id: duplicate id \"n3\" (first defined at " + site + "/nodes.yaml:13:9)",
		site + "/nodes.yaml:18:16: nodes[3].bmc.url: \"https//10.0.0.4\": scheme \"\"",
	}
	var out bytes.Buffer
	if rc := checkCmd([]string{"--manifests", man, "--nodes", filepath.Join(site, "nodes.yaml")}, &out); rc != 1 {
		t.Fatalf("check: rc %d, want 1\n%s", rc, out.String())
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("check output lacks %q", w)
		}
	}
	if !strings.Contains(out.String(), "check: 13 problem(s)") {
		t.Errorf("problem count:\n%s", out.String())
	}
	// The CSV format, the same rules.
	out.Reset()
	if rc := checkCmd([]string{"--manifests", man, "--nodes", filepath.Join(site, "nodes.csv")}, &out); rc != 1 {
		t.Fatalf("check csv: rc %d", rc)
	}
	for _, w := range []string{
		site + "/nodes.csv:3:48: sku: unknown SKU \"gpu-y\"",
		site + "/nodes.csv:4:4: bmc_url: \"10.0.1.3\": scheme \"\"",
		site + "/nodes.csv:4:22: macs: MAC 52:54:00:00:01:01 already used by node c1",
	} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("check csv output lacks %q\n%s", w, out.String())
		}
	}
	if t.Failed() {
		t.Logf("check output:\n%s", out.String())
	}

	// The coordinator runs the same lint and refuses before it creates anything.
	state := filepath.Join(t.TempDir(), "state")
	c := testConfig(state)
	c.ManifestDir, c.NodesFile = man, filepath.Join(site, "nodes.yaml")
	err := run(context.Background(), slog.New(slog.DiscardHandler), c)
	if err == nil || !strings.Contains(err.Error(), "refusing to start: 13 problem(s)") || !strings.Contains(err.Error(), want[5]) {
		t.Fatalf("coordinator on a bad site: %v", err)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Fatalf("the refused coordinator created its state dir: %v", err)
	}

	// A clean site passes: the examples and a nodes file that uses them.
	good := filepath.Join(t.TempDir(), "nodes.yaml")
	os.WriteFile(good, []byte("nodes:\n  - id: a\n    bmc: {url: https://10.0.0.1, username: u, password: p, insecure: true}\n    macs: [52:54:00:00:00:01]\n    sku: hgx-b200\n"), 0o600)
	out.Reset()
	suites, _ := filepath.Glob("../../../manifests/examples/suites/*.yaml")
	if rc := checkCmd([]string{"--manifests", "../../../manifests/examples", "--nodes", good}, &out); rc != 0 ||
		!strings.Contains(out.String(), fmt.Sprintf("2 SKU(s) [hgx-b200 qemu-nvme], %d suite(s)", len(suites))) || !strings.Contains(out.String(), "1 node(s)") {
		t.Fatalf("check of a clean site: rc %d\n%s", rc, out.String())
	}
}

// writeImage writes what cure-build leaves in an image directory, its
// report naming the CA in caPEM (builder's own Report type).
func writeImage(t *testing.T, dir string, caPEM []byte) {
	t.Helper()
	os.MkdirAll(dir, 0o755)
	r := builder.Report{Kind: "image"}
	if caPEM != nil {
		ca, err := pki.DescribeCA("ca.pem", caPEM)
		if err != nil {
			t.Fatal(err)
		}
		ca.Path = "/etc/cure/ca.pem"
		r.CA = &ca
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{builder.ReportName: b, builder.VmlinuzName: []byte("k"), builder.GzName: []byte("i")} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestImageCAMismatchRefused: an image built from another state dir (the
// README trap: `make image` with out/pki, the coordinator on state/) is
// refused at start with what to do; the image of this state dir starts.
func TestImageCAMismatchRefused(t *testing.T) {
	root := t.TempDir()
	state := filepath.Join(root, "state")
	if _, err := initState(state, "admin", "127.0.0.1", "", "/proc", slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	own, _ := os.ReadFile(filepath.Join(state, "pki", pki.CACertFile))
	other, err := pki.EnsureCA(filepath.Join(root, "out", "pki"))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)

	img := filepath.Join(root, "image-other")
	writeImage(t, img, other)
	c := testConfig(state)
	c.ImageDir = img
	err = run(context.Background(), log, c)
	if err == nil || !strings.Contains(err.Error(), "trusts another CA than this coordinator's") ||
		!strings.Contains(err.Error(), "cure-build --state-dir "+state) || !strings.Contains(err.Error(), "never register") {
		t.Fatalf("image of another CA: %v", err)
	}
	if _, err := os.Stat(filepath.Join(state, statedir.DBFile)); !os.IsNotExist(err) {
		t.Fatalf("the refused coordinator opened its store: %v", err)
	}
	// An image whose report names no CA cannot be trusted either.
	img = filepath.Join(root, "image-noca")
	writeImage(t, img, nil)
	c.ImageDir = img
	if err := run(context.Background(), log, c); err == nil || !strings.Contains(err.Error(), "records no CA") {
		t.Fatalf("image without a CA: %v", err)
	}
	// check says the same.
	var out bytes.Buffer
	if rc := checkCmd([]string{"--manifests", "../../../manifests/examples", "--state-dir", state, "--image-dir", filepath.Join(root, "image-other")}, &out); rc != 1 ||
		!strings.Contains(out.String(), "trusts another CA") {
		t.Fatalf("check of the other image: rc %d\n%s", rc, out.String())
	}

	// The image built from this state dir: the coordinator starts.
	img = filepath.Join(root, "image-own")
	writeImage(t, img, own)
	c.ImageDir = img
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := run(ctx, log, c); err != nil {
		t.Fatalf("image of this state dir: %v", err)
	}
	out.Reset()
	// The image passes; what is left is the qemu-nvme example's placeholder
	// OS image, not in this state dir's artifact store (hgx-b200's is a URL).
	if rc := checkCmd([]string{"--manifests", "../../../manifests/examples", "--state-dir", state, "--image-dir", img}, &out); rc != 1 ||
		!strings.Contains(out.String(), "trusts "+state+"'s CA (sha256:") || !strings.Contains(out.String(), "check: 1 problem(s)") ||
		!strings.Contains(out.String(), "qemu-nvme.yaml:53: spec.os.image: sha256:") {
		t.Fatalf("check of the own image: rc %d\n%s", rc, out.String())
	}
}

// init makes one state dir with everything a site starts from, says what
// to run next, and reuses it all when run again.
func TestInitStateDir(t *testing.T) {
	dir := t.TempDir()
	rc, out := runMain(t, dir, "init", "--state-dir", "site", "--advertise", "10.9.8.7")
	if rc != 0 {
		t.Fatalf("init: rc %d\n%s", rc, out)
	}
	for _, f := range []string{statedir.KeyFile, "pki/ca.pem", "pki/ca-key.pem", "pki/server.pem", "pki/operators/admin.pem", "pki/operators/admin-key.pem"} {
		if _, err := os.Stat(filepath.Join(dir, "site", f)); err != nil {
			t.Errorf("init did not make %s: %v", f, err)
		}
	}
	for _, want := range []string{"CA           site/pki/ca.pem (created, sha256:", "state key    site/state.key (created", "server cert  for 10.9.8.7 (--advertise)",
		"operator     admin, role admin: site/pki/operators/admin.pem (issued", "make image STATE=site",
		"provisioner-lite artifacts add --state-dir site --sku site-manifests/hgx-b200.yaml IMAGE",
		"provisioner-lite check --manifests site-manifests --nodes nodes.yaml --state-dir site --image-dir out/image",
		"provisioner-lite --state-dir site --manifests site-manifests --nodes nodes.yaml --image-dir out/image --advertise 10.9.8.7 --pxe-interface IFACE --proxy-dhcp",
		"export CURE_CA=site/pki/ca.pem CURE_CERT=site/pki/operators/admin.pem CURE_KEY=site/pki/operators/admin-key.pem"} {
		if !strings.Contains(out, want) {
			t.Errorf("init output lacks %q", want)
		}
	}
	cert, _ := os.ReadFile(filepath.Join(dir, "site", "pki", "operators", "admin.pem"))
	ca1, _ := os.ReadFile(filepath.Join(dir, "site", "pki", "ca.pem"))
	rc, out2 := runMain(t, dir, "init", "--state-dir", "site", "--advertise", "10.9.8.7")
	ca2, _ := os.ReadFile(filepath.Join(dir, "site", "pki", "ca.pem"))
	cert2, _ := os.ReadFile(filepath.Join(dir, "site", "pki", "operators", "admin.pem"))
	if rc != 0 || !bytes.Equal(ca1, ca2) || !bytes.Equal(cert, cert2) || !strings.Contains(out2, "(kept, sha256:") || !strings.Contains(out2, "admin.pem (kept") {
		t.Fatalf("second init: rc %d, CA kept %v, cert kept %v\n%s", rc, bytes.Equal(ca1, ca2), bytes.Equal(cert, cert2), out2)
	}
	if t.Failed() {
		t.Logf("init output:\n%s", out)
	}
}
