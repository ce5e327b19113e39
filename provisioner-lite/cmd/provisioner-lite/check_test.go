package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// check -o json lists each problem with its file, line, column and field,
// and keeps check's exit codes.
func TestCheckOutputStructured(t *testing.T) {
	nodes := filepath.Join(t.TempDir(), "nodes.yaml")
	os.WriteFile(nodes, []byte("nodes:\n  - id: n1\n    macs: [zz]\n    sku: qemu-nvme\n    bmc: {url: https://10.0.0.1, username: a, password: p}\n"), 0o600)
	var out, errOut bytes.Buffer
	rc := execute([]string{"check", "--manifests", "../../../manifests/examples", "--nodes", nodes, "-o", "json"}, &out, &errOut)
	var rep checkReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rc != 1 || rep.OK {
		t.Fatalf("rc %d, %v:\n%s%s", rc, err, out.String(), errOut.String())
	}
	if len(rep.Problems) != 1 || rep.Problems[0] != (problem{File: nodes, Line: 3, Column: 12, Field: "nodes[0].macs[0]", Message: rep.Problems[0].Message}) {
		t.Errorf("problems %+v", rep.Problems)
	}
	if p := parseProblem("no location here"); p != (problem{Message: "no location here"}) {
		t.Errorf("a problem without a location: %+v", p)
	}
	out.Reset()
	if rc := execute([]string{"check", "--manifests", "../../../manifests/examples", "-o", "xml"}, &out, &errOut); rc != 2 {
		t.Errorf("-o xml: rc %d, want 2", rc)
	}
}
