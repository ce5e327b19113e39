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

// --log-format json is slog's JSON handler; another format is a usage
// error of the coordinator and of a subcommand alike, before anything runs.
func TestLogFormat(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(&buf, "json", nil)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello", "node", "n1")
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil || m["msg"] != "hello" || m["node"] != "n1" {
		t.Errorf("json log %q: %v", buf.String(), err)
	}
	dir := t.TempDir()
	defer func(d string) { defaultConfigFile = d }(defaultConfigFile)
	defaultConfigFile = filepath.Join(t.TempDir(), "absent.yaml")
	for _, args := range [][]string{{"--log-format", "xml"}, {"-log-format=xml", "--state-dir", filepath.Join(dir, "s")},
		{"init", "--state-dir", filepath.Join(dir, "s"), "--log-format", "xml"}} {
		var out, errOut bytes.Buffer
		if rc := execute(args, &out, &errOut); rc != 2 || !bytes.Contains(errOut.Bytes(), []byte("xml")) {
			t.Errorf("%q: rc %d %s", args, rc, errOut.String())
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a bad --log-format created %v", entries)
	}
}
