//go:build cgo

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNoNVMLLibraryIsExit3WithJSON(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"-lib", filepath.Join(t.TempDir(), "libnvidia-ml.so.1")}, &out, &errb)
	if code != 3 {
		t.Fatalf("exit %d, stderr %s", code, errb.String())
	}
	var r report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("stdout is not the JSON contract: %v\n%s", err, out.String())
	}
	if len(r.Verdicts) != 1 || r.Verdicts[0].Check != "nvml" || r.Verdicts[0].Status != "ERROR" ||
		!strings.Contains(r.Verdicts[0].Message, "ERROR_LIBRARY_NOT_FOUND") {
		t.Errorf("verdicts = %+v", r.Verdicts)
	}
}

func TestBadExpectationsAreExit2(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"unknown.json": `{"count": 8, "modle": "NVIDIA H100 80GB HBM3"}`,
		"invalid.json": `{"count": 8, "pcieWidth": 12}`,
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		if code := run([]string{"-expect", p}, &out, &errb); code != 2 || out.Len() != 0 {
			t.Errorf("%s: exit %d, stdout %q", name, code, out.String())
		}
		if !strings.Contains(errb.String(), name) {
			t.Errorf("%s: stderr does not name the file: %s", name, errb.String())
		}
	}
}
