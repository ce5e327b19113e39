package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	tbbuild "github.com/cure-oss/cure/builder/toolbundle"
	"github.com/cure-oss/cure/tools/toolbundle"
)

// TestWrapperRunsNVMe is a person's session in the debug shell, out of
// process: cure-tools (built with a pin of a real nvme bundle as its
// default, as cure-build bakes one into the image) lists the bundle,
// fetches nvme from an HTTP server, and then the wrapper it wrote runs
// nvme-cli from PATH: the kernel starts cure-tools on the wrapper's
// `#!.../cure-tools run` line, which runs nvme through the bundle's loader.
func TestWrapperRunsNVMe(t *testing.T) {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("not a Debian host: the bundle is built from Debian packages")
	}
	_, file, _, _ := runtime.Caller(0)
	s, err := tbbuild.LoadSpec(filepath.Join(filepath.Dir(file), "../../../initramfs/toolbundle.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var keep []tbbuild.SpecTool
	for _, tl := range s.Tools {
		if tl.Name == "nvme" {
			keep = append(keep, tl)
		}
	}
	s.Tools, s.Programs = keep, nil
	tmp := t.TempDir()
	r, err := tbbuild.Build(s, tbbuild.Host{TmpDir: tmp}, filepath.Join(tmp, "bundle"))
	if err != nil {
		t.Fatal(err)
	}
	pin, err := toolbundle.NewPin(r.SHA256, r.Size, r.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(pin)
	pinPath := filepath.Join(tmp, "toolbundle.json")
	if err := os.WriteFile(pinPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(tmp, "cure-tools")
	build := exec.Command("go", "build", "-o", bin, "-ldflags", "-X main.pinFile="+pinPath+" -X main.self="+bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	archive := filepath.Join(tmp, "bundle", tbbuild.ArchiveName)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/artifacts/sha256/"+pin.SHA256 {
			http.NotFound(w, r)
			return
		}
		http.ServeFile(w, r, archive)
	}))
	defer srv.Close()
	dir := filepath.Join(tmp, "run")
	tools := func(args ...string) (string, error) {
		out, err := exec.Command(bin, append([]string{"-http", srv.URL, "-dir", dir}, args...)...).CombinedOutput()
		return string(out), err
	}

	out, err := tools("list")
	if err != nil || !strings.Contains(out, "nvme") || !strings.Contains(out, "nvme-cli") || !strings.Contains(out, "cure-tools fetch nvme") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	if out, err := tools("run", "nvme", "version"); err == nil || !strings.Contains(out, "run `cure-tools fetch nvme` first") {
		t.Errorf("run before fetch: %v\n%s", err, out)
	}
	out, err = tools("fetch", "nvme")
	if err != nil || !strings.Contains(out, "nvme (nvme-cli "+keep[0].Version+"): verified") ||
		!strings.Contains(out, "export PATH="+filepath.Join(dir, "bin")+":$PATH; nvme list") {
		t.Fatalf("fetch: %v\n%s", err, out)
	}
	t.Logf("cure-tools fetch nvme:\n%s", out)

	// As the shell does after `export PATH=DIR/bin:$PATH`: nvme by name.
	nvme := exec.Command("nvme", "version")
	nvme.Env = append(os.Environ(), "PATH="+filepath.Join(dir, "bin"))
	nvme.Path = filepath.Join(dir, "bin", "nvme")
	got, err := nvme.CombinedOutput()
	if err != nil || !strings.Contains(string(got), "nvme version 2.") {
		t.Fatalf("nvme version through the wrapper: %v\n%s", err, got)
	}
	// Its exit status is nvme's own (the wrapper execs, it does not wrap).
	bad := exec.Command(filepath.Join(dir, "bin", "nvme"), "no-such-command")
	if err := bad.Run(); bad.ProcessState == nil || bad.ProcessState.ExitCode() == 0 {
		t.Errorf("nvme no-such-command: %v, want nvme's failure status", err)
	}

	if out, err := exec.Command(bin, "-pin", filepath.Join(tmp, "none.json"), "list").CombinedOutput(); err == nil || !strings.Contains(string(out), "this image pins no tool bundle") {
		t.Errorf("no pin: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "frobnicate").CombinedOutput(); err == nil || !strings.Contains(string(out), "usage: cure-tools") {
		t.Errorf("unknown subcommand: %v\n%s", err, out)
	}
}
