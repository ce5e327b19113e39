package checks

import (
	"strings"
	"testing"
)

func TestRunTool(t *testing.T) {
	cmd, err := HostTools(t.Context(), "sh", "-c", "echo out; echo first >&2; echo last >&2; exit 3")
	if err != nil {
		t.Skip(err)
	}
	out, errOut, err := RunTool(cmd)
	if string(out) != "out\n" || string(errOut) != "first\nlast\n" {
		t.Errorf("stdout %q stderr %q", out, errOut)
	}
	if err == nil || !strings.Contains(err.Error(), "exit status 3: first | last") {
		t.Errorf("err %v, want the exit status and stderr", err)
	}
	if _, err := HostTools(t.Context(), "no-such-tool-here"); err == nil {
		t.Error("a missing program was found")
	}
}
