// Command cure-demo runs the whole loop on this machine: a virtual BMC and a
// QEMU node, a real provisioner-lite, and one provisioning run from power-off
// to the installed OS calling back, with the live timeline and the verdict
// table on the terminal. Its work directory is kept, so a second run
// re-provisions the same node and skips what already matches.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/curectl"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/qemu-test/harness"
)

func main() {
	out := flag.String("out", "out", "make's output directory (image, hostos, pki)")
	work := flag.String("work", "out/demo", "demo state: store, node disk, logs (kept between runs)")
	mode := flag.String("mode", "provision", "provision|audit|verify")
	verbose := flag.Bool("v", false, "also print the coordinator log")
	flag.Parse()
	m, err := modes.Parse(*mode)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cure-demo:", err)
		os.Exit(2)
	}
	os.Exit(run(*out, *work, m, *verbose))
}

func run(out, work string, mode modes.Mode, verbose bool) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var coordLog io.Writer
	if verbose {
		coordLog = os.Stderr
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "cure-demo:", err)
		return 1
	}
	t0 := time.Now()
	fmt.Printf("cure-demo: starting virtual BMC, QEMU node and provisioner-lite (work dir %s)\n", work)
	env, err := harness.Start(ctx, harness.Options{Out: out, Work: work, Logger: log, CoordinatorLog: coordLog, ToolBundle: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "cure-demo:", err)
		return 1
	}
	defer env.Close()
	n := env.Nodes[0]
	fmt.Printf("cure-demo: node %s  mac %s  bmc %s  power %s  coordinator http %s grpc %s\n", n.ID, n.MAC, n.BMCURL, n.BMC.PowerState(), env.HTTPAddr, env.GRPCAddr)
	// The BMC serves a self-signed certificate; the inventory pins it.
	fmt.Printf("cure-demo: bmc certificate %s (pinned in %s)\n", n.BMCFingerprint, filepath.Join(work, "nodes.yaml"))
	fmt.Printf("cure-demo: node console: %s   coordinator log: %s\n", n.Console, filepath.Join(work, "coordinator.log"))
	// The harness issued the "operator" certificate beside the CA, where
	// curectl looks by default, so this works from another terminal as is.
	fmt.Printf("cure-demo: from another terminal: go run ./provisioner-lite/cmd/curectl --server %s --ca %s nodes   (operator cert %s)\n\n",
		env.GRPCAddr, filepath.Join(env.StateDir, "pki", "ca.pem"), env.OperatorCert)
	runID, err := env.Provision(ctx, n.ID, mode, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cure-demo: provision:", err)
		return 1
	}
	fmt.Printf("curectl provision --mode %s %s  → run %s\n\n", mode, n.ID, runID)
	tl := curectl.NewTimeline(os.Stdout)
	rep, err := env.Follow(ctx, runID, tl.Print)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cure-demo: watch:", err)
		return 1
	}
	curectl.PrintReport(os.Stdout, rep)
	fmt.Printf("\nboot override changes seen by the BMC: ")
	for _, c := range n.BMC.Overrides() {
		fmt.Printf("%s/%s ", c.Target, c.Enabled)
	}
	fmt.Printf("\ncure-demo: %s in %s (wall clock, QEMU TCG)\n", rep.GetStatus(), time.Since(t0).Round(time.Second))
	if rep.GetStatus() != runstate.RunSucceeded {
		return 1
	}
	return 0
}
