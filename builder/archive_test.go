package builder

import (
	"bytes"
	"os"
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
