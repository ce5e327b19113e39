package main

import (
	"flag"

	"github.com/cure-oss/cure/provisioner-lite/coordinator"
)

// registerArchFlags: the CURE images of other architectures than
// --image-dir's (amd64). docs/ARM.md.
func registerArchFlags(fs *flag.FlagSet, c *coordinator.Config) {
	fs.StringVar(&c.ImageDirArm64, "image-dir-arm64", c.ImageDirArm64, "the arm64 image (cure-build --arch arm64: make image-arm64), booted by the nodes of SKUs with spec.arch arm64 "+
		"and by unknown machines whose iPXE is arm64 (empty: none, and a SKU with spec.arch arm64 is refused at start)")
}
