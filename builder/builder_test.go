package builder

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/builder/spec"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/klauspost/compress/zstd"
	"github.com/u-root/mkuimage/cpio"
)

func TestFindKernel(t *testing.T) {
	root := t.TempDir()
	if _, err := FindKernel(root); err == nil || !strings.Contains(err.Error(), "found none") {
		t.Fatalf("empty root: err = %v", err)
	}
	os.MkdirAll(filepath.Join(root, "boot"), 0o755)
	os.WriteFile(filepath.Join(root, "boot/vmlinuz-6.1.0-9-amd64"), []byte("k"), 0o644)
	if _, err := FindKernel(root); err == nil || !strings.Contains(err.Error(), "no lib/modules/6.1.0-9-amd64") {
		t.Fatalf("no modules: err = %v", err)
	}
	os.MkdirAll(filepath.Join(root, "lib/modules/6.1.0-9-amd64"), 0o755)
	k, err := FindKernel(root)
	if err != nil || k.Version != "6.1.0-9-amd64" || !strings.HasSuffix(k.ModulesDir, "lib/modules/6.1.0-9-amd64") {
		t.Fatalf("k = %+v, err = %v", k, err)
	}
	os.WriteFile(filepath.Join(root, "boot/vmlinuz-6.1.0-10-amd64"), []byte("k"), 0o644)
	if _, err := FindKernel(root); err == nil || !strings.Contains(err.Error(), "found 2") {
		t.Fatalf("two kernels must be refused: err = %v", err)
	}
}

func TestIPXETemplateRenders(t *testing.T) {
	tmpl, err := renderIPXETemplate("6.1.0-9-amd64", "console=ttyS0 panic=-1")
	if err != nil {
		t.Fatal(err)
	}
	out, err := RenderIPXE(tmpl, IPXEData{BaseURL: "http://10.0.2.2:8080/image", Cmdline: "cure.token=abc cure.node=n1"})
	if err != nil {
		t.Fatal(err)
	}
	want := "kernel http://10.0.2.2:8080/image/vmlinuz initrd=initramfs.cpio.lz4 console=ttyS0 panic=-1 cure.token=abc cure.node=n1\n" +
		"initrd http://10.0.2.2:8080/image/initramfs.cpio.lz4\nboot\n"
	if !strings.HasPrefix(string(out), "#!ipxe\n") || !strings.HasSuffix(string(out), want) {
		t.Errorf("rendered:\n%s\nwant suffix:\n%s", out, want)
	}
	if _, err := renderIPXETemplate("k", "a {{.X}}"); err == nil {
		t.Error("template markers in cmdline must be refused")
	}
}

func TestListArchiveAndCompression(t *testing.T) {
	var b bytes.Buffer
	w := cpio.Newc.Writer(&b)
	for _, r := range []cpio.Record{
		cpio.Directory("etc", 0o755),
		fileRecord("etc/hello", []byte("hello\n"), 0o644),
		cpio.Symlink("init", "bbin/init"),
	} {
		if err := w.WriteRecord(r); err != nil {
			t.Fatal(err)
		}
	}
	cpio.WriteTrailer(w)
	entries, err := listArchive(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		t.Fatalf("entries = %+v", entries)
	}
	if e := entries[1]; e.Type != "file" || e.Size != 6 || e.Mode != "0644" ||
		e.SHA256 != "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03" {
		t.Errorf("file entry = %+v", e)
	}
	if e := entries[2]; e.Type != "symlink" || e.Target != "bbin/init" {
		t.Errorf("symlink entry = %+v", e)
	}

	z1, _ := compressZstd(b.Bytes())
	z2, _ := compressZstd(b.Bytes())
	g1, _ := compressGzip(b.Bytes())
	g2, _ := compressGzip(b.Bytes())
	if !bytes.Equal(z1, z2) || !bytes.Equal(g1, g2) {
		t.Error("compression is not deterministic")
	}
	dec, _ := zstd.NewReader(nil)
	back, err := dec.DecodeAll(z1, nil)
	if err != nil || !bytes.Equal(back, b.Bytes()) {
		t.Errorf("zstd round trip failed: %v", err)
	}
	// LZ4: the legacy frame (magic 0x184C2102, what the kernel unpacks),
	// deterministic, and lz4(1) reads it back.
	l1, err := compressLZ4(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	l2, _ := compressLZ4(b.Bytes())
	if !bytes.Equal(l1, l2) {
		t.Error("lz4 compression is not deterministic")
	}
	if len(l1) < 4 || binary.LittleEndian.Uint32(l1) != 0x184C2102 {
		t.Fatalf("lz4 output does not start with the legacy magic: % x", l1[:min(8, len(l1))])
	}
	if _, err := exec.LookPath("lz4"); err == nil {
		cmd := exec.Command("lz4", "-dc")
		cmd.Stdin = bytes.NewReader(l1)
		out, err := cmd.Output()
		if err != nil || !bytes.Equal(out, b.Bytes()) {
			t.Errorf("lz4 -dc round trip failed: %v", err)
		}
	}
}

func kernelRoot(t *testing.T) string {
	root, _ := filepath.Abs("../.cache/kernel/root")
	if _, err := FindKernel(root); err != nil {
		t.Skipf("kernel tree not extracted: %v", err)
	}
	return root
}

func TestBuildRefusesCAMismatch(t *testing.T) {
	s, err := spec.Parse("t.yaml", []byte("init: github.com/u-root/u-root/cmds/core/init\nca_path: /etc/cure/ca.pem\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Build(context.Background(), Options{Spec: s, KernelRoot: t.TempDir(), OutDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "t.yaml:2: ca_path") {
		t.Fatalf("err = %v, want ca_path error", err)
	}
}

func TestBuildUnknownModuleNamesIt(t *testing.T) {
	root := kernelRoot(t)
	s, err := spec.Parse("t.yaml", []byte("init: github.com/u-root/u-root/cmds/core/init\nmodules: [nvme, no_such_driver]\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Build(context.Background(), Options{Spec: s, KernelRoot: root, OutDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "no_such_driver") {
		t.Fatalf("err = %v, want the missing module named", err)
	}
}

// TestBuildReproducible builds the same small spec twice and compares the
// artifacts byte for byte. Slow (two busybox builds): skipped with -short.
func TestBuildReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("two full image builds; skipped with -short")
	}
	root := kernelRoot(t)
	dir := t.TempDir()
	overlay := filepath.Join(dir, "motd")
	os.WriteFile(overlay, []byte("CURE\n"), 0o600)
	caPEM, err := pki.EnsureCA(filepath.Join(dir, "state", "pki"))
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "state", "pki", pki.CACertFile)
	specFile := filepath.Join(dir, "t.yaml")
	os.WriteFile(specFile, []byte(`init: github.com/u-root/u-root/cmds/core/init
uinit: github.com/cure-oss/cure/builder/testdata/placeholder-uinit
commands: [github.com/u-root/u-root/cmds/core/ls]
modules: [nvme, virtio_net, vfat]
tools: [/usr/sbin/nvme]
files: ["motd:/etc/motd"]
ca_path: /etc/cure/ca.pem
cmdline: console=ttyS0
`), 0o644)
	s, err := spec.Load(specFile)
	if err != nil {
		t.Fatal(err)
	}
	var reports []*Report
	for i := range 2 {
		r, err := Build(context.Background(), Options{Spec: s, KernelRoot: root, CA: ca, KeepCPIO: true,
			OutDir: filepath.Join(dir, "out", string(rune('a'+i)))})
		if err != nil {
			t.Fatal(err)
		}
		reports = append(reports, r)
	}
	if len(reports[0].Artifacts) != 6 {
		t.Fatalf("artifacts = %+v", reports[0].Artifacts)
	}
	for i, a := range reports[0].Artifacts {
		b := reports[1].Artifacts[i]
		if a != b {
			t.Errorf("artifact differs between builds: %+v vs %+v", a, b)
		}
	}
	byPath := map[string]Entry{}
	for _, e := range reports[0].Entries {
		byPath[e.Path] = e
	}
	for _, p := range []string{"bin/uinit", "init", "usr/sbin/nvme", "etc/cure/ca.pem", "etc/motd",
		"lib/modules/" + reports[0].KernelVersion + "/modules.dep",
		"lib/modules/" + reports[0].KernelVersion + "/kernel/drivers/nvme/host/nvme-core.ko"} {
		if _, ok := byPath[p]; !ok {
			t.Errorf("archive lacks %s", p)
		}
	}
	if e := byPath["bin/uinit"]; e.Target != "../bbin/placeholder-uinit" {
		t.Errorf("bin/uinit = %+v", e)
	}
	if e := byPath["etc/motd"]; e.Mode != "0644" {
		t.Errorf("overlay file mode not normalised: %+v", e)
	}
	// report.json on disk matches what Build returned.
	var onDisk Report
	b, err := os.ReadFile(filepath.Join(dir, "out/a", ReportName))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &onDisk); err != nil || onDisk.Totals.ZstBytes != reports[0].Totals.ZstBytes || len(onDisk.Modules) < 5 {
		t.Errorf("report.json = %+v, err %v", onDisk.Totals, err)
	}
	// The report is an output too: byte-identical across the two builds.
	b2, err := os.ReadFile(filepath.Join(dir, "out/b", ReportName))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != string(b2) {
		t.Error("report.json differs between two builds of the same inputs")
	}
	// The report names the CA, and the coordinator of that state dir
	// accepts the image; another coordinator's CA is refused.
	if onDisk.CA == nil || onDisk.CA.Path != "/etc/cure/ca.pem" || byPath["etc/cure/ca.pem"].SHA256 == "" {
		t.Fatalf("report CA = %+v", onDisk.CA)
	}
	if got, err := pki.CheckImageCA(filepath.Join(dir, "out/a"), caPEM, filepath.Join(dir, "state")); err != nil || got.Fingerprint != onDisk.CA.Fingerprint {
		t.Fatalf("CheckImageCA with the image's own CA: %+v, %v", got, err)
	}
	other, err := pki.EnsureCA(filepath.Join(dir, "other"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.CheckImageCA(filepath.Join(dir, "out/a"), other, filepath.Join(dir, "other")); err == nil || !strings.Contains(err.Error(), "trusts another CA") {
		t.Fatalf("CheckImageCA with another CA: %v", err)
	}
}

func TestBuildBaseline(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles a Go program; skipped with -short")
	}
	root := kernelRoot(t)
	out := t.TempDir()
	r, err := BuildBaseline(context.Background(), BaselineOptions{KernelRoot: root, OutDir: out, Cmdline: "console=ttyS0", KeepCPIO: true})
	if err != nil {
		t.Fatal(err)
	}
	var haveInit, haveConsole bool
	for _, e := range r.Entries {
		haveInit = haveInit || (e.Path == "init" && e.Type == "file" && e.Mode == "0755")
		haveConsole = haveConsole || (e.Path == "dev/console" && e.Type == "chardev")
	}
	if !haveInit || !haveConsole {
		t.Errorf("baseline archive entries = %+v", r.Entries)
	}
}
