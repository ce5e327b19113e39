//go:build e2e_arm64

package qemutest

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/qemu-test/harness"
)

// TestArm64Provision (make e2e-arm64; aarch64 under TCG is too slow for
// make test, whose TestBuildArm64, TestBootImageByArch,
// TestArm64ClientGetsArm64IPXE and TestArm64DirectBoot prove the parts
// without a boot): an x86-64 node and then an arm64 node, each behind its
// virtual BMC, are provisioned end to end by one coordinator build. The
// arm64 node's SKU says spec.arch arm64, so the coordinator boots it the
// arm64 image (--image-dir-arm64); it registers, passes the hardware gate,
// installs the OS image and its arm64 host OS calls back. Each run's
// power-on to runner registered is logged as a bench-arm64 line.
func TestArm64Provision(t *testing.T) {
	out := outDir(t)
	armImage, armHost := filepath.Join(out, "image-arm64"), filepath.Join(out, "hostos-image-arm64")
	for _, p := range []string{filepath.Join(armImage, "vmlinuz"), filepath.Join(armHost, "vmlinuz")} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%v: run make image-arm64 hostos-arm64 (make e2e-arm64 does)", err)
		}
	}
	x86 := startEnv(t, harness.Options{})
	dumpOnFailure(t, x86)
	x86Boot, x86Up := provisionTimed(t, x86)

	arm := startEnv(t, harness.Options{Arm64: &harness.Arm64Nodes{HostOSImage: armHost},
		ExtraCoordinatorArgs: []string{"--image-dir-arm64", armImage},
		EditManifest:         func(s *manifests.SKU) { s.Spec.Arch = manifests.ArchARM64 }})
	dumpOnFailure(t, arm)
	armBoot, armUp := provisionTimed(t, arm)
	n := arm.Nodes[0]
	var devs []string
	for _, b := range n.BMC.History() {
		devs = append(devs, string(b.Device))
	}
	if !slices.Equal(devs, []string{"Pxe", "Hdd"}) {
		t.Errorf("arm64 boots = %v, want [Pxe Hdd]", devs)
	}
	// The kernel that ran was arm64's, in the CURE boot and in the
	// installed OS's.
	con, err := os.ReadFile(n.Console)
	if err != nil {
		t.Fatal(err)
	}
	if c := len(arm64BannerRE.FindAll(con, -1)); c != 2 {
		t.Errorf("the arm64 node's console shows %d arm64 kernel boots, want 2 (CURE, then the installed OS)", c)
	}
	// Power-on to registered includes x86's firmware PXE and iPXE
	// download, which the arm64 node's direct boot skips; the guest's
	// uptime at registration (kernel start to runner registered) compares
	// the images themselves.
	t.Logf("bench-arm64 power-on to runner registered: arm64 %.1fs, x86-64 %.1fs; guest uptime at registration: arm64 %s, x86-64 %s",
		armBoot.Seconds(), x86Boot.Seconds(), armUp, x86Up)
}

// provisionTimed provisions env's node, checks the run as
// TestProvisionFromPowerOff does, and returns its power-on to runner
// registered time (the wait-for-cure phase, from the timeline) and the
// guest's uptime when it registered.
func provisionTimed(t *testing.T, env *harness.Env) (time.Duration, string) {
	t.Helper()
	var on, registered time.Time
	var uptime string
	rep := followRun(t, env, modes.Provision, false, func(e *curev1.TimelineEntry) {
		switch {
		case e.GetPhase() == string(modes.WaitForCURE) && on.IsZero():
			on = time.UnixMilli(e.GetTimeUnixMs())
		case e.GetPhase() == string(modes.WaitForCURE) && e.GetStatus() == "ok":
			registered = time.UnixMilli(e.GetTimeUnixMs())
			if m := guestUptimeRE.FindStringSubmatch(e.GetMessage()); m != nil {
				uptime = m[1]
			}
		}
	})
	checkProvisioned(t, env, rep)
	if on.IsZero() || registered.IsZero() {
		t.Fatalf("the timeline has no wait-for-cure start and end")
	}
	return registered.Sub(on), uptime
}

var arm64BannerRE = regexp.MustCompile(`Linux version \S+-arm64 `)

var guestUptimeRE = regexp.MustCompile(`guest_uptime=(\d+ms)`)
