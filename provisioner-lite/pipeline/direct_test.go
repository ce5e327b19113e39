package pipeline_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/catalog"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/qemu-test/vbmc"
)

func TestAuditDirectReportsDriftChangesNothing(t *testing.T) {
	f := newFixture(t, allDrift(t))
	got := f.eng.AuditDirect(context.Background(), []string{"node1"}, "")
	if len(got) != 1 || got[0].GetError() != "" {
		t.Fatalf("audit = %+v", got)
	}
	status := map[string]curev1.VerdictStatus{}
	for _, v := range got[0].GetVerdicts() {
		status[v.GetComponent()+" "+v.GetCheck()] = v.GetStatus()
	}
	for _, k := range []string{"bmc firmware", "bios firmware", "hgx/HGX_FW_GPU_SXM_1 firmware", "hgx/HGX_FW_GPU_SXM_8 firmware", "bios settings"} {
		if status[k] != curev1.VerdictStatus_DRIFT {
			t.Errorf("%s = %v, want DRIFT (all: %v)", k, status[k], status)
		}
	}
	if len(status) != 11 { // bmc, bios, 8 GPUs, bios settings: nothing unpinned
		t.Errorf("%d verdicts, want 11: %v", len(status), status)
	}
	if f.bmc.Flashes("BMC") != 0 || len(f.bmc.History()) != 0 || len(f.bmc.StagedBiosAttributes()) != 0 {
		t.Error("direct audit changed the node")
	}
	if r, err := f.st.LatestRun(context.Background(), "node1"); err == nil {
		t.Errorf("direct audit created run %s", r.ID)
	}
	if _, err := f.eng.Start(context.Background(), "node1", modes.Audit, "", false); err != nil {
		t.Fatalf("a direct audit must not block a later run: %v", err)
	}
	got = f.eng.AuditDirect(context.Background(), []string{"nope"}, "")
	if got[0].GetError() == "" {
		t.Error("unknown node audited without error")
	}
}

// BenchmarkAuditDirect measures the direct audit of nodes against virtual
// BMCs on loopback: one node alone, and a rack of 40 audited at once.
func BenchmarkAuditDirect(b *testing.B) {
	for _, nodes := range []int{1, 40} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			dir := b.TempDir()
			st, err := store.Open(filepath.Join(dir, "cure.db"), store.WithStateKey(make([]byte, 32)))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			sku, err := manifests.LoadSKU("../../manifests/examples/hgx-b200.yaml")
			if err != nil {
				b.Fatal(err)
			}
			raw, _ := manifests.Marshal(sku)
			writeFile(b, filepath.Join(dir, "manifests", "hgx-b200.yaml"), raw)
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			var ids []string
			for i := 0; i < nodes; i++ {
				bm, err := vbmc.New(vbmc.Config{Name: fmt.Sprint(i), Logger: log}, vbmc.NewFakeMachine())
				if err != nil {
					b.Fatal(err)
				}
				srv := httptest.NewServer(bm.Handler())
				defer srv.Close()
				id := fmt.Sprintf("n%03d", i)
				ids = append(ids, id)
				if err := st.UpsertNode(context.Background(), store.Node{ID: id, BMCURL: srv.URL, BMCUser: "admin", BMCPassword: "password", SKU: "hgx-b200", MACs: []string{fmt.Sprintf("52:54:00:00:01:%02x", i)}}); err != nil {
					b.Fatal(err)
				}
			}
			eng := pipeline.New(context.Background(), pipeline.Config{Store: st, Hub: sessions.NewHub(), Log: log,
				ConnectBMC: func(ctx context.Context, n store.Node) (pipeline.BMC, error) {
					return redfish.Connect(ctx, redfish.Endpoint{URL: n.BMCURL, Username: n.BMCUser, Password: n.BMCPassword, Insecure: true /* httptest BMC over plain HTTP */}, redfish.Options{Timeout: 10 * time.Second, Logger: log})
				},
				Manifests: &catalog.Catalog{Dir: filepath.Join(dir, "manifests")}})
			b.ResetTimer()
			var worst time.Duration
			for i := 0; i < b.N; i++ {
				for _, na := range eng.AuditDirect(context.Background(), ids, "") {
					if na.GetError() != "" {
						b.Fatal(na.GetError())
					}
					if d := time.Duration(na.GetDurationMs()) * time.Millisecond; d > worst {
						worst = d
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/rack")
			b.ReportMetric(float64(worst.Milliseconds()), "worst-node-ms")
		})
	}
}

func writeFile(tb testing.TB, p string, b []byte) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		tb.Fatal(err)
	}
}
