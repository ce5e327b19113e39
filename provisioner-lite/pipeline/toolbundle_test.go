package pipeline

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// TestToolBundleRef: a validate assignment carries the bundle when its
// suite runs a bundle program (URL content-addressed under the base URL),
// not otherwise; a suite needing what this coordinator cannot serve gets a
// WARN on its timeline saying what will ERROR.
func TestToolBundleRef(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(filepath.Join(t.TempDir(), "cure.db"), store.WithStateKey(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.UpsertNode(ctx, store.Node{ID: "n1", BMCURL: "https://bmc", BMCUser: "u", BMCPassword: "p", SKU: "qemu-nvme", MACs: []string{"52:54:00:00:00:01"}}); err != nil {
		t.Fatal(err)
	}
	run := store.Run{ID: "r1", NodeID: "n1", Mode: "diagnostic", Manifest: "measure", Status: curev1.RunStatus_RUN_RUNNING, StartedAt: time.Now().UTC()}
	if err := st.CreateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	suite := func(types ...string) *manifests.Document {
		s := &manifests.ValidationSuite{Metadata: manifests.Metadata{Name: "measure"}}
		for _, ty := range types {
			s.Spec.Checks = append(s.Spec.Checks, manifests.Check{Name: ty, Type: ty})
		}
		return &manifests.Document{Kind: manifests.KindValidationSuite, Suite: s}
	}
	sum := strings.Repeat("c0", 32)
	// Not New: no run is driven, only the assignment's part is asked for.
	e := &batchCtl{&core{cfg: Config{Store: st, Log: slog.New(slog.DiscardHandler), BaseURL: "http://10.0.2.2:8080/",
		ToolBundle: &ToolBundle{SHA256: sum, Size: 33770948, Tools: []string{"fio", "stress-ng"}}}}}
	validate := []modes.PhaseName{modes.Hardware, modes.Validate}

	ref := e.toolBundleRef(ctx, &run, validate, suite(manifests.CheckStorageRandom, manifests.CheckMemory))
	if ref.GetUrl() != "http://10.0.2.2:8080/artifacts/sha256/"+sum || ref.GetSha256() != sum || ref.GetSize() != 33770948 || strings.Join(ref.GetTools(), ",") != "fio,stress-ng" {
		t.Errorf("ref %v", ref)
	}
	if ref := e.toolBundleRef(ctx, &run, validate, suite(manifests.CheckMemory, manifests.CheckCPU)); ref != nil {
		t.Errorf("a suite of built-in checks got the bundle: %v", ref)
	}
	if ref := e.toolBundleRef(ctx, &run, []modes.PhaseName{modes.Hardware}, suite(manifests.CheckStorageRandom)); ref != nil {
		t.Errorf("an assignment without validate got the bundle: %v", ref)
	}
	if ref := e.toolBundleRef(ctx, &run, validate, suite(manifests.CheckNICThroughput, manifests.CheckCPUThroughput)); ref == nil {
		t.Error("a suite the bundle half serves got no bundle")
	}
	e.cfg.ToolBundle = nil
	if ref := e.toolBundleRef(ctx, &run, validate, suite(manifests.CheckStorageRandom)); ref != nil {
		t.Errorf("no bundle configured, yet %v", ref)
	}
	evs, err := st.Events(ctx, "r1", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var warns []string
	for _, ev := range evs {
		if ev.Status == "WARN" {
			warns = append(warns, ev.Message)
		}
	}
	if len(warns) != 2 || !strings.Contains(warns[0], "runs iperf3, which the tool bundle c0c0c0c0c0c0 lacks (it has fio, stress-ng)") ||
		!strings.Contains(warns[1], "runs fio from the tool bundle, and this coordinator serves none (start it with --tool-bundle)") {
		t.Errorf("warnings %q", warns)
	}
}
