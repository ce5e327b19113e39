// Command cure-demo runs the whole loop on this machine: a virtual BMC and a
// QEMU node, a real provisioner-lite, and one run from power-off, with the
// live timeline and the verdict table on the terminal. A provisioning run
// ends with the installed OS calling back; a diagnostic or burn-in runs a
// validation suite (-manifest) and can inject faults while it runs (-inject:
// a corrected memory error through the QEMU monitor, a failing PSU at the
// BMC), so its report names the part. Its work directory is kept, so a
// second run re-provisions the same node and skips what already matches;
// -hold keeps the coordinator up afterwards for curectl.
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
	"slices"
	"strings"
	"syscall"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/render"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/qemu-test/harness"
	"github.com/cure-oss/cure/qemu-test/vbmc"
	"github.com/cure-oss/cure/tools/version"
)

// Faults -inject knows.
const (
	faultMCE = "mce" // a corrected memory-controller read error at 0x1000, CPU 0 bank 9
	faultPSU = "psu" // PSU 2 fails: the BMC logs it and reports its health Critical
)

type options struct {
	out, work, manifest, injectAt string
	mode                          modes.Mode
	inject                        []string
	verbose, hold                 bool
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "out", "make's output directory (image, hostos, pki, toolbundle)")
	flag.StringVar(&o.work, "work", "out/demo", "demo state: store, node disk, logs (kept between runs)")
	mode := flag.String("mode", "provision", "provision|audit|verify|diagnostic|burnin")
	flag.StringVar(&o.manifest, "manifest", "", "diagnostic and burnin: the validation suite (a name in manifests/examples/suites, e.g. qemu-burnin)")
	inject := flag.String("inject", "", "faults to inject while the suite runs, comma-separated: mce (a corrected memory error, QEMU monitor), psu (PSU 2 fails at the BMC)")
	flag.StringVar(&o.injectAt, "inject-at", "", "the suite stage whose start triggers -inject (default: the validate phase's start)")
	flag.BoolVar(&o.hold, "hold", false, "after the run keep the coordinator, BMC and node up for curectl until interrupted")
	flag.BoolVar(&o.verbose, "v", false, "also print the coordinator log")
	printVersion := version.Flag(flag.CommandLine, "cure-demo")
	flag.Parse()
	if printVersion(os.Stdout) {
		os.Exit(0)
	}
	m, err := modes.Parse(*mode)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cure-demo:", err)
		os.Exit(2)
	}
	o.mode = m
	if *inject != "" {
		o.inject = strings.Split(*inject, ",")
	}
	for _, f := range o.inject {
		if f != faultMCE && f != faultPSU {
			fmt.Fprintf(os.Stderr, "cure-demo: -inject %q: want %s and/or %s\n", f, faultMCE, faultPSU)
			os.Exit(2)
		}
	}
	suiteMode := m == modes.Diagnostic || m == modes.Burnin
	switch {
	case suiteMode && o.manifest == "":
		fmt.Fprintf(os.Stderr, "cure-demo: -mode %s needs -manifest (a validation suite, e.g. qemu-burnin)\n", m)
		os.Exit(2)
	case !suiteMode && (o.manifest != "" || len(o.inject) > 0):
		fmt.Fprintf(os.Stderr, "cure-demo: -manifest and -inject are for -mode diagnostic or burnin\n")
		os.Exit(2)
	}
	os.Exit(run(o))
}

func run(o options) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var coordLog io.Writer
	if o.verbose {
		coordLog = os.Stderr
	}
	if err := os.MkdirAll(o.work, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "cure-demo:", err)
		return 1
	}
	t0 := time.Now()
	fmt.Printf("cure-demo: starting virtual BMC, QEMU node and provisioner-lite (work dir %s)\n", o.work)
	hopts := harness.Options{Out: o.out, Work: o.work, Logger: log, CoordinatorLog: coordLog, ToolBundle: true}
	if len(o.inject) > 0 {
		// One attempt: a retried validate phase would judge the same
		// boot's machine check again.
		hopts.PhaseAttempts = 1
	}
	env, err := harness.Start(ctx, hopts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cure-demo:", err)
		return 1
	}
	defer env.Close()
	n := env.Nodes[0]
	fmt.Printf("cure-demo: node %s  mac %s  bmc %s  power %s  coordinator http %s grpc %s\n", n.ID, n.MAC, n.BMCURL, n.BMC.PowerState(), env.HTTPAddr, env.GRPCAddr)
	// The BMC serves a self-signed certificate; the inventory pins it.
	fmt.Printf("cure-demo: bmc certificate %s (pinned in %s)\n", n.BMCFingerprint, filepath.Join(o.work, "nodes.yaml"))
	fmt.Printf("cure-demo: node console: %s   coordinator log: %s\n", n.Console, filepath.Join(o.work, "coordinator.log"))
	// The harness issued the "operator" certificate beside the CA, where
	// curectl looks by default, so this works from another terminal as is.
	curectlCmd := fmt.Sprintf("go run ./provisioner-lite/cmd/curectl --server %s --ca %s", env.GRPCAddr, filepath.Join(env.StateDir, "pki", "ca.pem"))
	fmt.Printf("cure-demo: from another terminal: %s nodes   (operator cert %s)\n\n", curectlCmd, env.OperatorCert)
	runID, err := env.Run(ctx, n.ID, o.mode, o.manifest, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cure-demo: provision:", err)
		return 1
	}
	if o.manifest != "" {
		fmt.Printf("curectl provision --mode %s --manifest %s %s  → run %s\n\n", o.mode, o.manifest, n.ID, runID)
	} else {
		fmt.Printf("curectl provision --mode %s %s  → run %s\n\n", o.mode, n.ID, runID)
	}
	tl := render.NewTimeline(os.Stdout)
	injected := false
	rep, err := env.Follow(ctx, runID, func(e *curev1.TimelineEntry) {
		tl.Print(e)
		if len(o.inject) == 0 || injected || !injectNow(e, o.injectAt) {
			return
		}
		injected = true
		injectFaults(ctx, n, o.inject)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "cure-demo: watch:", err)
		return 1
	}
	render.PrintReport(os.Stdout, rep)
	fmt.Printf("\nboot override changes seen by the BMC: ")
	for _, c := range n.BMC.Overrides() {
		fmt.Printf("%s/%s ", c.Target, c.Enabled)
	}
	fmt.Printf("\ncure-demo: %s in %s (wall clock, QEMU TCG)\n", rep.GetStatus(), time.Since(t0).Round(time.Second))
	if o.hold {
		fmt.Printf("\ncure-demo: holding; from another terminal:\n  %s report %s\n  %s report --html report.html %s\n  %s fleet-bands --node %s\nctrl-c ends it\n",
			curectlCmd, n.ID, curectlCmd, n.ID, curectlCmd, n.ID)
		<-ctx.Done()
	}
	if rep.GetRunStatus() != curev1.RunStatus_RUN_SUCCEEDED {
		return 1
	}
	return 0
}

// injectNow says whether e is the moment to inject: the runner's log that
// stage starts, or with no stage named, the validate phase's start.
func injectNow(e *curev1.TimelineEntry, stage string) bool {
	if stage == "" {
		return e.GetPhase() == string(modes.Validate) && runstate.EventKind(e.GetKind()) == runstate.EventPhaseStart
	}
	return runstate.EventSource(e.GetSource()) == runstate.SourceRunner && runstate.EventKind(e.GetKind()) == runstate.EventLog && strings.HasPrefix(e.GetMessage(), "stage "+stage+" started")
}

// injectFaults makes the node's hardware misbehave as a failing part does.
func injectFaults(ctx context.Context, n *harness.Node, faults []string) {
	if slices.Contains(faults, faultMCE) {
		// QEMU monitor: CPU 0, bank 9, MCi_STATUS VAL|EN|MISCV|ADDRV with a
		// memory-controller read error code, address 0x1000 (the runner
		// has shortened the kernel's machine-check poll for the run).
		out, err := n.Machine.HumanMonitorCommand(ctx, "mce 0 9 0x9c0000000000009f 0 0x1000 0x86")
		fmt.Printf("cure-demo: injected a corrected memory error (QEMU monitor mce): %q %v\n", strings.TrimSpace(out), err)
	}
	if slices.Contains(faults, faultPSU) {
		err := n.BMC.SetPartHealth(vbmc.PartPSU, "Bay2", "Critical", "Power supply 'PSU 2' has failed: AC input lost.")
		fmt.Printf("cure-demo: injected a PSU failure at the BMC (PSU 2 Critical, logged): %v\n", err)
	}
}
