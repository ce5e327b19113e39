package sitecheck

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/manifests/schema"
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

// A mistake both the loader and the JSON Schema see is reported once,
// in the loader's words; the schema did see it.
func TestSchemaProblemsOncePerPlace(t *testing.T) {
	dir := t.TempDir()
	good, err := os.ReadFile("../../manifests/examples/qemu-nvme.yaml")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "qemu-nvme.yaml"), good, 0o644)
	bad := "apiVersion: cure.dev/v1\nkind: SKU\nmetadata:\n  name: bad\nspec:\n  wipe:\n    policy: shred\n    polcy: format\n  hardware:\n    gpus:\n      count: eight\n"
	badPath := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badPath, []byte(bad), 0o644)
	nodesPath := filepath.Join(dir, "nodes.yaml")
	os.WriteFile(nodesPath, []byte("nodes:\n  - id: n1\n    rack: r1\n    macs: [\"52:54:00:00:00:01\"]\n    bmc: {url: https://10.0.0.1, password: pw}\n"), 0o644)

	r := Site(dir, nodesPath)
	for _, c := range []struct {
		file  string
		lines []int
	}{{badPath, []int{7, 8, 11}}, {nodesPath, []int{3, 5}}} {
		var sp []manifests.FieldError
		data, _ := os.ReadFile(c.file)
		if c.file == nodesPath {
			sp, err = schema.ValidateNodes(c.file, data)
		} else {
			sp, err = schema.ValidateManifest(c.file, data)
		}
		if err != nil || len(sp) != len(c.lines) {
			t.Fatalf("%s: the schema found %v (%v), want problems on lines %v", c.file, sp, err, c.lines)
		}
		for _, line := range c.lines {
			at := fmt.Sprintf("%s:%d:", c.file, line)
			n := 0
			for _, p := range r.Problems {
				if strings.HasPrefix(p, at) {
					n++
					if strings.Contains(p, "(schema ") {
						t.Errorf("%s: the schema's message won over the loader's", p)
					}
				}
			}
			if n != 1 {
				t.Errorf("%s: %d problems, want 1: %q", at, n, r.Problems)
			}
		}
	}
}

// A schema problem the loader did not report is kept (the two disagree:
// the generator needs fixing); one on a line or field the loader
// reported is dropped; a file the schema could not read counts only when
// the loader accepted it.
func TestAddChecked(t *testing.T) {
	r := &Result{}
	loader := &manifests.ValidationError{Errors: []manifests.FieldError{{File: "f.yaml", Line: 3, Field: "spec.a", Msg: "bad"}}}
	r.addChecked("f.yaml", loader, []manifests.FieldError{
		{File: "f.yaml", Line: 3, Field: "spec.x", Msg: "same line (schema s)"},
		{File: "f.yaml", Line: 2, Field: "spec.a", Msg: "same field (schema s)"},
		{File: "f.yaml", Line: 9, Field: "spec.b", Msg: "only here (schema s)"},
	}, errors.New("ignored"))
	want := []string{"f.yaml:3: spec.a: bad", "f.yaml:9: spec.b: only here (schema s)"}
	if !slices.Equal(r.Problems, want) {
		t.Errorf("problems %q, want %q", r.Problems, want)
	}
	r = &Result{}
	r.addChecked("n.yaml", errors.New("n.yaml:4:7: nodes[0].id: required"), []manifests.FieldError{{File: "n.yaml", Line: 4, Field: "nodes[0].id"}}, nil)
	r.addChecked("g.yaml", nil, nil, errors.New("too deep"))
	if want := []string{"n.yaml:4:7: nodes[0].id: required", "g.yaml: schema check: too deep"}; !slices.Equal(r.Problems, want) {
		t.Errorf("problems %q, want %q", r.Problems, want)
	}
}
