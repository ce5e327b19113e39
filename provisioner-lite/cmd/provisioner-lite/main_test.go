package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/coordinator"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testConfig is a coordinator on loopback with state in state, the example
// manifests and no image.
func testConfig(state string) coordinator.Config {
	c := coordinator.DefaultConfig()
	c.StateDir, c.ManifestDir, c.ImageDir = state, "../../../manifests/examples", filepath.Join(state, "no-image")
	c.HTTPListen, c.GRPCListen, c.Advertise, c.MetricsListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1", ""
	c.Conns.HTTPConns, c.Conns.GRPCConns = 16, 16
	return c
}

// run is what main does with c once its flags are parsed: New and Serve.
func run(ctx context.Context, log *slog.Logger, c coordinator.Config) error {
	c.Log = log
	co, err := coordinator.New(c)
	if err != nil {
		return err
	}
	return co.Serve(ctx)
}

// The command's flags fill the library's Config: with none given it is
// DefaultConfig exactly, and each flag lands in its field.
func TestFlagsFillLibraryConfig(t *testing.T) {
	parse := func(args ...string) coordinator.Config {
		t.Helper()
		c := coordinator.DefaultConfig()
		var imports, tlsNames, webhooks multiFlag
		fs := flag.NewFlagSet("provisioner-lite", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		registerFlags(fs, &c, &imports, &tlsNames, &webhooks)
		if err := fs.Parse(args); err != nil {
			t.Fatalf("parse %q: %v", args, err)
		}
		return c
	}
	if got, want := parse(), coordinator.DefaultConfig(); !reflect.DeepEqual(got, want) {
		t.Errorf("no flags: %+v\nwant the library's defaults %+v", got, want)
	}
	c := parse("--state-dir", "/srv/cure", "--claim-settle", "45s", "--max-runs", "7", "--http-listen", "fd:3")
	if c.StateDir != "/srv/cure" || c.ClaimSettle != 45*time.Second || c.MaxRuns != 7 || c.HTTPListen != "fd:3" {
		t.Errorf("flags not in their fields: state %q settle %s max-runs %d http %q", c.StateDir, c.ClaimSettle, c.MaxRuns, c.HTTPListen)
	}
	// What main refuses with exit code 2, New refuses before opening anything.
	bad := testConfig(t.TempDir())
	bad.ClaimSettle = 0
	if err := run(context.Background(), quiet(), bad); err == nil || !strings.Contains(err.Error(), "--claim-settle") {
		t.Errorf("a zero --claim-settle: %v, want a refusal naming the flag", err)
	}
}
