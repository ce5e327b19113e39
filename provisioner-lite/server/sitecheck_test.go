package server_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/bootserver"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/siteprog"
	"github.com/cure-oss/cure/tools/checks/suite"
	"github.com/cure-oss/cure/tools/testenv"
	"google.golang.org/grpc/codes"
)

// TestSiteCheckVerdictsAttributedToSession: site programs imported into
// the coordinator's artifact store (as `provisioner-lite artifacts add`
// does) are served by its boot server, run sandboxed as a node runs them,
// and their verdicts sent over node C's real session (a diagnostic run):
// they land in C's run, with their measurements, and nowhere else. The
// program that tried to name node B's run in its output is one ERROR in
// C's run; the names
// it wrote reach no store row. A runner that put B's run on the event
// itself is refused by the coordinator.
func TestSiteCheckVerdictsAttributedToSession(t *testing.T) {
	testenv.RequireRoot(t, "site programs are sandboxed with namespaces and another uid")
	h := newHostile(t)
	// Node C runs a diagnostic (where a suite runs); B's run is the one a
	// program would like to write into.
	nodeC := testNode{"nodeC", "52:54:00:cc:00:03", "SER-C", "runC"}
	ctx := context.Background()
	if err := h.st.UpsertNode(ctx, store.Node{ID: nodeC.id, BMCURL: "https://192.0.2.3", BMCUser: "admin", BMCPassword: "pw", MACs: []string{nodeC.mac}, SystemSerial: nodeC.serial}); err != nil {
		t.Fatal(err)
	}
	if err := h.st.CreateRun(ctx, store.Run{ID: nodeC.run, NodeID: nodeC.id, Mode: modes.Diagnostic, Manifest: "site", Status: curev1.RunStatus_RUN_RUNNING, Phase: modes.WaitForCURE,
		StartedAt: time.Now(), Pipeline: store.PipelineState{Boot: store.BootCURE, CUREWindow: "w1"}}); err != nil {
		t.Fatal(err)
	}
	pin := func(src string) string {
		f := filepath.Join(t.TempDir(), "program")
		if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		sum, size, err := bootserver.ImportArtifact(h.artifacts, f)
		if err != nil {
			t.Fatal(err)
		}
		return "{sha256: " + sum + ", size: " + strconv.FormatInt(size, 10) + ", description: a site check}"
	}
	doc := `apiVersion: cure.dev/v1
kind: ValidationSuite
metadata: {name: site}
spec:
  checks:
    - name: bmc-health
      type: site
      program: ` + pin("#!/bin/sh\n"+
		`echo '{"component":"bmc/sel","status":"PASS","observed":"0 critical"}'`+"\n"+
		`echo '{"component":"bmc/fru","status":"FAIL","observed":"2 missing","measurements":[{"metric":"fruMissing","value":2,"unit":"records"}]}'`+"\n") + `
    - name: other-run
      type: site
      program: ` + pin("#!/bin/sh\n"+
		`echo '{"component":"disk/nvme0n1","status":"PASS","detail":"wiped","run_id":"`+nodeB.run+`","node":"`+nodeB.id+`"}'`+"\n") + "\n"
	s, err := manifests.ParseSuite("site.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}

	stream, cancel := h.session(helloOpts{token: h.fetchToken(nodeC.mac), boot: "bootC", node: nodeC})
	defer cancel()
	seq := uint64(0)
	var sendErr error
	// As the runner does: programs from the coordinator's artifact
	// server by sha256, each verdict an event naming no run (the session's).
	env := suite.Env{Site: func(ctx context.Context, p siteprog.Program) ([]checks.Verdict, error) {
		p.URL = h.httpURL + "/artifacts/sha256/" + p.Want.SHA256
		return siteprog.Runner{KillGrace: 100 * time.Millisecond}.Run(ctx, p)
	}}
	_, err = suite.Run(context.Background(), s, env, checks.Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), OnVerdict: func(v checks.Verdict) {
		seq++
		var ms []*curev1.Measurement
		for _, m := range v.Measurements {
			ms = append(ms, &curev1.Measurement{Metric: m.Metric, Value: m.Value, Unit: m.Unit})
		}
		ev := &curev1.Event{Seq: seq, Phase: string(modes.Validate), TimeUnixMs: time.Now().UnixMilli(), Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{
			Component: v.Component, Check: v.Check, Status: curev1.VerdictStatus(curev1.VerdictStatus_value[string(v.Status)]),
			Observed: v.Observed, Expected: v.Expected, Message: v.Message, Measurements: ms}}}
		if err := send(stream, ev); err != nil && sendErr == nil {
			sendErr = err
		}
	}})
	if err != nil || sendErr != nil {
		t.Fatalf("suite %v, send %v", err, sendErr)
	}

	vs, err := h.st.Verdicts(ctx, nodeC.run)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, v := range vs {
		got[v.Check+" "+v.Component] = runstate.VerdictName(v.Status)
		if strings.Contains(v.Message, nodeB.run) || strings.Contains(v.Message, nodeB.id) || strings.HasPrefix(v.Component, "disk/") {
			t.Errorf("the refused program's words were stored: %+v", v)
		}
	}
	want := map[string]string{"bmc-health bmc/sel": "PASS", "bmc-health bmc/fru": "FAIL", "other-run site": "ERROR"}
	if len(got) != len(want) {
		t.Errorf("run C verdicts %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("run C %s: %q, want %q", k, got[k], w)
		}
	}
	for _, v := range vs {
		if v.Check == "other-run" && !strings.Contains(v.Message, `unknown field "run_id"`) {
			t.Errorf("the refusal does not say why: %q", v.Message)
		}
	}
	ms, err := h.st.RunMeasurements(ctx, nodeC.run)
	if err != nil || len(ms) != 1 || ms[0].Component != "bmc/fru" || ms[0].NodeID != nodeC.id || ms[0].Metric != "fruMissing" || ms[0].Unit != "records" {
		t.Errorf("run C measurements %+v %v", ms, err)
	}
	if vs, _ := h.st.Verdicts(ctx, nodeB.run); len(vs) != 0 {
		t.Fatalf("run B holds verdicts: %+v", vs)
	}
	if evs := h.runnerEvents(nodeB.run); len(evs) != 0 {
		t.Fatalf("run B holds runner events: %+v", evs)
	}

	// The event itself naming B's run: the coordinator refuses it.
	seq++
	ev := &curev1.Event{Seq: seq, RunId: nodeB.run, Phase: string(modes.Validate), TimeUnixMs: time.Now().UnixMilli(), Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{
		Component: "disk/nvme0n1", Check: "other-run", Status: curev1.VerdictStatus_PASS}}}
	if err := send(stream, ev); codeOf(err) != codes.PermissionDenied {
		t.Fatalf("a verdict event naming run B: %v, want PermissionDenied", err)
	}
	if vs, _ := h.st.Verdicts(ctx, nodeB.run); len(vs) != 0 {
		t.Fatalf("run B holds verdicts: %+v", vs)
	}
}
