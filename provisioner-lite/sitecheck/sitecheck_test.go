package sitecheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The shipped examples are a clean site.
func TestExamplesAreClean(t *testing.T) {
	r := Site("../../manifests/examples", "")
	if !r.OK() || len(r.SKUs) < 2 || len(r.Suites) < 4 {
		t.Fatalf("examples: %+v", r)
	}
}

func TestKnownSKU(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "suites"), 0o755)
	raw, err := os.ReadFile("../../manifests/examples/qemu-nvme.yaml")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "qemu-nvme.yaml"), raw, 0o644)
	suite, _ := os.ReadFile("../../manifests/examples/suites/rma-quick.yaml")
	os.WriteFile(filepath.Join(dir, "suites", "rma-quick.yaml"), suite, 0o644)
	os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("apiVersion: cure.dev/v1\nkind: SKU\n"), 0o644)
	known := KnownSKU(dir)
	for name, want := range map[string]string{
		"qemu-nvme": "",
		"hgx-h999":  `unknown SKU "hgx-h999": no hgx-h999.yaml in ` + dir + " (there: broken, qemu-nvme)",
		"../x":      `unknown SKU "../x"`,
		"rma-quick": `"rma-quick" is a ValidationSuite, not a SKU`,
		"broken":    `SKU "broken": its manifest does not validate: ` + filepath.Join(dir, "broken.yaml"),
	} {
		err := known(name)
		if (want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
	// The catalog is read at every call: a SKU added later is known.
	if err := known("late"); err == nil {
		t.Fatal("late known before it exists")
	}
	os.WriteFile(filepath.Join(dir, "late.yaml"), []byte(strings.Replace(string(raw), "name: qemu-nvme", "name: late", 1)), 0o644)
	if err := known("late"); err != nil {
		t.Fatalf("late after it was written: %v", err)
	}
}

func TestSiteWithoutSKUsOrDirectory(t *testing.T) {
	r := Site(t.TempDir(), "")
	if r.OK() || !strings.Contains(r.Problems[0], "no SKU manifest") {
		t.Fatalf("empty dir: %v", r.Problems)
	}
	r = Site(filepath.Join(t.TempDir(), "nope"), "")
	if r.OK() || !strings.Contains(r.Problems[0], "manifests directory") {
		t.Fatalf("missing dir: %v", r.Problems)
	}
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "1 problem(s)") {
		t.Fatalf("Err: %v", err)
	}
}

// A SKU whose admission names a suite the site lacks is refused where it
// is written: no node of it could ever enter service.
func TestAdmissionSuiteMustExist(t *testing.T) {
	dir := t.TempDir()
	raw, err := os.ReadFile("../../manifests/examples/hgx-b200.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hgx-b200.yaml"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	r := Site(dir, "")
	want := `hgx-b200.yaml:`
	if r.OK() || !strings.Contains(strings.Join(r.Problems, "\n"), want) || !strings.Contains(strings.Join(r.Problems, "\n"), `spec.admission.acceptance.suite: "burnin-24h-hgx" is not a valid ValidationSuite`) {
		t.Errorf("problems %q: want the missing acceptance suite named with file and line", r.Problems)
	}
}
