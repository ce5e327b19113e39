package driverbundle

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/builder/driverbundle/bundletest"
	"github.com/cure-oss/cure/tools/gpu/driver"
)

// siteTools adds stand-ins for DCGM, nvbandwidth and nccl-tests to a
// bundle directory, with the gpu-tools.yaml that declares them.
func siteTools(t *testing.T, dir, yaml string) {
	t.Helper()
	for rel, mode := range map[string]os.FileMode{
		"bin/nv-hostengine": 0o755, "bin/dcgmi": 0o755, "libexec/datacenter-gpu-manager-4/nvvs": 0o755,
		"libexec/datacenter-gpu-manager-4/plugins/cuda12/libpluginDiagnostic.so": 0o644,
		"lib/libdcgm.so.4": 0o644, "bin/nvbandwidth": 0o755, "bin/all_reduce_perf": 0o755, "lib/libnccl.so.2": 0o644,
		"share/README": 0o644,
	} {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("stand-in for "+rel+"\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ToolsFile), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
}

const toolsYAML = `tools:
  - name: dcgm
    version: "4.6.0"
    source: "datacenter-gpu-manager-4-core and -cuda12 1:4.6.0-1, NVIDIA CUDA repository (ubuntu2404)"
    programs:
      nv-hostengine: bin/nv-hostengine
      dcgmi: bin/dcgmi
      nvvs: libexec/datacenter-gpu-manager-4/nvvs
    files: [lib/libdcgm.so.4]
  - name: nvbandwidth
    version: v0.8
    source: "github.com/NVIDIA/nvbandwidth v0.8, CUDA 12.8"
    programs: {nvbandwidth: bin/nvbandwidth}
  - name: nccl-tests
    version: "2.16.4"
    source: "github.com/NVIDIA/nccl-tests v2.16.4, NCCL 2.26.5, CUDA 12.8"
    programs: {all_reduce_perf: bin/all_reduce_perf}
    files: [lib/libnccl.so.2]
`

func TestGPUTools(t *testing.T) {
	dir := bundletest.Make(t, vermagic, bundletest.Options{})
	siteTools(t, dir, toolsYAML)
	b, err := Open(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m := b.Manifest([]string{"nvidia"})
	dcgm, ok := m.Tool(driver.ToolDCGM)
	if !ok || dcgm.Version != "4.6.0" || dcgm.Programs["dcgmi"] != "/usr/bin/dcgmi" ||
		dcgm.Programs["nvvs"] != "/usr/libexec/datacenter-gpu-manager-4/nvvs" || len(dcgm.Files) != 4 {
		t.Fatalf("dcgm %+v", dcgm)
	}
	sum := sha256.Sum256([]byte("stand-in for lib/libdcgm.so.4\n"))
	var pinned bool
	for _, f := range dcgm.Files {
		if f.Path == "/usr/lib/x86_64-linux-gnu/libdcgm.so.4" && f.SHA256 == hex.EncodeToString(sum[:]) && f.Size == int64(len("stand-in for lib/libdcgm.so.4\n")) {
			pinned = true
		}
	}
	if !pinned {
		t.Errorf("libdcgm not pinned: %+v", dcgm.Files)
	}
	if nccl, ok := m.Tool(driver.ToolNCCLTests); !ok || nccl.Programs["all_reduce_perf"] != "/usr/bin/all_reduce_perf" {
		t.Errorf("nccl-tests %+v", nccl)
	}
	// The plugins go where DCGM 4 looks for them: beside nvvs.
	found := false
	for _, f := range b.Files {
		found = found || f.Dst == "usr/libexec/datacenter-gpu-manager-4/plugins/cuda12/libpluginDiagnostic.so"
	}
	if !found {
		t.Error("libexec/ not mapped to /usr/libexec")
	}

	for _, tc := range []struct{ yaml, want string }{
		{"tools:\n  - {name: gpu-stress, version: '1', source: x, programs: {}}\n", `tools[0]: name "gpu-stress": want dcgm, gpu-burn, nccl-tests, nvbandwidth`},
		{"tools:\n  - {name: nvbandwidth, version: v0.8, source: x, programs: {nvbandwidth: bin/nvbandwidth}, sha256: {bin/nvbandwidth: 00}}\n", "bin/nvbandwidth has sha256 "},
		{"tools:\n  - {name: nvbandwidth, version: v0.8, source: x, programs: {nvbandwidth: bin/nvbandwidth}, sha256: {bin/dcgmi: 00}}\n", "sha256.bin/dcgmi: pins a path that is neither"},
		{"tools:\n  - {name: dcgm, version: '4.6.0', source: x, programs: {dcgmi: bin/dcgmi}}\n", "tools[0]: dcgm: programs.nv-hostengine: missing"},
		{"tools:\n  - {name: nvbandwidth, source: x, programs: {nvbandwidth: bin/nvbandwidth}}\n", "nvbandwidth: version: missing"},
		{"tools:\n  - {name: nvbandwidth, version: v0.8, programs: {nvbandwidth: bin/nvbandwidth}}\n", "nvbandwidth: source: missing"},
		{"tools:\n  - {name: nvbandwidth, version: v0.8, source: x, programs: {nvbandwidth: bin/nvbw}}\n", "programs.nvbandwidth: bin/nvbw is not in the bundle"},
		{"tools:\n  - {name: nvbandwidth, version: v0.8, source: x, programs: {nvbandwidth: lib/libnccl.so.2}}\n", "lib/libnccl.so.2 is not executable"},
		{"tools:\n  - {name: nccl-tests, version: '2', source: x, programs: {all_reduce_perf: bin/all_reduce_perf}, files: [../etc/shadow]}\n", `"../etc/shadow" is not a bundle path`},
		{"tools:\n  - {name: nccl-tests, version: '2', source: x, programs: {all_reduce_perf: bin/all_reduce_perf, nvvs: bin/dcgmi}}\n", "programs.nvvs: not a program of nccl-tests"},
		{"tool: []\n", "field tool not found"},
	} {
		d := bundletest.Make(t, vermagic, bundletest.Options{})
		siteTools(t, d, tc.yaml)
		if _, err := Open(d, ""); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), ToolsFile) {
			t.Errorf("%q: err = %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

// TestMissingLibrariesOrigin: DCGM's plugins load the CUDA libraries
// beside them through RUNPATH $ORIGIN; the check must look there.
func TestMissingLibrariesOrigin(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build a shared library with a RUNPATH")
	}
	dir := bundletest.Make(t, vermagic, bundletest.Options{})
	plugins := filepath.Join(dir, "libexec/datacenter-gpu-manager-4/plugins/cuda12")
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "x.c")
	os.WriteFile(src, []byte("int x(void) { return 1; }\n"), 0o644)
	build := func(args ...string) {
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			t.Skipf("cc %q: %v: %s", args, err, out)
		}
	}
	build("-shared", "-fPIC", "-o", filepath.Join(plugins, "libcublasfake.so.12"), "-Wl,-soname,libcublasfake.so.12", src)
	build("-shared", "-fPIC", "-o", filepath.Join(plugins, "libpluginDiagnostic.so"), src, "-Wl,--no-as-needed",
		filepath.Join(plugins, "libcublasfake.so.12"), "-Wl,--enable-new-dtags,-rpath,$ORIGIN")
	b, err := Open(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	present := map[string]bool{}
	for _, f := range b.Files {
		present[f.Dst] = true
	}
	for _, lib := range []string{"libc.so.6"} {
		present["lib/x86_64-linux-gnu/"+lib] = true
	}
	for _, m := range b.MissingLibraries(present) {
		if strings.Contains(m, "libcublasfake") {
			t.Errorf("a library beside its $ORIGIN user reported missing: %s", m)
		}
	}
	delete(present, "usr/libexec/datacenter-gpu-manager-4/plugins/cuda12/libcublasfake.so.12")
	miss := b.MissingLibraries(present)
	if len(miss) != 1 || !strings.Contains(miss[0], "libpluginDiagnostic.so needs libcublasfake.so.12") {
		t.Errorf("missing %q", miss)
	}
}
