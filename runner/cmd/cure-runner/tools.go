package main

import (
	"context"
	"errors"

	"github.com/cure-oss/cure/runner/phases"
	"github.com/cure-oss/cure/tools/diskimage"
	"github.com/cure-oss/cure/tools/firstboot"
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
