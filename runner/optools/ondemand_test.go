package optools_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cure-oss/cure/runner/optools"
)

// TestOnDemandFetchesOnFirstUse: the runner's mstflint, absent from the
// image (PATH here holds nothing), is fetched from a server serving the
// real bundle on its first run, verified, and run through the bundle's
// loader and libraries; the next run does not fetch again; a fetch that
// failed (the server answered 503) is tried again at the next use.
func TestOnDemandFetchesOnFirstUse(t *testing.T) {
	archive, pin := bundleOf(t, "mstflint")
	body, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	var requests, failFirst atomic.Int32
	failFirst.Store(1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if failFirst.Swap(0) == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		w.Write(body)
	}))
	defer srv.Close()
	t.Setenv("PATH", t.TempDir())
	dir := filepath.Join(t.TempDir(), "cure-tools")
	od := &optools.OnDemand{Config: optools.Config{Pin: pin, PinFile: "toolbundle.json", BaseURL: srv.URL, Dir: dir, Self: "/bbin/cure-tools"}}

	// Available (LookPath) answers from the pin without a download.
	if p, err := od.LookPath("mstflint"); err != nil || p != filepath.Join(dir, "bin", "mstflint") {
		t.Fatalf("LookPath(mstflint) = %q, %v", p, err)
	}
	if _, err := od.LookPath("mstfwreset"); err == nil || !strings.Contains(err.Error(), "neither in this image nor in the tool bundle") {
		t.Fatalf("LookPath(mstfwreset) = %v, want not found", err)
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("LookPath downloaded (%d requests)", n)
	}

	ctx := context.Background()
	if _, _, err := od.Run(ctx, "mstflint", "--version"); err == nil || !strings.Contains(err.Error(), "fetching mstflint from the tool bundle") {
		t.Fatalf("first run with the server failing: %v", err)
	}
	for i := 0; i < 2; i++ {
		out, errb, err := od.Run(ctx, "mstflint", "--version")
		if err != nil {
			t.Fatalf("run %d: %v: %s", i, err, errb)
		}
		if !strings.Contains(string(out), "mstflint") || !strings.Contains(string(out), "4.21") {
			t.Fatalf("mstflint --version said %q", out)
		}
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("%d requests, want 2 (the failed one and one fetch)", n)
	}
	argv, err := od.Command(ctx, "mstflint", "-d", "17:00.0", "q")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(argv[0], filepath.Join(dir, "mstflint")) || !strings.Contains(strings.Join(argv, " "), "--library-path") {
		t.Errorf("argv %v: want the bundle's loader and libraries", argv)
	}

	// An image without a pin says so instead of fetching.
	bare := &optools.OnDemand{Config: optools.Config{PinFile: "/etc/cure/toolbundle.json", BaseURL: srv.URL, Dir: dir}}
	if _, _, err := bare.Run(ctx, "mstflint", "--version"); err == nil || !strings.Contains(err.Error(), "pins no tool bundle") {
		t.Errorf("no pin: %v", err)
	}
}
