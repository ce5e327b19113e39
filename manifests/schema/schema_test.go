package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/nodes"
)

// TestManifestSchema: the committed schema files are the generated ones,
// every example validates (by the schema and by the loader), and a wrong
// field is refused by the schema with its file, line and field, where
// the loader refuses it too.
func TestManifestSchema(t *testing.T) {
	t.Run("committed", func(t *testing.T) {
		gen, err := Generate()
		if err != nil {
			t.Fatal(err)
		}
		committed := Files()
		for name, b := range gen {
			if !bytes.Equal(committed[name], b) {
				t.Errorf("%s differs from the one the Go types generate: run `go generate ./manifests/schema` and commit it", name)
			}
		}
		if len(committed) != len(gen) || len(gen) != 3 {
			t.Errorf("committed %d schema files, generated %d, want 3", len(committed), len(gen))
		}
	})
	t.Run("examples", testExamples)
	t.Run("wrong", testWrongFields)
	t.Run("nodes keys", testNodesKeys)
	t.Run("reference", testReference)
}

// testReference: docs/MANIFESTS.md lists every field of every schema
// object, and its examples validate (by the schema and the loaders).
func testReference(t *testing.T) {
	b, err := os.ReadFile("../../docs/MANIFESTS.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for name, data := range Files() {
		var s struct {
			Defs map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"$defs"`
		}
		if err := json.Unmarshal(data, &s); err != nil {
			t.Fatal(err)
		}
		for def, d := range s.Defs {
			if !strings.Contains(doc, "\n#### "+def+"\n") {
				t.Errorf("docs/MANIFESTS.md: no section for %s (%s)", def, name)
			}
			for prop := range d.Properties {
				if !strings.Contains(doc, "| `"+prop+"` |") {
					t.Errorf("docs/MANIFESTS.md: %s.%s (%s) is not described", def, prop, name)
				}
			}
		}
	}
	examples := 0
	for _, block := range strings.Split(doc, "```yaml\n")[1:] {
		y, _, _ := strings.Cut(block, "```")
		var problems []manifests.FieldError
		var err, loadErr error
		switch {
		case strings.HasPrefix(y, "apiVersion:"):
			problems, err = ValidateManifest("MANIFESTS.md", []byte(y))
			_, loadErr = manifests.Parse("MANIFESTS.md", []byte(y))
		case strings.HasPrefix(y, "nodes:"):
			t.Setenv("BMC_PW", "example")
			problems, err = ValidateNodes("MANIFESTS.md", []byte(y))
			_, loadErr = nodes.ParseYAML("MANIFESTS.md", []byte(y))
		default:
			continue
		}
		examples++
		if len(problems) > 0 || err != nil || loadErr != nil {
			t.Errorf("docs/MANIFESTS.md example:\n%s\nschema: %v %v; loader: %v", y, problems, err, loadErr)
		}
	}
	if examples < 3 {
		t.Errorf("docs/MANIFESTS.md: %d examples checked, want a SKU, a suite and a nodes file", examples)
	}
}

func testExamples(t *testing.T) {
	t.Setenv("BMC_PW", "example")
	counts := map[string]int{}
	err := filepath.WalkDir("../examples", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var problems []manifests.FieldError
		var loadErr error
		if isNodesFile(data) {
			counts["nodes"]++
			problems, err = ValidateNodes(path, data)
			_, loadErr = nodes.ParseYAML(path, data)
		} else {
			var doc *manifests.Document
			problems, err = ValidateManifest(path, data)
			doc, loadErr = manifests.Parse(path, data)
			if doc != nil {
				counts[doc.Kind]++
			}
		}
		if err != nil || len(problems) > 0 || loadErr != nil {
			t.Errorf("%s: schema: %v %v; loader: %v", path, err, problems, loadErr)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if counts[manifests.KindSKU] < 2 || counts[manifests.KindValidationSuite] < 4 || counts["nodes"] < 1 {
		t.Errorf("examples found: %v", counts)
	}
}

// isNodesFile: a nodes file's root has a nodes list or a node's id.
func isNodesFile(data []byte) bool {
	var v map[string]any
	if yaml.Unmarshal(data, &v) != nil {
		return false
	}
	_, list := v["nodes"]
	_, one := v["id"]
	return list || one
}

const skuHead = "apiVersion: cure.dev/v1\nkind: SKU\nmetadata:\n  name: s\nspec:\n"
const suiteHead = "apiVersion: cure.dev/v1\nkind: ValidationSuite\nmetadata:\n  name: q\nspec:\n"
const nodeHead = "nodes:\n  - id: n1\n    macs: [\"52:54:00:00:00:01\"]\n    bmc:\n      url: https://10.0.0.1\n      username: admin\n      password: pw\n"

func testWrongFields(t *testing.T) {
	for _, c := range []struct {
		name, doc string
		line      int
		field     string
		msg       string
	}{
		{"unknown key", skuHead + "  wipe:\n    policy: none\n    polcy: format\n", 8, "spec.wipe.polcy", "unknown field (known fields: allowWeakerFallback, disks, policy)"},
		{"wrong type", skuHead + "  hardware:\n    gpus:\n      count: eight\n", 8, "spec.hardware.gpus.count", `expected integer, found string "eight"`},
		{"bad enum", skuHead + "  wipe:\n    policy: shred\n", 7, "spec.wipe.policy", `string "shred" is not one of none, psid-revert`},
		{"missing", skuHead + "  wipe:\n    allowWeakerFallback: true\n", 7, "spec.wipe.policy", "required field is missing"},
		{"bad duration", suiteHead + "  duration: 10 minutes\n  checks:\n    - {name: c, type: cpu}\n", 6, "spec.duration", `"10 minutes" does not match`},
		{"bad nested duration", suiteHead + "  checks:\n    - name: c\n      type: cpu\n      interval: 5\n", 9, "spec.checks[0].interval", "expected string, found int 5"},
		{"bad check type", suiteHead + "  checks:\n    - name: c\n      type: gpu-burn\n", 8, "spec.checks[0].type", "is not one of"},
		{"stage check", suiteHead + "  stages:\n    - name: s\n      checks:\n        - {name: c, type: cpu, params: {a: {b: 1}}}\n", 9, "spec.stages[0].checks[0].params.a", "expected boolean or number or string or array, found a mapping"},
		{"nodes unknown key", nodeHead + "    rack: r1\n", 8, "nodes[0].rack", "unknown field"},
		{"nodes wrong type", nodeHead + "    labels: [r1]\n", 8, "nodes[0].labels", "expected object, found a list"},
		{"nodes bmc missing", "nodes:\n  - id: n1\n    macs: [\"52:54:00:00:00:01\"]\n    bmc: {url: https://b}\n", 4, "nodes[0].bmc.username", "required field is missing"},
		{"one node", "id: n1\nmacs: []\nbmc: {url: https://b, username: u, password: p}\n", 2, "macs", "minItems"},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := strings.ReplaceAll(c.name, " ", "-") + ".yaml"
			nodesDoc := strings.HasPrefix(c.name, "nodes") || c.name == "one node"
			var problems []manifests.FieldError
			var err, loadErr error
			if nodesDoc {
				problems, err = ValidateNodes(file, []byte(c.doc))
				_, loadErr = nodes.ParseYAML(file, []byte(c.doc))
			} else {
				problems, err = ValidateManifest(file, []byte(c.doc))
				_, loadErr = manifests.Parse(file, []byte(c.doc))
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(problems) != 1 || problems[0].File != file || problems[0].Line != c.line || problems[0].Field != c.field ||
				!strings.Contains(problems[0].Msg, c.msg) || !strings.HasSuffix(problems[0].Msg, ".schema.json)") {
				t.Fatalf("schema problems %v, want one at %s:%d %s: %s", problems, file, c.line, c.field, c.msg)
			}
			// The loader refuses the same place: the schema is never
			// stricter than it.
			if want := fmt.Sprintf("%s:%d", file, c.line); loadErr == nil || !strings.Contains(loadErr.Error(), want) {
				t.Errorf("loader: %v, want a problem at %s", loadErr, want)
			}
		})
	}
}

// testNodesKeys: every field of nodes.File the schema names is one
// nodes.ParseYAML reads, and a key it does not read is refused by both.
func testNodesKeys(t *testing.T) {
	var s struct {
		Defs map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(Files()[NodesFile], &s); err != nil {
		t.Fatal(err)
	}
	node, bmc := s.Defs["FileNode"].Properties, s.Defs["FileBMC"].Properties
	if len(node) < 9 || len(bmc) < 8 {
		t.Fatalf("nodes schema: node %d fields, bmc %d", len(node), len(bmc))
	}
	for key := range node {
		doc := nodeHead + "    " + key + ": x\n"
		if _, err := nodes.ParseYAML("n.yaml", []byte(doc)); err != nil && strings.Contains(err.Error(), "unknown field") {
			t.Errorf("node field %s: the schema has it, the parser does not: %v", key, err)
		}
	}
	for key := range bmc {
		doc := strings.Replace(nodeHead, "      password: pw\n", "      password: pw\n      "+key+": x\n", 1)
		if _, err := nodes.ParseYAML("n.yaml", []byte(doc)); err != nil && strings.Contains(err.Error(), "unknown field") {
			t.Errorf("bmc field %s: the schema has it, the parser does not: %v", key, err)
		}
	}
}

// FuzzToJSON: any YAML the parser reads converts to a value JSON can
// hold, or to an error; every scalar of the value is found again, from
// its location, at a node whose conversion it is.
func FuzzToJSON(f *testing.F) {
	for _, p := range []string{"../examples/qemu-nvme.yaml", "../examples/suites/qemu-burnin.yaml", "../examples/nodes/nodes.yaml"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{"a: &x [1, 2]\nb: *x\n", "{1: a, [x]: b, a: ~, a: 2}", "- .inf\n- 0x1F\n- 123456789012345678901234567890\n- 2001-12-14\n", "x: !!binary aGk=\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var doc yaml.Node
		if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
			return
		}
		root := doc.Content[0]
		v, _, err := ToJSON("f.yaml", root)
		if err != nil {
			return
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%v does not marshal: %v", v, err)
		}
		if !json.Valid(b) {
			t.Fatalf("invalid JSON %s", b)
		}
		checkLeaves(t, root, v, nil)
	})
}

func checkLeaves(t *testing.T, root *yaml.Node, v any, loc []string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			checkLeaves(t, root, e, append(append([]string(nil), loc...), k))
		}
	case []any:
		for i, e := range x {
			checkLeaves(t, root, e, append(append([]string(nil), loc...), fmt.Sprint(i)))
		}
	default:
		n, _ := locate(root, loc)
		if n.Kind != yaml.ScalarNode || scalar(n) != v {
			t.Fatalf("location %q holds %v, its node (line %d) converts to %v", loc, v, n.Line, scalar(n))
		}
	}
}

// A document that aliases a large subtree many times is refused, not
// expanded without bound.
func TestToJSONBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(b.String()), &doc); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ToJSON("bomb.yaml", doc.Content[0]); err == nil || !strings.Contains(err.Error(), "once aliases are expanded") {
		t.Fatalf("err %v", err)
	}
	if _, err := ValidateManifest("syntax.yaml", []byte("kind: [")); err == nil {
		t.Fatal("a YAML syntax error validated")
	} else if errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
}
