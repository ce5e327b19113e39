// Package fiocheck measures 4 KiB random I/O per drive with fio, the
// reference storage benchmark: one fio run with a job per selected disk
// (all drives loaded at once, as a training job's data loaders load them),
// read-only (fio's own --readonly refuses any write job) on every disk but
// the boot medium; then, only where the suite names a scratch range and the
// mode allows writes, random writes inside that range on that one disk
// (the scratch rules of tools/checks/storage). A verdict per disk,
// component disk/<name>, with IOPS and the p99 completion latency.
package fiocheck

import (
	"context"
	"fmt"
	"path"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/storage"
	"github.com/cure-oss/cure/tools/fio"
)

// Options configure the check.
type Options struct {
	// Root holds dev/ (and sys/, proc/ when Disks is nil).
	Root string
	// Disks lists the disks with the boot medium marked; nil: blockdev.
	Disks func() ([]blockdev.Disk, error) `json:"-"`
	// AppliesTo keeps disks whose component id (disk/<name>) matches
	// this path.Match glob; "" keeps all.
	AppliesTo string
	Tools     checks.Tools `json:"-"`
	// Runtime of each fio run (default 30s).
	Runtime time.Duration
	// BlockSize in bytes (default 4096), IODepth per drive (default 32).
	BlockSize, IODepth int
	// IOEngine is fio's (default libaio).
	IOEngine string
	// Buffered drops O_DIRECT (tests on filesystems without it).
	Buffered bool
	// Read bars: IOPS, and the 99th percentile completion latency in µs.
	ReadIOPS, ReadP99Us checks.Limit
	// Write, when set, adds random writes inside this scratch range.
	Write                 *storage.Scratch
	WriteIOPS, WriteP99Us checks.Limit
}

// Percentiles fio is asked for; p99 is judged, the others reported.
const percentiles = "50:99:99.9"

// Check runs fio and returns one verdict per disk.
func Check(ctx context.Context, o Options) ([]checks.Verdict, error) {
	if o.Tools == nil {
		return nil, fmt.Errorf("fiocheck: no way to run fio")
	}
	disks, markErr := storage.ListDisks(o.Root, o.Disks)
	if disks == nil && markErr != nil {
		return nil, markErr
	}
	if o.Write != nil {
		if err := storage.CheckScratch(disks, markErr, *o.Write); err != nil {
			return nil, err
		}
	}
	var out []checks.Verdict
	var targets []string
	for _, d := range disks {
		comp := "disk/" + d.Name
		if ok, _ := path.Match(o.AppliesTo, comp); o.AppliesTo != "" && !ok {
			continue
		}
		if d.BootMedium {
			out = append(out, checks.Verdict{Component: comp, Status: checks.Skip, Message: "boot medium: not measured"})
			continue
		}
		targets = append(targets, d.Name)
	}
	if len(targets) == 0 {
		return out, nil
	}
	byDisk := map[string][]checks.Reading{}
	failed := map[string]string{}
	if err := o.run(ctx, "randread", targets, nil, byDisk, failed); err != nil {
		return out, err
	}
	if o.Write != nil {
		if err := o.run(ctx, "randwrite", []string{o.Write.Device}, o.Write, byDisk, failed); err != nil {
			return out, err
		}
	}
	for _, name := range targets {
		comp := "disk/" + name
		if msg, bad := failed[name]; bad {
			out = append(out, checks.Verdict{Component: comp, Status: checks.Error, Message: msg})
			continue
		}
		out = append(out, checks.Judge(comp, byDisk[name]...))
	}
	return out, nil
}

// run is one fio invocation, a job per disk named by the disk.
func (o Options) run(ctx context.Context, rw string, names []string, scratch *storage.Scratch, byDisk map[string][]checks.Reading, failed map[string]string) error {
	args := o.args(rw, scratch)
	for _, n := range names {
		args = append(args, "--name="+n, "--filename="+filepath.Join(o.Root, "dev", n))
	}
	cmd, err := o.Tools(ctx, "fio", args...)
	if err != nil {
		return fmt.Errorf("fiocheck: %w", err)
	}
	stdout, _, runErr := checks.RunTool(cmd)
	if err := ctx.Err(); err != nil {
		return err
	}
	rep, err := fio.Parse(stdout)
	if err != nil {
		if runErr != nil {
			return fmt.Errorf("fiocheck %s: %w", rw, runErr)
		}
		return fmt.Errorf("fiocheck %s: %w", rw, err)
	}
	for _, n := range names {
		j, ok := rep.Job(n)
		switch {
		case !ok:
			failed[n] = fmt.Sprintf("fio %s reported no job for %s", rw, n)
			continue
		case j.Error != 0:
			msg := fmt.Sprintf("fio %s job failed with errno %d", rw, j.Error)
			if runErr != nil {
				msg += ": " + runErr.Error()
			}
			failed[n] = msg
			continue
		}
		if rw == "randread" {
			byDisk[n] = append(byDisk[n], readings("Read", j.Read, o.ReadIOPS, o.ReadP99Us)...)
		} else {
			byDisk[n] = append(byDisk[n], readings("Write", j.Write, o.WriteIOPS, o.WriteP99Us)...)
		}
	}
	if runErr != nil && len(failed) == 0 {
		// fio failed although every job ran: say so rather than pass.
		return fmt.Errorf("fiocheck %s: %w", rw, runErr)
	}
	return nil
}

// readings of one direction: rand<Dir>IOPS, p99<Dir>LatencyUs (barred),
// and the informational MB/s and p50/p99.9.
func readings(dir string, io fio.IO, iops, p99 checks.Limit) []checks.Reading {
	rs := []checks.Reading{checks.Value("rand"+dir+"IOPS", round(io.IOPS), iops).In("IOPS")}
	for _, p := range []struct {
		q    float64
		name string
		bar  checks.Limit
	}{{99, "p99", p99}, {50, "p50", checks.Limit{}}, {99.9, "p99.9", checks.Limit{}}} {
		metric := p.name + dir + "LatencyUs"
		if v, ok := io.Clat.PercentileUs(p.q); ok {
			rs = append(rs, checks.Value(metric, v, p.bar).In("us"))
		} else {
			rs = append(rs, checks.Missing(metric, p.bar))
		}
	}
	return append(rs, checks.Value("rand"+dir+"MBps", round(io.BWBytes/1e6*100)/100, checks.Limit{}).In("MB/s"))
}

func round(v float64) float64 { return float64(int64(v + 0.5)) }

func (o Options) args(rw string, scratch *storage.Scratch) []string {
	bs, depth, engine, runtime := o.BlockSize, o.IODepth, o.IOEngine, o.Runtime
	if bs <= 0 {
		bs = 4096
	}
	if depth <= 0 {
		depth = 32
	}
	if engine == "" {
		engine = "libaio"
	}
	if runtime <= 0 {
		runtime = 30 * time.Second
	}
	secs := max(1, int(runtime.Round(time.Second)/time.Second))
	var a []string
	if scratch == nil {
		a = append(a, "--readonly")
	}
	a = append(a, "--output-format=json", "--eta=never", "--thread",
		"--direct="+strconv.Itoa(b2i(!o.Buffered)), "--ioengine="+engine, "--rw="+rw,
		"--bs="+strconv.Itoa(bs), "--iodepth="+strconv.Itoa(depth),
		"--runtime="+strconv.Itoa(secs), "--time_based",
		// A random map of a multi-terabyte drive costs a bit per block;
		// no repeat keeps drives from serving a cached sequence.
		"--norandommap", "--randrepeat=0", "--percentile_list="+percentiles)
	if scratch != nil {
		a = append(a, "--offset="+strconv.FormatUint(scratch.Offset, 10), "--size="+strconv.FormatUint(scratch.Length, 10))
	}
	return a
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
