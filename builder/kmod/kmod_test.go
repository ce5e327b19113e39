package kmod

import (
	"bytes"
	"github.com/cure-oss/cure/builder/kmod/kmodtest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

func fakeKO(t *testing.T, modinfo ...string) []byte { return kmodtest.FakeKO(modinfo...) }

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fixtureTree builds a small module tree resembling Debian's NVMe + virtio
// + vfat layout, with one xz and one zstd compressed module.
func fixtureTree(t *testing.T) string {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "kernel/drivers/nvme/host/nvme-core.ko"),
		fakeKO(t, "license=GPL", "depends=", "name=nvme_core"))
	writeFile(t, filepath.Join(dir, "kernel/drivers/nvme/host/nvme.ko"),
		fakeKO(t, "alias=pci:v*d*sv*sd*bc01sc08i02*", "alias=pci:v0000106Bd00002001sv*sd*bc*sc*i*", "depends=nvme-core", "name=nvme"))
	writeFile(t, filepath.Join(dir, "kernel/fs/fat/fat.ko"), fakeKO(t, "depends="))

	var xzb bytes.Buffer
	xw, err := xz.NewWriter(&xzb)
	if err != nil {
		t.Fatal(err)
	}
	xw.Write(fakeKO(t, "alias=fs-vfat", "depends=fat"))
	xw.Close()
	writeFile(t, filepath.Join(dir, "kernel/fs/fat/vfat.ko.xz"), xzb.Bytes())

	zw, _ := zstd.NewWriter(nil)
	writeFile(t, filepath.Join(dir, "kernel/drivers/block/virtio_blk.ko.zst"),
		zw.EncodeAll(fakeKO(t, "alias=virtio:d00000002v*", "depends=virtio,virtio_ring"), nil))
	writeFile(t, filepath.Join(dir, "kernel/drivers/virtio/virtio_ring.ko"), fakeKO(t, "depends="))
	writeFile(t, filepath.Join(dir, "modules.builtin"), []byte("kernel/drivers/virtio/virtio.ko\n"))
	writeFile(t, filepath.Join(dir, "modules.order"), []byte("not a module\n"))
	return dir
}

func TestScanReadsModinfoIncludingCompressed(t *testing.T) {
	ix, err := Scan(fixtureTree(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(ix.Modules) != 6 {
		t.Fatalf("got %d modules, want 6: %v", len(ix.Modules), ix.Modules)
	}
	vfat := ix.Modules["vfat"]
	if vfat == nil || vfat.Path != "kernel/fs/fat/vfat.ko.xz" || strings.Join(vfat.Depends, ",") != "fat" || strings.Join(vfat.Aliases, ",") != "fs-vfat" {
		t.Errorf("vfat (xz) = %+v", vfat)
	}
	vb := ix.Modules["virtio_blk"]
	if vb == nil || strings.Join(vb.Depends, ",") != "virtio,virtio_ring" {
		t.Errorf("virtio_blk (zst) = %+v", vb)
	}
	if ix.Modules["nvme_core"] == nil || ix.Modules["nvme"].Depends[0] != "nvme_core" {
		t.Errorf("dash names not canonicalised: %+v", ix.Modules)
	}
	if !ix.Builtin["virtio"] {
		t.Errorf("modules.builtin not read: %v", ix.Builtin)
	}
}

func TestClosureOrderAndBuiltin(t *testing.T) {
	ix, err := Scan(fixtureTree(t))
	if err != nil {
		t.Fatal(err)
	}
	mods, builtin, err := ix.Closure([]string{"vfat", "nvme", "virtio_blk"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range mods {
		names = append(names, m.Name)
	}
	want := "nvme_core,nvme,fat,vfat,virtio_ring,virtio_blk"
	if got := strings.Join(names, ","); got != want {
		t.Errorf("closure = %s, want %s", got, want)
	}
	if strings.Join(builtin, ",") != "virtio" {
		t.Errorf("builtin = %v, want [virtio]", builtin)
	}
}

func TestClosureMissingNamesTheModule(t *testing.T) {
	ix, err := Scan(fixtureTree(t))
	if err != nil {
		t.Fatal(err)
	}
	ix.Modules["nvme"].Depends = append(ix.Modules["nvme"].Depends, "ghost")
	_, _, err = ix.Closure([]string{"nvme", "nope"})
	if err == nil || !strings.Contains(err.Error(), "ghost (needed by nvme)") || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("err = %v, want both missing modules named", err)
	}
}

func TestClosureCycle(t *testing.T) {
	ix, err := Scan(fixtureTree(t))
	if err != nil {
		t.Fatal(err)
	}
	ix.Modules["nvme_core"].Depends = []string{"nvme"}
	if _, _, err := ix.Closure([]string{"nvme"}); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Fatalf("err = %v, want cycle", err)
	}
}

func TestWriteDepAndAlias(t *testing.T) {
	ix, err := Scan(fixtureTree(t))
	if err != nil {
		t.Fatal(err)
	}
	mods, _, err := ix.Closure([]string{"vfat", "nvme", "virtio_blk"})
	if err != nil {
		t.Fatal(err)
	}
	var dep, alias bytes.Buffer
	if err := ix.WriteDep(&dep, mods); err != nil {
		t.Fatal(err)
	}
	wantDep := `kernel/drivers/block/virtio_blk.ko.zst: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/nvme/host/nvme-core.ko:
kernel/drivers/nvme/host/nvme.ko: kernel/drivers/nvme/host/nvme-core.ko
kernel/drivers/virtio/virtio_ring.ko:
kernel/fs/fat/fat.ko:
kernel/fs/fat/vfat.ko.xz: kernel/fs/fat/fat.ko
`
	if dep.String() != wantDep {
		t.Errorf("modules.dep:\n%s\nwant:\n%s", dep.String(), wantDep)
	}
	for _, line := range strings.Split(dep.String(), "\n") {
		if strings.HasSuffix(line, " ") {
			t.Errorf("trailing space in %q", line)
		}
	}
	if err := WriteAlias(&alias, mods); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"alias pci:v*d*sv*sd*bc01sc08i02* nvme\n",
		"alias fs-vfat vfat\n",
		"alias virtio:d00000002v* virtio_blk\n",
	} {
		if !strings.Contains(alias.String(), want) {
			t.Errorf("modules.alias missing %q:\n%s", want, alias.String())
		}
	}
	// An image that compresses its .ko files (compress_modules) names them
	// .ko.zst; modules the package shipped compressed keep their names.
	var zdep bytes.Buffer
	if err := ix.WriteDepSuffix(&zdep, mods, ".zst"); err != nil {
		t.Fatal(err)
	}
	wantZ := `kernel/drivers/block/virtio_blk.ko.zst: kernel/drivers/virtio/virtio_ring.ko.zst
kernel/drivers/nvme/host/nvme-core.ko.zst:
kernel/drivers/nvme/host/nvme.ko.zst: kernel/drivers/nvme/host/nvme-core.ko.zst
kernel/drivers/virtio/virtio_ring.ko.zst:
kernel/fs/fat/fat.ko.zst:
kernel/fs/fat/vfat.ko.xz: kernel/fs/fat/fat.ko.zst
`
	if zdep.String() != wantZ {
		t.Errorf("modules.dep:\n%s\nwant:\n%s", zdep.String(), wantZ)
	}
}

func TestTransitiveDepmodOrder(t *testing.T) {
	ix := &Index{Modules: map[string]*Module{
		"a": {Name: "a", Path: "a.ko", Depends: []string{"b"}},
		"b": {Name: "b", Path: "b.ko", Depends: []string{"c"}},
		"c": {Name: "c", Path: "c.ko"},
	}}
	var dep bytes.Buffer
	mods, _, err := ix.Closure([]string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.WriteDep(&dep, mods); err != nil {
		t.Fatal(err)
	}
	if want := "a.ko: b.ko c.ko\nb.ko: c.ko\nc.ko:\n"; dep.String() != want {
		t.Errorf("got %q want %q", dep.String(), want)
	}
}

func TestReadModinfoRejectsNonELF(t *testing.T) {
	if _, err := ReadModinfo(bytes.NewReader([]byte("not elf"))); err == nil {
		t.Fatal("expected error for non-ELF input")
	}
}

// TestScanRealTree runs against the Debian kernel tree when it has been
// extracted (make kernel); it proves the parser copes with real modules.
func TestScanRealTree(t *testing.T) {
	matches, _ := filepath.Glob("../../.cache/kernel/root/lib/modules/*")
	if len(matches) != 1 || testing.Short() {
		t.Skip("no single kernel tree in .cache/kernel/root, or -short")
	}
	ix, err := Scan(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	mods, _, err := ix.Closure([]string{"nvme", "virtio_net"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, m := range mods {
		got[m.Name] = true
	}
	for _, want := range []string{"nvme", "nvme_core", "virtio_net", "net_failover", "failover"} {
		if !got[want] {
			t.Errorf("closure of nvme+virtio_net lacks %s: %v", want, got)
		}
	}
}
