package toolbundle

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	bundle "github.com/cure-oss/cure/tools/toolbundle"
)

func repoSpec(t *testing.T) *Spec {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	s, err := LoadSpec(filepath.Join(filepath.Dir(file), "../../initramfs/toolbundle.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// onlyTool is the repository's spec cut to one tool, so a test packs a
// real Debian program with its real libraries without packing ~110 MB.
func onlyTool(t *testing.T, name string) *Spec {
	t.Helper()
	s := repoSpec(t)
	for _, tl := range s.Tools {
		if tl.Name == name {
			return &Spec{File: s.File, Tools: []SpecTool{tl}}
		}
	}
	t.Fatalf("%s has no %s", s.File, name)
	return nil
}

func needDpkg(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("not a Debian host: the bundle is built from Debian packages")
	}
}

func TestRepoSpec(t *testing.T) {
	s := repoSpec(t)
	var names []string
	for _, tl := range s.Tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, ",") != "fio,stress-ng,iperf3,ib_write_bw,ib_read_bw,nvme,mstflint,mdadm,mkfs.ext4,mkfs.xfs" || len(s.Programs) != 1 || s.Programs[0].Name != "cure-measure" {
		t.Errorf("spec tools %v programs %v", names, s.Programs)
	}
}

// TestBuildsHelper: the Go helper is built from this tree into the bundle,
// static (it needs no file of the bundle), the same bytes both times.
func TestBuildsHelper(t *testing.T) {
	needDpkg(t)
	s := onlyTool(t, "iperf3")
	s.Programs = repoSpec(t).Programs
	var sums [2]string
	for i := range sums {
		r, err := Build(s, Host{TmpDir: t.TempDir()}, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		sums[i] = r.SHA256
		var helper *bundle.Tool
		for j, tl := range r.Manifest.Tools {
			if tl.Name == "cure-measure" {
				helper = &r.Manifest.Tools[j]
			}
		}
		if helper == nil || helper.Path != "bin/cure-measure" || len(helper.Needs) != 0 || !r.Manifest.Static(*helper) ||
			helper.Package != "github.com/cure-oss/cure/tools/checks/measure/cmd/cure-measure" || !strings.HasPrefix(helper.Version, "go1.") {
			t.Fatalf("helper %+v", helper)
		}
	}
	if sums[0] != sums[1] {
		t.Errorf("two builds with the helper differ: %s %s", sums[0], sums[1])
	}
}

// TestBuildReproducible packs iperf3 (from its pinned Debian package, with
// the libraries ld.so resolves) twice: the same bytes both times, and the
// listing names the program, its loader and libraries with their digests.
func TestBuildReproducible(t *testing.T) {
	needDpkg(t)
	s := onlyTool(t, "iperf3")
	var archives [2][]byte
	var reps [2]*Report
	for i := range archives {
		dir := t.TempDir()
		r, err := Build(s, Host{}, dir)
		if err != nil {
			t.Fatal(err)
		}
		reps[i] = r
		if archives[i], err = os.ReadFile(filepath.Join(dir, ArchiveName)); err != nil {
			t.Fatal(err)
		}
		if int64(len(archives[i])) != r.Size {
			t.Errorf("report size %d, file %d bytes", r.Size, len(archives[i]))
		}
		if _, err := os.Stat(filepath.Join(dir, ReportName)); err != nil {
			t.Error(err)
		}
	}
	if !bytes.Equal(archives[0], archives[1]) || reps[0].SHA256 != reps[1].SHA256 {
		t.Fatalf("two builds differ: %s (%d bytes) vs %s (%d bytes)", reps[0].SHA256, len(archives[0]), reps[1].SHA256, len(archives[1]))
	}
	list := Listing(reps[0])
	t.Logf("%s", list)
	for _, want := range []string{"tool iperf3: bin/iperf3 from iperf3 3.12-1+deb12u2", " bin/iperf3\n", " lib/ld-linux-x86-64.so.2\n",
		" lib/libiperf.so.0\n", " lib/libc.so.6\n", " lib/libcrypto.so.3\n"} {
		if !strings.Contains(list, want) {
			t.Errorf("listing lacks %q", want)
		}
	}
	m := reps[0].Manifest
	if m.Loader != "lib/ld-linux-x86-64.so.2" || len(m.Tools) != 1 || len(m.Tools[0].Needs) != len(m.Files)-1 {
		t.Errorf("manifest loader %q tools %+v files %d", m.Loader, m.Tools, len(m.Files))
	}
	for i := 1; i < len(m.Files); i++ {
		if m.Files[i-1].Path >= m.Files[i].Path {
			t.Errorf("files not sorted: %s before %s", m.Files[i-1].Path, m.Files[i].Path)
		}
	}
}

func TestResolveRefusesAnotherVersion(t *testing.T) {
	s := &Spec{File: "spec.yaml", Tools: []SpecTool{{Name: "fio", Path: "/usr/bin/fio", Package: "fio", Version: "3.33-3", Line: 4}}}
	h := Host{
		Owner:     func(string) (string, string, error) { return "fio", "3.35-1", nil },
		Libraries: func(string) (string, []string, error) { return "", nil, nil },
	}
	_, err := Resolve(s, h)
	if err == nil || !strings.Contains(err.Error(), "spec.yaml:4: tool fio: /usr/bin/fio is from fio 3.35-1, the spec pins fio 3.33-3") {
		t.Errorf("err %v", err)
	}
	h.Owner = func(string) (string, string, error) { return "", "", errors.New("not installed") }
	if _, err := Resolve(s, h); err == nil || !strings.Contains(err.Error(), "install the Debian package fio=3.33-3") {
		t.Errorf("err %v", err)
	}
	// A binary-only rebuild of the pinned version (+bN) is the same source:
	// taken, and recorded as installed; anything else after the pin is not.
	for installed, ok := range map[string]bool{"3.33-3+b2": true, "3.33-3+b10": true, "3.33-3+b": false, "3.33-3+deb12u1": false, "3.33-3+b2~x": false} {
		h.Owner = func(string) (string, string, error) { return "fio", installed, nil }
		p, err := Resolve(s, h)
		if (err == nil) != ok {
			t.Errorf("installed %s: err %v, want taken=%v", installed, err, ok)
		}
		if err == nil && p.Tools[0].Version != installed {
			t.Errorf("installed %s: recorded %s", installed, p.Tools[0].Version)
		}
	}
}

// TestResolveOneLibraryName: lib/ is flat, searched by soname; two host
// files with one name cannot both be in it.
func TestResolveOneLibraryName(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := write("a", "a"), write("b", "b")
	l1, l2 := write("x/libz.so.1", "one"), write("y/libz.so.1", "two")
	ld := write("ld-linux-x86-64.so.2", "ld")
	libs := map[string][]string{a: {l1}, b: {l2}}
	s := &Spec{File: "s.yaml", Tools: []SpecTool{{Name: "a", Path: a, Package: "p", Version: "1"}, {Name: "b", Path: b, Package: "p", Version: "1"}}}
	h := Host{
		Owner:     func(string) (string, string, error) { return "p", "1", nil },
		Libraries: func(p string) (string, []string, error) { return ld, libs[p], nil },
	}
	if _, err := Resolve(s, h); err == nil || !strings.Contains(err.Error(), "lib/libz.so.1 would be both") {
		t.Errorf("err %v", err)
	}
	libs[b] = []string{l1}
	p, err := Resolve(s, h)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range p.Entries {
		paths = append(paths, e.Path)
	}
	if got := strings.Join(paths, " "); got != "bin/a bin/b lib/ld-linux-x86-64.so.2 lib/libz.so.1" {
		t.Errorf("entries %s", got)
	}
}

func TestLoadSpecErrors(t *testing.T) {
	dir := t.TempDir()
	for body, want := range map[string]string{
		"tools:\n  - name: fio\n    path: /usr/bin/fio\n    package: fio\n    versoin: x\n":                              "field versoin not found",
		"tools:\n  - name: fio\n    path: usr/bin/fio\n    package: fio\n    version: x\n":                               ":2: tools[0].path: \"usr/bin/fio\" is not absolute",
		"tools:\n  - name: fio\n    path: /usr/bin/fio\n    package: fio\n":                                              ":2: tools[0].version: missing",
		"tools:\n  - {name: a, path: /a, package: a, version: '1'}\n  - {name: a, path: /b, package: b, version: '1'}\n": ":3: tools[1].name: a already on line 2",
		"tools: []\n": "no tools",
	} {
		p := filepath.Join(dir, "s.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadSpec(p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want %q", body, err, want)
		}
	}
}
