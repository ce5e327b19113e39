package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// TestFleetBandsCommand: curectl fleet-bands against the real operator API
// with a viewer's certificate: the distribution and the node marked, as a
// table and as JSON.
func TestFleetBandsCommand(t *testing.T) {
	c := startCoordinator(t)
	ctx := context.Background()
	for i, v := range []float64{200, 206, 196, 41} {
		node, run := fmt.Sprintf("n%d", i+1), fmt.Sprintf("r%d", i+1)
		if err := c.st.UpsertNode(ctx, store.Node{ID: node, BMCURL: "https://192.0.2.1", SKU: "qemu-nvme", MACs: []string{fmt.Sprintf("52:54:00:00:00:%02x", i+1)}}); err != nil {
			t.Fatal(err)
		}
		if err := c.st.CreateRun(ctx, store.Run{ID: run, NodeID: node, Mode: "diagnostic", Manifest: "qemu-fleet", Status: curev1.RunStatus_RUN_RUNNING, StartedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		v := store.Verdict{RunID: run, Component: "disk/nvme0n1", Check: "disk-read", Status: curev1.VerdictStatus_PASS, Measurements: []store.Measurement{{Metric: "readMBps", Value: v, Unit: "MB/s"}}}
		if _, err := c.st.AppendRunnerEvent(ctx, store.Event{RunID: run, NodeID: node, BootID: "b", Seq: 1, Time: time.Now(), Kind: runstate.EventVerdict}, &v, store.DefaultEventLimits); err != nil {
			t.Fatal(err)
		}
	}
	viewer, err := pki.IssueOperatorCert(c.pkiDir, "viewer", pki.RoleViewer)
	if err != nil {
		t.Fatal(err)
	}
	rc, out, errOut := c.curectl(t, "fleet-bands", "--node", "n4", "--cert", viewer.CertFile, "--key", viewer.KeyFile)
	if rc != 0 {
		t.Fatalf("fleet-bands: rc %d %s", rc, errOut)
	}
	for _, want := range []string{"qemu-nvme  disk-read  readMBps  MB/s  3      3       200", "▲ n4: disk/nvme0n1 41 MB/s, percentile 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	rc, js, errOut := c.curectl(t, "fleet-bands", "--metric", "readMBps", "--window", "1h", "-o", "json")
	if rc != 0 {
		t.Fatalf("fleet-bands -o json: rc %d %s", rc, errOut)
	}
	var resp struct {
		Distributions []struct {
			Nodes  int       `json:"nodes"`
			Values []float64 `json:"values"`
		} `json:"distributions"`
		WindowMs string `json:"windowMs"`
	}
	if err := json.Unmarshal([]byte(js), &resp); err != nil || len(resp.Distributions) != 1 || resp.Distributions[0].Nodes != 4 || resp.WindowMs != "3600000" {
		t.Errorf("json %v: %s", err, js)
	}
	if rc, _, errOut := c.curectl(t, "fleet-bands", "--node", "nope"); rc != 1 || !strings.Contains(errOut, `unknown node id "nope"`) {
		t.Errorf("unknown node: rc %d %s", rc, errOut)
	}
}
