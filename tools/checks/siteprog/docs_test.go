package siteprog_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/siteprog"
)

// docExample is the fenced code block of lang under heading in
// docs/VALIDATION.md.
func docExample(t *testing.T, heading, lang string) string {
	t.Helper()
	b, err := os.ReadFile("../../../docs/VALIDATION.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/VALIDATION.md has no %q", heading)
	}
	_, code, ok := strings.Cut(after, "```"+lang+"\n")
	if !ok {
		t.Fatalf("no %s block under %q", lang, heading)
	}
	code, _, _ = strings.Cut(code, "```\n")
	return code
}

// TestDocExamples runs the example programs of "Writing a site check" in
// the sandbox: what the page shows works as it says.
func TestDocExamples(t *testing.T) {
	needRoot(t)
	a := newArtifacts(t)
	r := siteprog.Runner{Log: quiet(), KillGrace: 100 * time.Millisecond}
	t.Run("shell", func(t *testing.T) {
		p := a.program("nic-carrier", docExample(t, "### Example: shell", "sh"), time.Minute)
		p.Params = map[string]any{"ports": []any{"lo", "cure-none0"}}
		vs, err := r.Run(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]checks.Status{}
		for _, v := range vs {
			got[v.Component] = v.Status
		}
		if len(vs) != 2 || got["nic/lo"] != checks.Pass || got["nic/cure-none0"] != checks.Fail {
			t.Fatalf("verdicts %+v", vs)
		}
	})
	t.Run("python", func(t *testing.T) {
		if _, err := os.Stat("/usr/bin/python3"); err != nil {
			t.Skip("no /usr/bin/python3 on this machine")
		}
		p := a.program("mem-total", docExample(t, "### Example: Python", "python"), time.Minute)
		p.Params = map[string]any{"minGiB": 0.1}
		vs, err := r.Run(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		if len(vs) != 1 || vs[0].Component != "memory" || vs[0].Status != checks.Pass || len(vs[0].Measurements) != 1 ||
			vs[0].Measurements[0].Metric != "memTotalGiB" || vs[0].Measurements[0].Unit != "GiB" || vs[0].Measurements[0].Value < 0.1 {
			t.Fatalf("verdicts %+v", vs)
		}
	})
}
