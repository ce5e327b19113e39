package suite

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/siteprog"
)

// TestSiteCheckPlan: a site check hands Env.Site its pin, its params and
// its time limit (the program's timeout, else the check's or its stage's
// duration, else the default); thresholds are refused (the program judges
// itself), and so are params that cannot be environment variables.
func TestSiteCheckPlan(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	prog := "program: {sha256: " + sum + ", size: 10, description: d"
	s, err := manifests.ParseSuite("site.yaml", []byte(`apiVersion: cure.dev/v1
kind: ValidationSuite
metadata: {name: site}
spec:
  stages:
    - name: soak
      duration: 10m
      checks:
        - {name: in-stage, type: site, params: {port: 623, ratio: 0.5}, `+prog+`}}
        - {name: own-timeout, type: site, `+prog+`, timeout: 30s}}
    - name: once
      checks:
        - {name: one-shot, type: site, `+prog+`, url: "http://mirror.example/p"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]siteprog.Program{}
	var mu sync.Mutex // a stage's checks run at once
	env := Env{Site: func(_ context.Context, p siteprog.Program) ([]checks.Verdict, error) {
		mu.Lock()
		defer mu.Unlock()
		got[p.Check] = p
		return []checks.Verdict{{Component: "x/0", Status: checks.Pass}}, nil
	}}
	if _, err := Run(context.Background(), s, env, checks.Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}); err != nil {
		t.Fatal(err)
	}
	if p := got["in-stage"]; p.Limit != 10*time.Minute || p.Want.SHA256 != sum || p.Want.Size != 10 || p.URL != "" ||
		!reflect.DeepEqual(p.Params, map[string]any{"port": int64(623), "ratio": 0.5}) || p.Description != "d" {
		t.Errorf("in-stage %+v", p)
	}
	if p := got["own-timeout"]; p.Limit != 30*time.Second {
		t.Errorf("own-timeout limit %s", p.Limit)
	}
	if p := got["one-shot"]; p.Limit != time.Duration(manifests.DefaultSiteTimeout) || p.URL != "http://mirror.example/p" {
		t.Errorf("one-shot %+v", p)
	}

	bad, err := manifests.ParseSuite("bad.yaml", []byte(`apiVersion: cure.dev/v1
kind: ValidationSuite
metadata: {name: bad}
spec:
  checks:
    - {name: bars, type: site, thresholds: {selCritical: {max: 0}}, `+prog+`}}
    - {name: dashes, type: site, params: {max-entries: 3}, `+prog+`}}
`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Build(bad, Env{})
	for _, want := range []string{
		"spec.checks[0] (bars, type site): thresholds.selCritical: unknown metric for this check type",
		`spec.checks[1] (dashes, type site): params: site check dashes: param "max-entries" is not a parameter name`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}

	// Without a site runner (Env.Site nil) the check is an ERROR saying so.
	cs, err := Build(s, Env{})
	if err != nil {
		t.Fatal(err)
	}
	vs := checks.RunOne(context.Background(), cs[0], nil)
	if len(vs) != 1 || vs[0].Status != checks.Error || !strings.Contains(vs[0].Message, "this runner cannot run site programs") {
		t.Errorf("no site runner: %+v", vs)
	}
}
