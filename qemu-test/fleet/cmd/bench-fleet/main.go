// Command bench-fleet runs the fleet simulator at several sizes against the
// real provisioner-lite and prints, per size, the batch wall time and its
// ratio to one node's in the same run, first-pass success of healthy nodes,
// hardware faults named, the coordinator's peak RSS and CPU per node,
// event-to-ack and phase-transition percentiles and store commits per run.
// -db postgres runs the coordinator on a private PostgreSQL cluster instead
// of SQLite (make bench-fleet adds such a line). It ends with one line per
// size a script can read:
//
//	bench-fleet nodes=N wall_ratio=… wall_ratio_healthy=… first_pass=…% faults_named=…% rss_mib=… rss_kib_per_node=… cpu_ms_per_node=… commits_per_run=…
//
// rss_kib_per_node is the coordinator's peak RSS over the nodes (the fixed
// part included); cpu_ms_per_node its CPU time (user+system) over the
// nodes. BENCH_FLEET_NODES=1,100 picks the sizes (default
// 1,100,1000,5000,10000). -profile DIR saves the coordinator's CPU profile
// (consecutive 15 s profiles over the batch, `go tool pprof -top DIR/nN.cpu*`
// merges them) and its heap once the batch ended, per size.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/store/pgtest"
	"github.com/cure-oss/cure/qemu-test/fleet"
	"github.com/cure-oss/cure/tools/version"
)

func main() {
	sizes := flag.String("nodes", envOr("BENCH_FLEET_NODES", "1,100,1000,5000,10000"), "fleet sizes, comma-separated")
	var o benchOptions
	flag.Float64Var(&o.transient, "transient", 0.02, "share of nodes given each transient fault (the 1-node baseline has none)")
	flag.Float64Var(&o.hardware, "hardware", 0.01, "share of nodes with a hardware fault")
	flag.Float64Var(&o.scale, "scale", 2, "simulated seconds per real second (the phases run this many times faster than on a real node; the coordinator has the same fixed costs whatever the scale, so a high scale measures this machine's CPU, not the batch)")
	flag.StringVar(&o.bin, "coordinator", "", "a provisioner-lite binary to measure instead of building this tree's (a before/after comparison on the same machine)")
	flag.StringVar(&o.profile, "profile", "", "save the coordinator's CPU and heap profiles of each size in this directory")
	flag.StringVar(&o.db, "db", "sqlite", "the store: sqlite (in the state dir) or postgres (a private cluster started for the run, a fresh database per size)")
	printVersion := version.Flag(flag.CommandLine, "bench-fleet")
	flag.Parse()
	if printVersion(os.Stdout) {
		os.Exit(0)
	}
	ns, err := parseSizes(*sizes)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-fleet:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	o.work, err = os.MkdirTemp("", "bench-fleet-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-fleet:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(o.work)
	if o.db != "sqlite" && o.db != "postgres" {
		fmt.Fprintf(os.Stderr, "bench-fleet: -db %q: want sqlite or postgres\n", o.db)
		os.Exit(2)
	}
	if o.db == "postgres" {
		pg, err := pgtest.StartCluster()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-fleet: -db postgres:", err)
			os.Exit(1)
		}
		defer pg.Stop()
		o.pg = pg
	}
	if o.bin == "" {
		if o.bin, err = fleet.BuildCoordinator(ctx, o.work); err != nil {
			fmt.Fprintln(os.Stderr, "bench-fleet:", err)
			os.Exit(1)
		}
	}
	fmt.Printf("bench-fleet: %d CPUs, load %s, scale 1/%g, transient faults %.0f%% each, hardware faults %.0f%%, store %s\n",
		runtime.NumCPU(), loadAvg(), o.scale, 100*o.transient, 100*o.hardware, o.db)
	// The baseline: one healthy node, same simulated durations, same run.
	var single time.Duration
	var lines []string
	var results []*fleet.Result
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "nodes\twall\tratio\tclean ratio\tfirst pass\tfaults named\tpeak RSS MiB\tCPU s/node\tack p50\tack p99\ttrans p50\ttrans p99\tcommits/run\tload\t")
	// The baseline (one healthy node) runs first; a size of 1 is reported from it.
	sizesToRun := append([]int{1}, ns...)
	if ns[0] == 1 {
		sizesToRun = ns
	}
	for i, n := range sizesToRun {
		res, err := runSize(ctx, o, n, i)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-fleet:", err)
			os.Exit(1)
		}
		if i == 0 {
			single = res.Wall
		}
		results = append(results, res)
		printRow(tw, res, n, single)
		if i > 0 || ns[0] == 1 {
			lines = append(lines, summaryLine(res, n, single, o.scale)+" db="+o.db)
			// At once too: a later size that fails must not lose it.
			fmt.Fprintln(os.Stderr, lines[len(lines)-1])
		}
	}
	tw.Flush()
	if len(results) > 1 {
		printPhases(results[0], results[len(results)-1])
	}
	for _, l := range lines {
		fmt.Println(l)
	}
}

// benchOptions are the flags every size runs with.
type benchOptions struct {
	transient, hardware, scale float64
	bin, profile, work         string
	db                         string          // sqlite or postgres
	pg                         *pgtest.Cluster // with postgres
}

// parseSizes reads the comma-separated fleet sizes.
func parseSizes(sizes string) ([]int, error) {
	var ns []int
	for _, f := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad size %q in %q", f, sizes)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// loadAvg is the machine's 1, 5 and 15 minute load averages ("?" unread).
func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// runSize simulates one batch of n nodes (the i-th size) and prints its
// problems.
func runSize(ctx context.Context, o benchOptions, n, i int) (*fleet.Result, error) {
	cfg := fleet.Config{Nodes: n, Seed: uint64(n), Scale: o.scale, Bin: o.bin, Timeout: 2 * time.Hour,
		Work: fmt.Sprintf("%s/n%d-%d", o.work, n, i)}
	if n > 1 {
		cfg.TransientRate, cfg.HardwareRate = o.transient, o.hardware
	}
	// One instance drives the whole batch: past its default run limit
	// (5,000) it would refuse the rest, as it should for an operator.
	cfg.CoordinatorArgs = append(cfg.CoordinatorArgs, "--max-runs", fmt.Sprint(max(n, 5000)))
	if err := os.MkdirAll(cfg.Work, 0o700); err != nil {
		return nil, err
	}
	if o.pg != nil {
		dsn, err := o.pg.CreateDatabase(ctx)
		if err != nil {
			return nil, err
		}
		cfg.DSN = dsn
	}
	var prof *profiler
	if o.profile != "" && n > 1 {
		var err error
		if prof, err = newProfiler(o.profile, n); err != nil {
			return nil, err
		}
		cfg.CoordinatorArgs = append(cfg.CoordinatorArgs, "--pprof-listen", prof.addr)
		cfg.AfterBatch = func(ctx context.Context, _ curev1.OperatorServiceClient) error { prof.stop(ctx); return nil }
	}
	s, err := fleet.Start(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%d nodes: %w", n, err)
	}
	if prof != nil {
		go prof.run()
	}
	res, err := s.Run(ctx)
	s.Close()
	if err != nil {
		return nil, fmt.Errorf("%d nodes: %w", n, err)
	}
	for _, p := range res.Problems {
		fmt.Fprintf(os.Stderr, "bench-fleet: %d nodes: %s\n", n, p)
	}
	return res, nil
}

// printRow writes a size's row of the table; single is the one-node wall.
func printRow(tw *tabwriter.Writer, res *fleet.Result, n int, single time.Duration) {
	ratio := float64(res.Wall) / float64(single)
	clean := float64(res.CleanWall) / float64(single)
	fmt.Fprintf(tw, "%d\t%s\t%.2f\t%.2f\t%.1f%%\t%.1f%%\t%.0f\t%.3f\t%s\t%s\t%s\t%s\t%.1f\t%s\t\n", n, res.Wall.Round(100*time.Millisecond), ratio, clean,
		res.FirstPass(), res.Named(), res.RSSMiB, res.CPUSeconds/float64(n), res.AckP50.Round(100*time.Microsecond), res.AckP99.Round(100*time.Microsecond),
		res.TransP50.Round(time.Millisecond), res.TransP99.Round(time.Millisecond), res.CommitsPerRun, loadAvg())
}

// summaryLine is a size's line for scripts; single is the one-node wall.
func summaryLine(res *fleet.Result, n int, single time.Duration, scale float64) string {
	ratio := float64(res.Wall) / float64(single)
	clean := float64(res.CleanWall) / float64(single)
	return fmt.Sprintf("bench-fleet nodes=%d wall_ratio=%.2f wall_ratio_healthy=%.2f first_pass=%.1f%% faults_named=%.1f%% rss_mib=%.0f rss_kib_per_node=%.0f cpu_ms_per_node=%.1f commits_per_run=%.1f ack_p99_ms=%.0f scale=%g load=%s",
		n, ratio, clean, res.FirstPass(), res.Named(), res.RSSMiB, res.RSSMiB*1024/float64(n), 1000*res.CPUSeconds/float64(n), res.CommitsPerRun,
		float64(res.AckP99)/float64(time.Millisecond), scale, strings.ReplaceAll(loadAvg(), " ", "/"))
}

// printPhases shows where the largest batch spent its time, phase by
// phase, against the single node: what to optimise next.
func printPhases(one, big *fleet.Result) {
	fmt.Printf("\nphases of the nodes without injected faults: 1 node vs %d nodes\n", big.Nodes)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\t1 node\tp50\tp99\tmax\t")
	base := map[string]time.Duration{}
	for _, p := range one.Phases {
		base[p.Name] = p.P50
	}
	for _, p := range big.Phases {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", p.Name, base[p.Name].Round(10*time.Millisecond), p.P50.Round(10*time.Millisecond), p.P99.Round(10*time.Millisecond), p.Max.Round(10*time.Millisecond))
	}
	tw.Flush()
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
