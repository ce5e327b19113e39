package phases

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/diskimage"
	"github.com/cure-oss/cure/tools/gpt"
)

// ArtifactURL resolves where to download an artifact: the manifest URL when
// it is absolute, else <base>/sha256/<hex> on the coordinator's
// content-addressed artifact server.
func ArtifactURL(art manifests.Artifact, base string) (string, error) {
	if u, err := url.Parse(art.URL); err == nil && art.URL != "" && u.IsAbs() {
		if u.Scheme != "http" && u.Scheme != "https" {
			return "", fmt.Errorf("artifact url %q: expected http or https", art.URL)
		}
		return art.URL, nil
	}
	if b, err := hex.DecodeString(art.SHA256); err != nil || len(b) != 32 {
		return "", fmt.Errorf("artifact sha256 %q: expected 64 hex digits", art.SHA256)
	}
	if base == "" {
		return "", fmt.Errorf("artifact %s has no absolute url and the assignment has no artifact_base_url", art.SHA256)
	}
	bu, err := url.Parse(base)
	if err != nil || !bu.IsAbs() {
		return "", fmt.Errorf("assignment artifact_base_url %q: expected an absolute http URL", base)
	}
	return strings.TrimRight(base, "/") + "/sha256/" + strings.ToLower(art.SHA256), nil
}

// chunkConnections is how many Range connections download an image that
// has a chunk list: each range is verified on its own, and on a fast
// network one TCP connection is often the limit.
const chunkConnections = 4

// InstallPlan is what os_install will do, computed before touching a disk.
type InstallPlan struct {
	URL string
	// ChunksURL is where the image's chunk list is, when the manifest pins
	// one (spec.os.image.chunks): always the coordinator's store.
	ChunksURL string
	Image     manifests.Artifact
	// Target is the one disk, or with spec.os.storage.raid the array,
	// known once os_install has created it.
	Target blockdev.Disk
	// Storage is spec.os.storage resolved on the node's drives; nil
	// without one.
	Storage *StoragePlan
	Seed    Seed
}

// PlanInstall checks the mode, resolves the artifact, selects exactly one
// target disk (never the boot medium) and renders the seed. It is pure.
func PlanInstall(a *curev1.Assignment, sku *manifests.SKU, disks []blockdev.Disk, serial string) (*InstallPlan, error) {
	if err := CheckDiskWrite(a.GetMode()); err != nil {
		return nil, err
	}
	osSpec := sku.Spec.OS
	if osSpec == nil {
		return nil, fmt.Errorf("manifest %s: spec.os is absent: nothing to install", sku.Metadata.Name)
	}
	u, err := ArtifactURL(osSpec.Image, a.GetArtifactBaseUrl())
	if err != nil {
		return nil, fmt.Errorf("manifest %s: spec.os.image: %w", sku.Metadata.Name, err)
	}
	var chunksURL string
	if osSpec.Image.Chunks != "" {
		if chunksURL, err = ArtifactURL(manifests.Artifact{SHA256: osSpec.Image.Chunks}, a.GetArtifactBaseUrl()); err != nil {
			return nil, fmt.Errorf("manifest %s: spec.os.image.chunks: %w", sku.Metadata.Name, err)
		}
	}
	var disk blockdev.Disk
	var target *blockdev.Disk
	if st := osSpec.Storage; st == nil || st.RAID == nil {
		sel := selector(osSpec.TargetDisk)
		if disk, err = blockdev.Select(disks, sel); err != nil {
			return nil, fmt.Errorf("manifest %s: spec.os.targetDisk %s: %w", sku.Metadata.Name, sel, err)
		}
		if disk.BootMedium || disk.ReadOnly { // Select refuses these; a second lock on the door costs nothing
			return nil, fmt.Errorf("target disk %s is the boot medium or read-only: refusing", disk.Name)
		}
		target = &disk
	}
	var storage *StoragePlan
	userData := osSpec.FirstBoot.UserData
	if osSpec.Storage != nil {
		if storage, err = PlanStorage(osSpec.Storage, disks, target); err != nil {
			return nil, fmt.Errorf("manifest %s: %w", sku.Metadata.Name, err)
		}
		if userData, err = mountsUserData(userData, storage.Filesystems); err != nil {
			return nil, fmt.Errorf("manifest %s: %w", sku.Metadata.Name, err)
		}
	}
	fb := a.GetFirstBoot()
	host := fb.GetHostname()
	if host == "" {
		if host, err = osSpec.FirstBoot.RenderHostname(a.GetNodeId(), serial); err != nil {
			return nil, fmt.Errorf("manifest %s: spec.os.firstBoot.hostname: %w", sku.Metadata.Name, err)
		}
	}
	inst := fb.GetInstanceId()
	if inst == "" {
		inst = a.GetRunId()
	}
	return &InstallPlan{URL: u, ChunksURL: chunksURL, Image: osSpec.Image, Target: disk, Storage: storage, Seed: Seed{
		InstanceID: inst, Hostname: host, CallbackURL: fb.GetCallbackUrl(),
		CallbackToken: fb.GetCallbackToken(), ExtraUserData: userData,
	}}, nil
}

// CheckDiskWrite is the executor boundary for anything that writes a disk
// image: the mode's disk policy (modes.CheckDiskWrite: service, which
// flashes firmware, is refused here like the read-only modes), and of the
// modes that may write disks only provision installs an OS.
func CheckDiskWrite(m curev1.Mode) error {
	mode, err := modes.FromProto(m)
	if err != nil {
		return fmt.Errorf("os_install refused: %w", err)
	}
	if err := modes.CheckDiskWrite(mode, "os_install"); err != nil {
		return err
	}
	if mode != modes.Provision {
		return fmt.Errorf("os_install refused: mode %s never installs an OS (only provision writes an image)", mode)
	}
	return nil
}

func (e *Executor) runOSInstall(ctx context.Context, a *curev1.Assignment, emit agent.Emitter) agent.PhaseOutcome {
	component := "disk"
	fail := func(err error) agent.PhaseOutcome {
		emit.Verdict(&curev1.Verdict{Component: component, Check: "os_install", Status: curev1.VerdictStatus_FAIL, Message: err.Error()})
		return failed("os_install: %v", err)
	}
	// The mode check comes first: nothing below runs, not even disk
	// enumeration, unless this run may write.
	if err := CheckDiskWrite(a.GetMode()); err != nil {
		return fail(err)
	}
	sku, err := e.sku(a)
	if err != nil {
		return fail(err)
	}
	if e.cfg.Disks == nil || e.cfg.Images == nil || e.cfg.Seeds == nil {
		return fail(errors.New("runner is missing its disk, image or seed tool"))
	}
	disks, err := e.cfg.Disks()
	if err != nil {
		return fail(fmt.Errorf("listing disks (refusing to pick a target without knowing the boot medium): %w", err))
	}
	plan, err := PlanInstall(a, sku, disks, e.cfg.SystemSerial)
	if err != nil {
		return fail(err)
	}
	zeroed := e.isZeroed(plan.Target)
	if plan.Storage != nil {
		if e.cfg.Storage.Run == nil {
			return fail(errors.New("spec.os.storage: this runner has no storage tools (mdadm, mkfs): refusing"))
		}
		if plan.Storage.Level != "" {
			if plan.Target, zeroed, err = e.createArray(ctx, emit, plan.Storage); err != nil {
				return fail(err)
			}
		}
	}
	d := plan.Target
	component = "disk/" + d.Name
	e.cfg.Log.Info("os_install plan", "url", plan.URL, "target", d.Path, "size", d.SizeBytes, "model", d.Model, "serial", d.Serial, "hostname", plan.Seed.Hostname)
	emit.Log("INFO", "installing OS image", map[string]string{"url": plan.URL, "target": d.Path, "model": d.Model, "serial": d.Serial})

	labels := map[string]string{"disk": d.Name}
	opts := diskimage.Options{
		URL: plan.URL, SHA256: plan.Image.SHA256, Size: plan.Image.Size, Format: plan.Image.Format,
		Target: d.Path, Client: e.cfg.HTTP,
		ChunksURL: plan.ChunksURL, ChunksSHA256: plan.Image.Chunks,
		// After this boot's verified erase sampled zeros, zero blocks are
		// skipped rather than zeroed; the read-back below covers them.
		TargetZeroed: zeroed,
		Progress:     e.installProgress(emit, labels),
	}
	if plan.ChunksURL != "" {
		opts.Connections = chunkConnections
	}
	res, err := e.writeImage(ctx, emit, d, &opts)
	if err != nil {
		return fail(err)
	}
	// After the read-back: the GPT fix rewrites header bytes the hash covers.
	layout := "partition table untouched"
	if e.cfg.FixPartitionTable != nil {
		layout, err = e.cfg.FixPartitionTable(d.Path, sku.Spec.OS.GrowRoot)
		if err != nil {
			return fail(fmt.Errorf("partition table of %s: %w", d.Path, err))
		}
		emit.Log("INFO", "partition table: "+layout, map[string]string{"disk": d.Name})
	}
	part, err := e.findSeedPartition(ctx, d.Name)
	if err != nil {
		return fail(err)
	}
	if err := e.cfg.Seeds.WriteSeed(part, plan.Seed); err != nil {
		return fail(fmt.Errorf("writing first-boot seed to %s: %w", part, err))
	}
	if err := e.finishStorage(ctx, emit, plan.Storage, d.Path); err != nil {
		return fail(err)
	}
	mbps := 0.0
	if s := res.Duration.Seconds(); s > 0 {
		mbps = float64(res.WrittenBytes) / 1e6 / s
	}
	emit.Metric("os_install.throughput", mbps, "MB/s", labels)
	observed := installObserved(res, opts.TargetZeroed, mbps)
	emit.Verdict(&curev1.Verdict{
		Component: component, Check: "os_install", Status: curev1.VerdictStatus_PASS,
		Observed: observed, Expected: "sha256:" + strings.ToLower(plan.Image.SHA256) + " (download)",
		Message: fmt.Sprintf("image %s written to %s and read back; %s; seed on %s (hostname %s)", plan.URL, d.Path, layout, part, plan.Seed.Hostname),
	})
	return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_OK, Message: fmt.Sprintf("installed on %s: %s", d.Path, observed)}
}

// installProgress reports the bytes written and the throughput so far, at
// most every ProgressEvery.
func (e *Executor) installProgress(emit agent.Emitter, labels map[string]string) func(written int64) {
	start := e.cfg.now()
	var last time.Time
	return func(written int64) {
		now := e.cfg.now()
		if now.Sub(last) < e.cfg.ProgressEvery {
			return
		}
		last = now
		emit.Metric("os_install.written", float64(written), "bytes", labels)
		if s := now.Sub(start).Seconds(); s > 0 {
			emit.Metric("os_install.throughput", float64(written)/1e6/s, "MB/s", labels)
		}
	}
}

// writeImage writes the image to d and reads it back; a read-back that
// fails after zero blocks were skipped on an erased disk writes again,
// zeroing (opts.TargetZeroed says which write the result is of).
func (e *Executor) writeImage(ctx context.Context, emit agent.Emitter, d blockdev.Disk, opts *diskimage.Options) (*diskimage.Result, error) {
	// Stage durations feed the run's time buckets (os_install.stage_seconds,
	// provisioner-lite/timebuckets): download, decode and write stream
	// together and are charged by what held the stream up (diskimage.Stages);
	// the read-back is its own pass.
	var streamTime, readbackTime time.Duration
	var stages diskimage.Stages
	t := e.cfg.now()
	res, err := e.cfg.Images.Write(ctx, *opts)
	streamTime += e.cfg.now().Sub(t)
	if res != nil {
		stages = addStages(stages, res.Stages)
	}
	if err != nil {
		return nil, fmt.Errorf("writing %s to %s: %w", opts.URL, d.Path, err)
	}
	t = e.cfg.now()
	verr := e.cfg.Images.Verify(ctx, d.Path, res.Readback)
	readbackTime += e.cfg.now().Sub(t)
	if verr != nil && opts.TargetZeroed {
		// The erase's samples read zeros but the disk does not: write
		// again, zeroing instead of skipping.
		e.setZeroed(d, false)
		emit.Log("WARN", "read-back failed after skipping zero blocks on an erased disk; rewriting with zeroing", map[string]string{"disk": d.Name, "error": verr.Error()})
		opts.TargetZeroed = false
		t = e.cfg.now()
		if res, err = e.cfg.Images.Write(ctx, *opts); err != nil {
			return nil, fmt.Errorf("rewriting %s to %s: %w", opts.URL, d.Path, err)
		}
		streamTime += e.cfg.now().Sub(t)
		stages = addStages(stages, res.Stages)
		t = e.cfg.now()
		verr = e.cfg.Images.Verify(ctx, d.Path, res.Readback)
		readbackTime += e.cfg.now().Sub(t)
	}
	for _, st := range streamStages(streamTime, stages) {
		emit.Metric("os_install.stage_seconds", st.d.Seconds(), "s", map[string]string{"disk": d.Name, "stage": st.name})
	}
	emit.Metric("os_install.stage_seconds", readbackTime.Seconds(), "s", map[string]string{"disk": d.Name, "stage": "readback"})
	if verr != nil {
		return nil, fmt.Errorf("verifying %s after write: %w", d.Path, verr)
	}
	return res, nil
}

// installObserved is the install verdict's observation: what was written
// and read back, and how.
func installObserved(res *diskimage.Result, skippedZeros bool, mbps float64) string {
	zeros := "zeroed"
	if skippedZeros {
		zeros = "skipped on the erased disk"
	}
	observed := fmt.Sprintf("sha256:%s read back %s, %d bytes (%d zero, %s) %.1f MB/s, decoder %s", res.SHA256, res.Readback, res.WrittenBytes, res.ZeroBytes, zeros, mbps, res.Decoder)
	if res.Verification != "" {
		observed += fmt.Sprintf(", verified %s over %d connection(s)", res.Verification, res.Connections)
	}
	return observed
}

// findSeedPartition polls: after BLKRRPART the partition nodes appear
// asynchronously.
func (e *Executor) findSeedPartition(ctx context.Context, disk string) (string, error) {
	deadline := e.cfg.now().Add(e.cfg.SeedWait)
	for {
		part, err := e.cfg.Seeds.FindSeedPartition(disk)
		if err == nil {
			return part, nil
		}
		if e.cfg.now().After(deadline) {
			return "", fmt.Errorf("finding the CIDATA partition on %s after %v: %w", disk, e.cfg.SeedWait, err)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("finding the CIDATA partition on %s: %w (last: %v)", disk, ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// FixGPT moves a GPT's backup header to the end of the real disk (an image
// is smaller than the disk it lands on) and grows the last partition when
// asked. An MBR image has nothing to move, but cannot be grown.
func FixGPT(path string, growRoot bool) (string, error) {
	grow := 0
	if growRoot {
		grow = gpt.GrowLast
	}
	p, err := gpt.FixDevice(path, grow)
	if errors.Is(err, gpt.ErrNotGPT) {
		if growRoot {
			return "", fmt.Errorf("manifest asks growRoot but the image is not GPT-partitioned: %w", err)
		}
		return "MBR partition table: no backup GPT header to move", nil
	}
	if err != nil {
		return "", err
	}
	if p.Noop() {
		return "GPT already spans the disk", nil
	}
	return "GPT fixed: " + p.String(), nil
}

func addStages(a, b diskimage.Stages) diskimage.Stages {
	return diskimage.Stages{Download: a.Download + b.Download, Decode: a.Decode + b.Decode, Write: a.Write + b.Write}
}

type stageTime struct {
	name string
	d    time.Duration
}

// streamStages splits the streamed passes' wall time: the writer's own
// attribution where it has one, the rest of the pass (opening the target,
// fsync, re-reading the partition table) charged to the write; a writer
// that reports no stages leaves the pass whole ("stream").
func streamStages(stream time.Duration, s diskimage.Stages) []stageTime {
	sum := s.Download + s.Decode + s.Write
	if sum <= 0 {
		return []stageTime{{"stream", stream}}
	}
	if sum > stream {
		// Another clock than ours measured the stages: scale them to it.
		f := float64(stream) / float64(sum)
		s.Download = time.Duration(float64(s.Download) * f)
		s.Decode = time.Duration(float64(s.Decode) * f)
		s.Write = stream - s.Download - s.Decode
	} else {
		s.Write += stream - sum
	}
	return []stageTime{{"download", s.Download}, {"decode", s.Decode}, {"write", s.Write}}
}
