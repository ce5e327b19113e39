package builder

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/builder/spec"
	tbbuild "github.com/cure-oss/cure/builder/toolbundle"
)

// smallBundle packs a bundle of one fake program (a file of this test)
// with the builder and returns its output directory.
func smallBundle(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	prog := filepath.Join(dir, "nvme")
	ld := filepath.Join(dir, "ld-linux-x86-64.so.2")
	os.WriteFile(prog, []byte("\x7fELF nvme"), 0o755)
	os.WriteFile(ld, []byte("\x7fELF ld"), 0o755)
	s := &tbbuild.Spec{File: "toolbundle.yaml", Tools: []tbbuild.SpecTool{{Name: "nvme", Path: prog, Package: "nvme-cli", Version: "2.4+really2.3-3"}}}
	h := tbbuild.Host{
		Owner:     func(string) (string, string, error) { return "nvme-cli", "2.4+really2.3-3", nil },
		Libraries: func(string) (string, []string, error) { return ld, nil, nil },
	}
	out := filepath.Join(dir, "out")
	if _, err := tbbuild.Build(s, h, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPinToolBundle: the pin is the archive's sha256 and size as built,
// with the tools; a report that no longer describes its archive (rebuilt
// or edited since) is refused, naming both digests.
func TestPinToolBundle(t *testing.T) {
	out := smallBundle(t)
	archive, _ := os.ReadFile(filepath.Join(out, tbbuild.ArchiveName))
	size, sum, err := hashArchive(filepath.Join(out, tbbuild.ArchiveName))
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{out, filepath.Join(out, tbbuild.ReportName)} {
		p, err := PinToolBundle(arg)
		if err != nil {
			t.Fatal(err)
		}
		if p.SHA256 != sum || p.Size != size || size != int64(len(archive)) || strings.Join(p.Names(), ",") != "nvme" ||
			p.Loader != "lib/ld-linux-x86-64.so.2" || p.Tools[0].Files != 2 || p.Tools[0].Bytes != int64(len("\x7fELF nvme\x7fELF ld")) {
			t.Errorf("pin of %s = %+v, archive %d bytes sha256 %s", arg, p, size, sum)
		}
	}
	os.WriteFile(filepath.Join(out, tbbuild.ArchiveName), append(archive, 0), 0o644)
	if _, err := PinToolBundle(out); err == nil || !strings.Contains(err.Error(), "sha256 "+sum+", but it is") || !strings.Contains(err.Error(), "make toolbundle") {
		t.Errorf("stale report: %v", err)
	}
	if _, err := PinToolBundle(t.TempDir()); err == nil || !strings.Contains(err.Error(), "make toolbundle") {
		t.Errorf("no bundle: %v", err)
	}
}

// TestBuildPinFlags: tool_bundle_path and --pin-tool-bundle go together,
// like ca_path and --ca; both errors come before anything is built.
func TestBuildPinFlags(t *testing.T) {
	with, err := spec.Parse("cure.yaml", []byte("init: a/b\ntool_bundle_path: /etc/cure/toolbundle.json\n"))
	if err != nil {
		t.Fatal(err)
	}
	without, err := spec.Parse("cure.yaml", []byte("init: a/b\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Build(context.Background(), Options{Spec: with}); err == nil || !strings.Contains(err.Error(), "cure.yaml:2: tool_bundle_path /etc/cure/toolbundle.json needs the built tool bundle") {
		t.Errorf("path without pin: %v", err)
	}
	if _, err := Build(context.Background(), Options{Spec: without, ToolBundlePin: "out/toolbundle"}); err == nil || !strings.Contains(err.Error(), "no tool_bundle_path") {
		t.Errorf("pin without path: %v", err)
	}
}
