package toolbundle

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type entry struct {
	name string
	data string
	typ  byte
}

// archive writes a ustar stream as cure-build does (uncompressed: unpack
// is below the zstd layer).
func archive(t testing.TB, m *Manifest, extra ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	var es []entry
	if m != nil {
		raw, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, entry{name: ManifestName, data: string(raw)})
	}
	for _, e := range append(es, extra...) {
		h := &tar.Header{Name: e.name, Size: int64(len(e.data)), Mode: 0o644, ModTime: time.Unix(0, 0), Format: tar.FormatUSTAR, Typeflag: tar.TypeReg}
		if e.typ != 0 {
			h.Typeflag, h.Size, h.Linkname = e.typ, 0, "/etc/passwd"
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == 0 {
			if _, err := tw.Write([]byte(e.data)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func twoTools() *Manifest {
	return &Manifest{Format: Format, Loader: "lib/ld.so",
		Tools: []Tool{{Name: "a", Path: "bin/a", Needs: []string{"lib/ld.so", "lib/liba.so"}}, {Name: "b", Path: "bin/b", Needs: []string{"lib/ld.so"}}},
		Files: []File{{Path: "bin/a", Size: 3, Mode: 0o755}, {Path: "bin/b", Size: 3, Mode: 0o755}, {Path: "lib/ld.so", Size: 2, Mode: 0o755}, {Path: "lib/liba.so", Size: 4, Mode: 0o644}},
	}
}

func files(m *Manifest) []entry {
	data := map[string]string{"bin/a": "aaa", "bin/b": "bbb", "lib/ld.so": "ld", "lib/liba.so": "liba"}
	var out []entry
	for _, f := range m.Files {
		out = append(out, entry{name: f.Path, data: data[f.Path]})
	}
	return out
}

// TestUnpackOnlyWhatIsNeeded: the files of the requested tools (and the
// loader) are written with the manifest's modes; the others are read past.
func TestUnpackOnlyWhatIsNeeded(t *testing.T) {
	m := twoTools()
	dir := filepath.Join(t.TempDir(), "tools")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := unpack(bytes.NewReader(archive(t, m, files(m)...)), dir, Options{Tools: []string{"b"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			got = append(got, rel+":"+fi.Mode().Perm().String())
		}
		return nil
	})
	if strings.Join(got, " ") != "bin/b:-rwxr-xr-x lib/ld.so:-rwxr-xr-x" {
		t.Errorf("unpacked %v", got)
	}
	cmd, err := b.Command(t.Context(), "b", "-x")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(dir, "lib/ld.so"), "--library-path", filepath.Join(dir, "lib"), filepath.Join(dir, "bin/b"), "-x"}; strings.Join(cmd.Args, " ") != strings.Join(want, " ") {
		t.Errorf("command %q, want %q", cmd.Args, want)
	}
}

// TestStaticTool: a tool without the loader among its files (the Go
// helper) is started directly, and needs only its own file.
func TestStaticTool(t *testing.T) {
	m := twoTools()
	m.Tools = append(m.Tools, Tool{Name: "c", Path: "bin/c"})
	m.Files = append(m.Files, File{Path: "bin/c", Size: 1, Mode: 0o755})
	dir := t.TempDir()
	b, err := unpack(bytes.NewReader(archive(t, m, append(files(m)[:4], entry{name: "bin/c", data: "c"})...)), dir, Options{Tools: []string{"c"}})
	if err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "lib")); len(entries) != 0 {
		t.Errorf("a static tool unpacked %v", entries)
	}
	cmd, err := b.Command(t.Context(), "c", "-v")
	if err != nil || strings.Join(cmd.Args, " ") != filepath.Join(dir, "bin/c")+" -v" {
		t.Errorf("static tool command %q %v", cmd.Args, err)
	}
}

func TestUnpackRefuses(t *testing.T) {
	m := twoTools()
	good := files(m)
	traversal := twoTools()
	traversal.Files[3].Path = "lib/../../etc/x"
	bad := map[string][]byte{
		"entry not in the manifest":  archive(t, m, append(good, entry{name: "lib/evil.so", data: "x"})...),
		"entry twice":                archive(t, m, append(good, good[0])...),
		"size other than stated":     archive(t, m, append([]entry{{name: "bin/a", data: "aaaa"}}, good[1:]...)...),
		"symlink":                    archive(t, m, append([]entry{{name: "bin/a", typ: tar.TypeSymlink}}, good[1:]...)...),
		"manifest not first":         archive(t, nil, append(good, entry{name: ManifestName, data: "{}"})...),
		"path outside bin/ and lib/": archive(t, traversal, good...),
		"needed file missing":        archive(t, m, good[1:]...),
		"truncated":                  archive(t, m, good...)[:1536],
		"not tar":                    []byte(strings.Repeat("x", 1024)),
		"empty":                      nil,
	}
	for name, in := range bad {
		dir := t.TempDir()
		if _, err := unpack(bytes.NewReader(in), dir, Options{Tools: []string{"a"}}); err == nil {
			t.Errorf("%s: unpacked", name)
		}
	}
	if _, err := unpack(bytes.NewReader(archive(t, m, good...)), t.TempDir(), Options{Tools: []string{"a"}, MaxBytes: 8}); err == nil ||
		!strings.Contains(err.Error(), "need 9 bytes unpacked, over the 8-byte bound") {
		t.Errorf("over the bound: %v", err)
	}
}

// FuzzUnpack: the archive is verified against its digest before it gets
// here, but the reader must still never panic, write outside its
// directory, or write a file the manifest does not name.
func FuzzUnpack(f *testing.F) {
	m := twoTools()
	f.Add(archive(f, m, files(m)...))
	f.Add(archive(f, m, append(files(m), entry{name: "lib/x", data: "x"})...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		root := t.TempDir()
		dir := filepath.Join(root, "tools")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		bun, err := unpack(bytes.NewReader(b), dir, Options{Tools: []string{"a"}, MaxBytes: 1 << 20})
		filepath.Walk(root, func(p string, fi os.FileInfo, werr error) error {
			if werr != nil || !fi.Mode().IsRegular() {
				return nil
			}
			rel, _ := filepath.Rel(dir, p)
			if strings.HasPrefix(rel, "..") {
				t.Fatalf("wrote %s outside %s", p, dir)
			}
			if err == nil {
				if _, ok := bun.Manifest.needed([]string{"a"}); ok != nil {
					t.Fatal(ok)
				}
			}
			return nil
		})
	})
}
