package manifests

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// SetOSImage changes the three values and nothing else of the example
// SKU: its comments and layout are the operator's.
func TestSetOSImageKeepsTheRest(t *testing.T) {
	orig, err := os.ReadFile("examples/qemu-nvme.yaml")
	if err != nil {
		t.Fatal(err)
	}
	img := Artifact{SHA256: strings.Repeat("0f", 32), Size: 11600000, Format: ImageFormatOf("out/hostos/disk.raw.zst")}
	got, err := SetOSImage("qemu-nvme.yaml", orig, img)
	if err != nil {
		t.Fatal(err)
	}
	sku, err := ParseSKU("qemu-nvme.yaml", got)
	if err != nil || sku.Spec.OS.Image != img {
		t.Fatalf("image = %+v, %v; want %+v", sku.Spec.OS.Image, err, img)
	}
	a, b := bytes.Split(orig, []byte("\n")), bytes.Split(got, []byte("\n"))
	if len(a) != len(b) {
		t.Fatalf("%d lines became %d", len(a), len(b))
	}
	changed := 0
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			changed++
			if !bytes.Contains(b[i], []byte(img.SHA256)) && !bytes.Contains(b[i], []byte("11600000")) {
				t.Errorf("line %d changed: %q -> %q", i+1, a[i], b[i])
			}
		}
	}
	if changed != 2 { // format was raw.zst already
		t.Errorf("%d lines changed, want the sha256 and size lines", changed)
	}
}

func TestSetOSImageErrors(t *testing.T) {
	img := Artifact{SHA256: strings.Repeat("0f", 32), Size: 1, Format: ImageRaw}
	for name, c := range map[string]struct{ yaml, want string }{
		"no os":  {"apiVersion: cure.dev/v1\nkind: SKU\nmetadata: {name: x}\nspec: {}\n", "spec.os: missing"},
		"flow":   {"apiVersion: cure.dev/v1\nkind: SKU\nmetadata: {name: x}\nspec:\n  os:\n    image: {sha256: ab, size: 1, format: raw}\n", "flow style"},
		"no key": {"apiVersion: cure.dev/v1\nkind: SKU\nmetadata: {name: x}\nspec:\n  os:\n    image:\n      sha256: ab\n      size: 1\n", "spec.os.image.format: missing"},
	} {
		if _, err := SetOSImage("x.yaml", []byte(c.yaml), img); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	for name, want := range map[string]string{"disk.raw.zst": ImageRawZstd, "a.img.gz": ImageRawGzip, "b.qcow2": ImageQcow2, "c.raw": ImageRaw, "d.xz": ImageRawXz} {
		if got := ImageFormatOf(name); got != want {
			t.Errorf("ImageFormatOf(%s) = %s, want %s", name, got, want)
		}
	}
}

// chunks is added after format, replaced in place, and removed when the
// new image has no list.
func TestSetOSImageChunks(t *testing.T) {
	orig, err := os.ReadFile("examples/qemu-nvme.yaml")
	if err != nil {
		t.Fatal(err)
	}
	img := Artifact{SHA256: strings.Repeat("0f", 32), Size: 11600000, Format: ImageRawZstd, Chunks: strings.Repeat("c1", 32)}
	added, err := SetOSImage("qemu-nvme.yaml", orig, img)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(added, []byte("\n")) - bytes.Count(orig, []byte("\n")); n != 1 {
		t.Errorf("adding chunks added %d lines, want 1", n)
	}
	if !bytes.Contains(added, []byte("      format: raw.zst\n      chunks: "+img.Chunks+"\n")) {
		t.Errorf("chunks not under format, same indentation:\n%s", added)
	}
	img.Chunks = strings.Repeat("d2", 32)
	replaced, err := SetOSImage("qemu-nvme.yaml", added, img)
	if err != nil || bytes.Count(replaced, []byte("\n")) != bytes.Count(added, []byte("\n")) || !bytes.Contains(replaced, []byte("chunks: "+img.Chunks)) {
		t.Fatalf("replace: %v\n%s", err, replaced)
	}
	img.Chunks = ""
	removed, err := SetOSImage("qemu-nvme.yaml", replaced, img)
	if err != nil || bytes.Contains(removed, []byte("chunks:")) || bytes.Count(removed, []byte("\n")) != bytes.Count(orig, []byte("\n")) {
		t.Fatalf("remove: %v\n%s", err, removed)
	}
	bad := bytes.Replace(added, []byte("chunks: "+strings.Repeat("c1", 32)), []byte("chunks: xyz"), 1)
	if _, err := ParseSKU("qemu-nvme.yaml", bad); err == nil || !strings.Contains(err.Error(), "spec.os.image.chunks") {
		t.Errorf("bad chunks: %v", err)
	}
}

// A SKU whose image names a url (hgx-b200's) gets the imported image
// without it: the artifact store serves the new image, and a url naming
// the old one would outlive it.
func TestSetOSImageDropsURL(t *testing.T) {
	orig, err := os.ReadFile("examples/hgx-b200.yaml")
	if err != nil {
		t.Fatal(err)
	}
	img := Artifact{SHA256: strings.Repeat("0f", 32), Size: 11600000, Format: ImageRawZstd}
	got, err := SetOSImage("hgx-b200.yaml", orig, img)
	if err != nil {
		t.Fatal(err)
	}
	sku, err := ParseSKU("hgx-b200.yaml", got)
	if err != nil || sku.Spec.OS.Image.URL != "" || sku.Spec.OS.Image.SHA256 != img.SHA256 {
		t.Fatalf("image = %+v, %v", sku.Spec.OS.Image, err)
	}
	if n := bytes.Count(orig, []byte("\n")) - bytes.Count(got, []byte("\n")); n != 1 {
		t.Errorf("%d lines removed, want the url line alone", n)
	}
	img.URL = "https://mirror.example/os.raw.zst"
	withURL, err := SetOSImage("hgx-b200.yaml", got, img)
	if err != nil || !bytes.Contains(withURL, []byte("      url: "+img.URL+"\n")) {
		t.Fatalf("url added: %v\n%s", err, withURL)
	}
}
