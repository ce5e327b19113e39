package boot

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/tools/kmsg"
	"golang.org/x/sys/unix"
)

// Boot stage names: the api's, so runner and coordinator agree.
const (
	StageInitramfsUnpackStart = curev1.BootStageInitramfsUnpackStart
	StageInitramfsUnpacked    = curev1.BootStageInitramfsUnpacked
	StageInitStarted          = curev1.BootStageInitStarted
	StageRunnerStarted        = curev1.BootStageRunnerStarted
	StageNetDriversLoaded     = curev1.BootStageNetDriversLoaded
	StageModulesLoaded        = curev1.BootStageModulesLoaded
	StageLinkUp               = curev1.BootStageLinkUp
	StageDHCPBound            = curev1.BootStageDHCPBound
	StageInventoryDone        = curev1.BootStageInventoryDone
	StageConnected            = curev1.BootStageConnected
	StageHelloSent            = curev1.BootStageHelloSent
)

// kernelStages maps kernel log messages (prefixes) to stage names.
var kernelStages = []struct{ prefix, stage string }{
	{"Trying to unpack rootfs image as initramfs", StageInitramfsUnpackStart},
	{"Freeing initrd memory", StageInitramfsUnpacked},
	{"Run /init as init process", StageInitStarted},
}

// Stage is one boot milestone: the uptime at which it was reached.
type Stage struct {
	Name   string
	Uptime time.Duration
}

// Timeline records boot milestones. Marks are safe from several goroutines;
// a stage marked twice keeps its first time (a retried DHCP does not move
// dhcp_bound).
type Timeline struct {
	mu     sync.Mutex
	stages []Stage
	now    func() time.Duration
}

// NewTimeline returns a timeline on CLOCK_BOOTTIME, the clock of
// /proc/uptime (and, to within a few milliseconds, of the kernel log).
func NewTimeline() *Timeline { return &Timeline{now: BootTime} }

// BootTime is the time since boot (CLOCK_BOOTTIME).
func BootTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// Mark records name at the current uptime, unless it is already recorded.
func (t *Timeline) Mark(name string) time.Duration {
	now := t.now()
	t.Add(Stage{Name: name, Uptime: now})
	return now
}

// Add records a stage measured elsewhere (the kernel's), unless its name is
// already recorded.
func (t *Timeline) Add(s Stage) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, have := range t.stages {
		if have.Name == s.Name {
			return
		}
	}
	t.stages = append(t.stages, s)
}

// Stages returns the recorded stages sorted by uptime (stable: equal times
// keep their marking order).
func (t *Timeline) Stages() []Stage {
	t.mu.Lock()
	out := slices.Clone(t.stages)
	t.mu.Unlock()
	slices.SortStableFunc(out, func(a, b Stage) int { return cmp.Compare(a.Uptime, b.Uptime) })
	return out
}

// Proto is the timeline as the Hello carries it.
func (t *Timeline) Proto() []*curev1.BootStage {
	st := t.Stages()
	out := make([]*curev1.BootStage, 0, len(st))
	for _, s := range st {
		out = append(out, &curev1.BootStage{Name: s.Name, UptimeMs: s.Uptime.Milliseconds()})
	}
	return out
}

// String is the console form, the coordinator's log form too:
// "init_started=2.66s(+0.64s) ...".
func (t *Timeline) String() string {
	return curev1.FormatBootSteps(curev1.BootSteps(t.Proto()))
}

// ReadKernelStages reads what the kernel log at path (/dev/kmsg) holds now,
// without waiting for more, and returns the kernel's boot stages found in it.
func ReadKernelStages(path string) ([]Stage, error) {
	r, err := kmsg.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return ParseKernelStages(r)
}

// ParseKernelStages reads /dev/kmsg records ("prio,seq,usec,flags;message",
// continuation lines start with a space) and returns the first record of
// each kernel stage, in log order. Lines that are not records are skipped:
// the log is the kernel's, but a test or an odd kernel must not stop a boot.
func ParseKernelStages(r io.Reader) ([]Stage, error) {
	var out []Stage
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 8192), 64*1024)
	for sc.Scan() {
		line := sc.Bytes()
		head, msg, ok := bytes.Cut(line, []byte{';'})
		if !ok || len(line) == 0 || line[0] == ' ' {
			continue
		}
		fields := bytes.SplitN(head, []byte{','}, 4)
		if len(fields) < 3 {
			continue
		}
		usec, err := strconv.ParseInt(string(fields[2]), 10, 64)
		if err != nil || usec < 0 || usec > int64(365*24*time.Hour/time.Microsecond) {
			continue
		}
		for _, k := range kernelStages {
			if !seen[k.stage] && bytes.HasPrefix(msg, []byte(k.prefix)) {
				seen[k.stage] = true
				out = append(out, Stage{Name: k.stage, Uptime: time.Duration(usec) * time.Microsecond})
			}
		}
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("reading kernel log: %w", err)
	}
	return out, nil
}
