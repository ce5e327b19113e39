package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"

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
