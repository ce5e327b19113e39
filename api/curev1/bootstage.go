package curev1

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Boot stage names (Hello.boot_stages), in the order a boot reaches them.
// The runner marks them; the coordinator accepts only these names.
const (
	BootStageInitramfsUnpackStart = "initramfs_unpack_start" // kernel: "Trying to unpack rootfs image as initramfs"
	BootStageInitramfsUnpacked    = "initramfs_unpacked"     // kernel: "Freeing initrd memory"
	BootStageInitStarted          = "init_started"           // kernel: "Run /init as init process"
	BootStageRunnerStarted        = "runner_started"         // the runner's main(), after u-root's init and Go's start
	BootStageNetDriversLoaded     = "net_drivers_loaded"     // drivers for the network devices present
	BootStageModulesLoaded        = "modules_loaded"         // drivers for all the devices present
	BootStageLinkUp               = "link_up"                // a NIC reports carrier
	BootStageDHCPBound            = "dhcp_bound"             // lease configured
	BootStageInventoryDone        = "inventory_done"
	BootStageConnected            = "connected"  // TCP + TLS handshake with the coordinator done
	BootStageHelloSent            = "hello_sent" // registered, as the coordinator sees it
)

// BootStageNames lists the boot stages in the order a boot usually reaches
// them. Some run side by side (storage drivers load during DHCP, the TLS
// handshake runs beside the inventory), so a boot may reach them in another
// order: reports sort by time.
var BootStageNames = []string{
	BootStageInitramfsUnpackStart, BootStageInitramfsUnpacked, BootStageInitStarted, BootStageRunnerStarted,
	BootStageNetDriversLoaded, BootStageLinkUp, BootStageDHCPBound, BootStageModulesLoaded, BootStageConnected,
	BootStageInventoryDone, BootStageHelloSent,
}

// MaxBootStages bounds what one Hello may list before it is ignored whole.
const MaxBootStages = 32

// MaxBootUptime bounds a stage's uptime: a CURE boot that took longer to
// register has bigger problems than its breakdown.
const MaxBootUptime = time.Hour

// BootStep is one stage of a runner's boot: when it was reached (guest
// uptime) and how long after the previous stage it reports.
type BootStep struct {
	Stage  string
	Uptime time.Duration
	Took   time.Duration
}

// BootSteps checks a Hello's boot stages and returns them in the order they
// were reached (uptime; equal times in BootStageNames order) with the time
// each took since the one before. The list is the runner's word: only known
// stage names count (each once, the first), uptimes outside [0, 1h] are
// dropped, and an overlong list is ignored whole. Nothing is decided on it;
// it feeds a metric and a log.
func BootSteps(stages []*BootStage) []BootStep {
	if len(stages) > MaxBootStages {
		return nil
	}
	known := map[string]int{}
	for i, n := range BootStageNames {
		known[n] = i
	}
	at := map[string]time.Duration{}
	for _, s := range stages {
		if _, ok := known[s.GetName()]; !ok {
			continue
		}
		// Bounds checked in milliseconds: converting first could overflow.
		if ms := s.GetUptimeMs(); ms < 0 || ms > MaxBootUptime.Milliseconds() {
			continue
		}
		d := time.Duration(s.GetUptimeMs()) * time.Millisecond
		if _, dup := at[s.GetName()]; !dup {
			at[s.GetName()] = d
		}
	}
	out := make([]BootStep, 0, len(at))
	for name, d := range at {
		out = append(out, BootStep{Stage: name, Uptime: d})
	}
	slices.SortFunc(out, func(a, b BootStep) int {
		if c := cmp.Compare(a.Uptime, b.Uptime); c != 0 {
			return c
		}
		return cmp.Compare(known[a.Stage], known[b.Stage])
	})
	var prev time.Duration
	for i := range out {
		out[i].Took = out[i].Uptime - prev
		prev = out[i].Uptime
	}
	return out
}

// FormatBootSteps is the log form: "init_started=2.66s(+0.64s) ...".
func FormatBootSteps(steps []BootStep) string {
	parts := make([]string, 0, len(steps))
	for _, s := range steps {
		parts = append(parts, fmt.Sprintf("%s=%.2fs(+%.2fs)", s.Stage, s.Uptime.Seconds(), s.Took.Seconds()))
	}
	return strings.Join(parts, " ")
}
