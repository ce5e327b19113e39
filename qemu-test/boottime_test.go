package qemutest

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// helloRecorder is a RunnerService that only notes when the first Hello
// arrives: what "registered" means for the boot-time figure.
type helloRecorder struct {
	curev1.UnimplementedRunnerServiceServer
	once sync.Once
	got  chan *curev1.Hello
}

func (h *helloRecorder) Session(s curev1.RunnerService_SessionServer) error {
	m, err := s.Recv()
	if err != nil {
		return err
	}
	if hello := m.GetHello(); hello != nil {
		h.once.Do(func() { h.got <- hello })
		_ = s.Send(&curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_Idle{Idle: &curev1.Idle{Reason: "benchmark"}}})
	}
	<-s.Context().Done()
	return nil
}

// bootQEMU starts QEMU with a direct kernel boot and returns when a console
// line contains marker, with the wall time since the process started and
// the console lines up to the marker.
func bootQEMU(ctx context.Context, kernel, initrd, cmdline, marker string, disk string) (time.Duration, []string, error) {
	args := []string{"-accel", "tcg", "-machine", "q35", "-cpu", "max", "-smp", "2", "-m", "1024",
		"-nographic", "-no-reboot", "-nodefaults", "-serial", "stdio",
		"-kernel", kernel, "-initrd", initrd, "-append", cmdline,
		"-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0,mac=52:54:00:be:e0:01",
		"-device", "virtio-rng-pci"}
	if disk != "" {
		args = append(args, "-drive", "file="+disk+",if=none,id=d0,format=raw", "-device", "nvme,serial=BENCH1,drive=d0")
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, "qemu-system-x86_64", args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, nil, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, nil, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(out)
	var lines []string
	for sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)
		if strings.Contains(line, marker) {
			return time.Since(start), lines, nil
		}
	}
	tail := lines[max(0, len(lines)-30):]
	return 0, nil, fmt.Errorf("%q never appeared on the console; last lines:\n%s", marker, strings.Join(tail, "\n"))
}

// BenchmarkBootToRegistered measures, in the same run and on the same
// kernel, QEMU start → the CURE runner's Hello at the coordinator, against
// QEMU start → a trivial init's first line (the bare-kernel baseline).
// Direct kernel boot for both, so iPXE's share (reported by the e2e tests)
// is left out. Besides the totals it prints where the time goes: one
// bench-boot-stage line per stage, from the runner's boot timeline (Hello)
// and the baseline's kernel log on its console.
//
// CURE_BENCH_INITRD picks the image's initramfs file (default
// initramfs.cpio.lz4, what iPXE boots; initramfs.cpio.gz, .zst, or an
// uncompressed cpio made for the experiment) to measure compression;
// CURE_BENCH_APPEND is appended to CURE's kernel command line (an
// experiment such as rdinit=/bbin/cure-runner, the runner as PID 1).
func BenchmarkBootToRegistered(b *testing.B) {
	out := os.Getenv("CURE_OUT")
	if out == "" {
		b.Skip("CURE_OUT not set: run `make bench-boot`")
	}
	initrd := os.Getenv("CURE_BENCH_INITRD")
	if initrd == "" {
		initrd = "initramfs.cpio.lz4"
	}
	for _, f := range []string{"baseline/vmlinuz", "baseline/initramfs.cpio.gz", "image/vmlinuz", "image/" + initrd, "pki/ca.pem"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			b.Fatalf("missing %s: run `make image baseline`", f)
		}
	}
	pkiDir := b.TempDir()
	for _, f := range []string{"ca.pem", "ca-key.pem"} {
		data, err := os.ReadFile(filepath.Join(out, "pki", f))
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkiDir, f), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	tlsCfg, err := pki.ServerTLSConfig(pkiDir, []string{"10.0.2.2", "127.0.0.1"})
	if err != nil {
		b.Fatal(err)
	}
	disk := filepath.Join(b.TempDir(), "disk.raw")
	if err := os.WriteFile(disk, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.Truncate(disk, 256<<20); err != nil {
		b.Fatal(err)
	}
	load := machineLoad()
	var baseSum, cureSum time.Duration
	cureStages, baseStages := stageSums{}, stageSums{}
	for i := 0; i < b.N; i++ {
		ctx := context.Background()
		base, baseLines, err := bootQEMU(ctx, filepath.Join(out, "baseline", "vmlinuz"), filepath.Join(out, "baseline", "initramfs.cpio.gz"),
			"console=ttyS0 panic=-1", "CURE-BASELINE-INIT", "")
		if err != nil {
			b.Fatal(err)
		}
		if steps, ok := baselineSteps(baseLines); ok {
			baseStages.add(base, steps)
		} else {
			b.Logf("baseline boot %d: kernel stages not found on its console", i)
		}

		rec := &helloRecorder{got: make(chan *curev1.Hello, 1)}
		gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsCfg)))
		curev1.RegisterRunnerServiceServer(gs, rec)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go gs.Serve(l)
		port := l.Addr().(*net.TCPAddr).Port
		cmdline := fmt.Sprintf("console=ttyS0 panic=-1 cure.coordinator=10.0.2.2:%d cure.http=http://10.0.2.2:1 cure.node=bench cure.token=bench", port) + os.Getenv("CURE_BENCH_APPEND")
		start := time.Now()
		done := make(chan error, 1)
		qctx, stopQEMU := context.WithCancel(ctx)
		go func() {
			_, _, err := bootQEMU(qctx, filepath.Join(out, "image", "vmlinuz"), filepath.Join(out, "image", initrd), cmdline, "CURE-BENCH-NEVER", disk)
			done <- err
		}()
		var cure time.Duration
		select {
		case h := <-rec.got:
			cure = time.Since(start)
			steps := curev1.BootSteps(h.GetBootStages())
			b.Logf("boot %d: baseline %.2fs, CURE registered %.2fs (guest uptime at Hello %.2fs)\n  baseline: %s\n  CURE:     %s",
				i, base.Seconds(), cure.Seconds(), float64(h.GetUptimeMs())/1000, curev1.FormatBootSteps(baseLinesSteps(baseLines)), curev1.FormatBootSteps(steps))
			cureStages.add(cure, steps)
		case err := <-done:
			b.Fatalf("CURE boot ended before registering: %v", err)
		case <-time.After(3 * time.Minute):
			b.Fatal("CURE did not register within 3 minutes")
		}
		stopQEMU()
		gs.Stop()
		<-done
		baseSum += base
		cureSum += cure
	}
	n := float64(b.N)
	b.ReportMetric(baseSum.Seconds()/n, "baseline-s")
	b.ReportMetric(cureSum.Seconds()/n, "registered-s")
	b.ReportMetric((cureSum-baseSum).Seconds()/n, "delta-s")
	b.ReportMetric(0, "ns/op")
	// The breakdown: time spent reaching each stage from the previous one,
	// mean over the runs. The baseline's last stage is its init's first
	// console line, its counterpart of hello_sent.
	fmt.Printf("bench-boot breakdown initrd=%s (seconds to reach each stage from the previous; baseline: bare kernel + trivial init)\n", initrd)
	for _, st := range append([]string{stageBeforeKernel}, curev1.BootStageNames...) {
		c, cok := cureStages.mean(st)
		bl, bok := baseStages.mean(st)
		if !cok && !bok {
			continue
		}
		fmt.Printf("bench-boot-stage stage=%s cure_s=%s baseline_s=%s\n", st, fmtSecs(c, cok), fmtSecs(bl, bok))
	}
	// One line a script can read (make bench-boot prints the last one at
	// the end of its output).
	fmt.Printf("bench-boot registered_s=%.2f baseline_s=%.2f delta_s=%.2f ratio=%.2f load=%s\n",
		cureSum.Seconds()/n, baseSum.Seconds()/n, (cureSum-baseSum).Seconds()/n, cureSum.Seconds()/baseSum.Seconds(), load)
}

// stageBeforeKernel is QEMU start → the kernel's clock starting: firmware,
// loading kernel and initramfs, decompressing the kernel. It is the wall
// time at registration less the guest uptime then.
const stageBeforeKernel = "before_kernel"

// stageSums accumulates per-stage durations over runs.
type stageSums map[string][]time.Duration

func (s stageSums) add(wall time.Duration, steps []curev1.BootStep) {
	if len(steps) == 0 {
		return
	}
	s[stageBeforeKernel] = append(s[stageBeforeKernel], wall-steps[len(steps)-1].Uptime)
	for _, st := range steps {
		s[st.Stage] = append(s[st.Stage], st.Took)
	}
}

func (s stageSums) mean(stage string) (time.Duration, bool) {
	v := s[stage]
	if len(v) == 0 {
		return 0, false
	}
	var sum time.Duration
	for _, d := range v {
		sum += d
	}
	return sum / time.Duration(len(v)), true
}

func fmtSecs(d time.Duration, ok bool) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.2f", d.Seconds())
}

// kernelLogLine matches a console line of the kernel log with its
// timestamp ("[    1.118472] Trying to unpack rootfs image as initramfs...").
var kernelLogLine = regexp.MustCompile(`\[\s*(\d+\.\d+)\] (Trying to unpack rootfs image as initramfs|Freeing initrd memory|Run /init as init process)`)

var baselineInitLine = regexp.MustCompile(`CURE-BASELINE-INIT uptime=(\d+\.\d+)`)

// baseLinesSteps is baselineSteps without the found flag (for the log).
func baseLinesSteps(lines []string) []curev1.BootStep {
	steps, _ := baselineSteps(lines)
	return steps
}

// baselineSteps reads the baseline boot's stages from its console: the
// kernel's from its log lines, hello_sent from the trivial init's line.
func baselineSteps(lines []string) ([]curev1.BootStep, bool) {
	names := map[string]string{
		"Trying to unpack rootfs image as initramfs": curev1.BootStageInitramfsUnpackStart,
		"Freeing initrd memory":                      curev1.BootStageInitramfsUnpacked,
		"Run /init as init process":                  curev1.BootStageInitStarted,
	}
	var stages []*curev1.BootStage
	ms := func(s string) int64 {
		f, _ := strconv.ParseFloat(s, 64)
		return int64(math.Round(f * 1000))
	}
	for _, l := range lines {
		if m := kernelLogLine.FindStringSubmatch(l); m != nil {
			stages = append(stages, &curev1.BootStage{Name: names[m[2]], UptimeMs: ms(m[1])})
		}
		if m := baselineInitLine.FindStringSubmatch(l); m != nil {
			stages = append(stages, &curev1.BootStage{Name: curev1.BootStageHelloSent, UptimeMs: ms(m[1])})
		}
	}
	steps := curev1.BootSteps(stages)
	return steps, len(steps) > 0 && steps[len(steps)-1].Stage == curev1.BootStageHelloSent
}

// machineLoad is "loaded" when, over one second before the boots, at
// least half the machine's CPU time was busy (a build beside the
// benchmark), else "quiet". /proc/stat's counters, not the load average,
// which still remembers the image build that precedes the benchmark.
func machineLoad() string {
	busy := func() (busy, total uint64, ok bool) {
		b, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0, 0, false
		}
		f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
		if len(f) < 5 || f[0] != "cpu" {
			return 0, 0, false
		}
		for i, v := range f[1:] {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return 0, 0, false
			}
			total += n
			if i != 3 && i != 4 { // idle, iowait
				busy += n
			}
		}
		return busy, total, true
	}
	b1, t1, ok1 := busy()
	time.Sleep(time.Second)
	b2, t2, ok2 := busy()
	if !ok1 || !ok2 || t2 <= t1 {
		return "unknown"
	}
	if float64(b2-b1)/float64(t2-t1) >= 0.5 {
		return "loaded"
	}
	return "quiet"
}
