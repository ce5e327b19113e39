package builder

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"strings"
	"testing"

	"github.com/cure-oss/cure/builder/kmod"
	"github.com/klauspost/compress/zstd"
)

// TestModuleRecordsCompressed: with compress_modules: zstd each module of
// Debian's kernel is stored as <path>.ko.zst holding exactly the host's
// .ko, modules.dep names the compressed files, and two runs give the same
// bytes (the image stays reproducible).
func TestModuleRecordsCompressed(t *testing.T) {
	k, err := FindKernel(kernelRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	ix, err := kmod.Scan(k.ModulesDir)
	if err != nil {
		t.Fatal(err)
	}
	mods, _, err := ix.Closure([]string{"nvme", "vfat"})
	if err != nil {
		t.Fatal(err)
	}
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	var first [][]byte
	for run := range 2 {
		recs, err := moduleRecords(ix, k.Version, mods, true)
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string][]byte{}
		for i, r := range recs {
			b := make([]byte, r.FileSize)
			if _, err := r.ReadAt(b, 0); err != nil && r.FileSize > 0 {
				t.Fatal(err)
			}
			byName[r.Name] = b
			if run == 0 {
				first = append(first, b)
			} else if !bytes.Equal(first[i], b) {
				t.Errorf("%s differs between two runs", r.Name)
			}
		}
		base := path.Join("lib/modules", k.Version)
		for _, m := range mods {
			want, err := os.ReadFile(ix.HostPath(m))
			if err != nil {
				t.Fatal(err)
			}
			z, ok := byName[path.Join(base, m.Path+".zst")]
			if !ok {
				t.Fatalf("no %s.zst in the records", m.Path)
			}
			got, err := dec.DecodeAll(z, nil)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s.zst does not decompress to the host's %s (%v)", m.Path, m.Name, err)
			}
			if len(z) >= len(want) {
				t.Errorf("%s: %d bytes compressed, %d raw", m.Path, len(z), len(want))
			}
		}
		dep := string(byName[path.Join(base, "modules.dep")])
		if !strings.Contains(dep, "kernel/drivers/nvme/host/nvme.ko.zst: kernel/drivers/nvme/host/nvme-core.ko.zst") {
			t.Errorf("modules.dep does not name the compressed files:\n%s", dep)
		}
	}
}

// TestCompressLZ4Incompressible: the LZ4 initramfs is a legacy stream the
// reference decoder reads to the end even where 8 MB blocks do not
// compress (compressed modules, firmware): the Go writer stored such a
// block raw, which the legacy format cannot express, and the kernel
// stopped unpacking there.
func TestCompressLZ4Incompressible(t *testing.T) {
	if _, err := exec.LookPath("lz4"); err != nil {
		t.Skip("lz4 not installed (scripts/install-deps.sh installs it)")
	}
	data := make([]byte, 20<<20)
	// Two whole blocks of noise, then zeros.
	r := rand.NewChaCha8([32]byte{1})
	r.Read(data[:17<<20])
	lz, err := compressLZ4(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(lz) < 4 || binary.LittleEndian.Uint32(lz) != 0x184C2102 {
		t.Fatalf("not an LZ4 legacy stream: % x", lz[:min(len(lz), 8)])
	}
	cmd := exec.Command("lz4", "-d", "-c")
	cmd.Stdin = bytes.NewReader(lz)
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("lz4 -d: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("lz4 -d gave %d bytes, want the %d compressed", len(got), len(data))
	}
	again, err := compressLZ4(data)
	if err != nil || !bytes.Equal(again, lz) {
		t.Errorf("compressLZ4 is not reproducible (%v)", err)
	}
}
