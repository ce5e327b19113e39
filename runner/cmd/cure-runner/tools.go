package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/cure-oss/cure/runner/boot"
	"github.com/cure-oss/cure/runner/optools"
	"github.com/cure-oss/cure/runner/phases"
	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/diskimage"
	"github.com/cure-oss/cure/tools/firstboot"
	"github.com/cure-oss/cure/tools/gpt"
	"github.com/cure-oss/cure/tools/mdraid"
	"github.com/cure-oss/cure/tools/toolbundle"
)

// diskImages is phases.ImageWriter over tools/diskimage.
type diskImages struct{}

func (diskImages) Write(ctx context.Context, o diskimage.Options) (*diskimage.Result, error) {
	return diskimage.Write(ctx, o)
}

func (diskImages) Verify(ctx context.Context, target string, d diskimage.Digest) error {
	return diskimage.Verify(ctx, target, d)
}

// refuseImages is the dry run's image writer: never touch a disk.
type refuseImages struct{}

func (refuseImages) Write(context.Context, diskimage.Options) (*diskimage.Result, error) {
	return nil, errors.New("dry run: refusing to write a disk image")
}

func (refuseImages) Verify(context.Context, string, diskimage.Digest) error {
	return errors.New("dry run: nothing written to verify")
}

// seedWriter is phases.SeedWriter over tools/firstboot.
type seedWriter struct{ sysRoot, devRoot, tmpDir string }

func (s seedWriter) FindSeedPartition(disk string) (string, error) {
	return firstboot.FindSeedPartition(s.sysRoot, s.devRoot, disk)
}

func (s seedWriter) WriteSeed(part string, seed phases.Seed) error {
	return firstboot.WriteSeed(part, firstboot.Seed{
		InstanceID: seed.InstanceID, Hostname: seed.Hostname, CallbackURL: seed.CallbackURL,
		CallbackToken: seed.CallbackToken, ExtraUserData: seed.ExtraUserData,
	}, firstboot.SyscallMounter{}, s.tmpDir)
}

// storageSeams are os_install's spec.os.storage tools: mdadm and mkfs from
// PATH or the pinned tool bundle (fetched at first use, like mstflint),
// md's modules loaded on purpose (they have no modalias), superblocks and
// labels read in Go, the array's extra partition through tools/gpt.
func (r *runner) storageSeams(root string) phases.StorageSeams {
	od := &optools.OnDemand{Config: optools.Config{PinFile: optools.PinFile, BaseURL: r.cmd.HTTP, Dir: optools.Dir, Self: optools.Self}}
	if raw, err := os.ReadFile(optools.PinFile); err == nil {
		if od.Config.Pin, err = toolbundle.ParsePin(optools.PinFile, raw); err != nil {
			r.log.Warn("tool bundle pin unreadable: mdadm and mkfs unavailable", "err", err)
		}
	}
	return phases.StorageSeams{
		Run: od.Run,
		LoadModule: func(name string) error {
			dir, err := r.modulesDir()
			if err != nil {
				return err
			}
			loaded, err := boot.LoadModule(dir, filepath.Join(root, "proc"), name, boot.KernelLoader{})
			r.log.Info("storage modules loaded", "module", name, "loaded", loaded)
			return err
		},
		Examine:      mdraid.Examine,
		FSLabel:      blockdev.FSLabelOf,
		Resolve:      filepath.EvalSymlinks,
		AddPartition: gpt.AddPartitionDevice,
	}
}
