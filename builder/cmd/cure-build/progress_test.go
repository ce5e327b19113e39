package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/cure-oss/cure/builder"
)

func TestStepBar(t *testing.T) {
	var out bytes.Buffer
	step, done := newStepBar(&out, len(builder.Steps))
	for _, s := range builder.Steps {
		step(s)
	}
	if !strings.Contains(out.String(), builder.StepLZ4) || !strings.Contains(out.String(), "4/5") {
		t.Errorf("bar output lacks the last step or its count:\n%q", out.String())
	}
	done()
	// Not a terminal: no bar, a no-op end.
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if step, done := stepBar(f); step != nil {
		t.Error("a bar on a file that is not a terminal")
	} else {
		done()
	}
}
