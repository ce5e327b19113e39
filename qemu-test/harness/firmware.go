package harness

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/qemu-test/vbmc"
)

// FirmwarePackage builds a virtual-BMC firmware package (vbmc's JSON header
// line + payload) for component (an inventory Id, or a prefix ending in "*")
// at version. The payload is derived from both, so each (component, version)
// has its own content hash.
func FirmwarePackage(component, version string) []byte {
	payload := bytes.Repeat([]byte("cure-test-firmware "+component+" "+version+"\n"), 1024)
	sum := sha256.Sum256(payload)
	h := vbmc.PackageHeader{Component: component, Version: version, Size: int64(len(payload)), SHA256: hex.EncodeToString(sum[:])}
	return append(h.Line(), payload...)
}

// AddFirmwarePackage writes FirmwarePackage(component, version) into the
// coordinator's content-addressed artifact store, where its artifact server
// (and through --bmc-base-url the virtual BMCs) finds it, and returns the
// manifest artifact naming it.
func (e *Env) AddFirmwarePackage(component, version string) (*manifests.Artifact, error) {
	pkg := FirmwarePackage(component, version)
	sum := sha256.Sum256(pkg)
	hexsum := hex.EncodeToString(sum[:])
	dir := filepath.Join(e.StateDir, "artifacts", "sha256")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("firmware package %s %s: %w", component, version, err)
	}
	// Write then rename: the artifact server never serves a partial file.
	tmp := filepath.Join(dir, "."+hexsum+".tmp")
	if err := os.WriteFile(tmp, pkg, 0o644); err != nil {
		return nil, fmt.Errorf("firmware package %s %s: %w", component, version, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, hexsum)); err != nil {
		return nil, fmt.Errorf("firmware package %s %s: %w", component, version, err)
	}
	return &manifests.Artifact{SHA256: hexsum, Size: int64(len(pkg)), Format: "bin"}, nil
}
