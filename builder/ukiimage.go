package builder

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cure-oss/cure/api/imagereport"
	"github.com/cure-oss/cure/builder/uki"
)

// UKIName is the signed unified kernel image beside vmlinuz.
const UKIName = "cure.efi"

// UKIEpoch is the signed image's PE timestamp and signing time when
// SOURCE_DATE_EPOCH is unset (the image is reproducible either way).
const UKIEpoch = 1700000000

// UKIBootArg is what the signed image's fixed command line adds to the
// spec's: the runner asks for its boot parameters (token, node,
// coordinator) over HTTPS from the server the firmware loaded it from,
// since nothing can be added to a signed command line.
const UKIBootArg = "cure.boot=https"

// UKIOptions are the signing inputs of BuildUKI.
type UKIOptions struct {
	Key, Cert string // the site's Secure Boot key and certificate (PEM, RSA)
	Stub      string // default uki.DefaultStub
	Epoch     int64  // default: SOURCE_DATE_EPOCH, else UKIEpoch
	Log       *slog.Logger
}

// BuildUKI builds the signed UKI from the image in outDir (vmlinuz and the
// zstd initramfs, the smallest on the wire) with the report's command line
// plus UKIBootArg, and records it in report.json as "uki". The default
// image files stay as they are.
func BuildUKI(ctx context.Context, outDir string, o UKIOptions) (imagereport.UKI, error) {
	if err := uki.CheckTools(); err != nil {
		return imagereport.UKI{}, err
	}
	rp := filepath.Join(outDir, ReportName)
	b, err := os.ReadFile(rp)
	if err != nil {
		return imagereport.UKI{}, fmt.Errorf("signed image: %w", err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return imagereport.UKI{}, fmt.Errorf("signed image: %s: %w", rp, err)
	}
	if o.Epoch == 0 {
		o.Epoch = UKIEpoch
		if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
			if _, err := fmt.Sscan(v, &o.Epoch); err != nil {
				return imagereport.UKI{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", v, err)
			}
		}
	}
	osrel := fmt.Sprintf("NAME=\"CURE\"\nID=cure\nPRETTY_NAME=\"CURE (kernel %s)\"\nVERSION_ID=%s\n", r.KernelVersion, r.KernelVersion)
	rep, err := uki.Build(ctx, uki.Options{Stub: o.Stub, Kernel: filepath.Join(outDir, VmlinuzName), Initrd: filepath.Join(outDir, ZstName),
		Cmdline: r.Cmdline + " " + UKIBootArg, OSRelease: osrel, Key: o.Key, Cert: o.Cert, Epoch: o.Epoch, Out: filepath.Join(outDir, UKIName)}, nil)
	if err != nil {
		return rep, err
	}
	r.UKI = &rep
	if err := writeReport(outDir, &r); err != nil {
		return rep, err
	}
	if o.Log != nil {
		o.Log.Info("signed unified kernel image", "file", filepath.Join(outDir, UKIName), "sha256", rep.SHA256, "authenticode", rep.AuthenticodeSHA256, "pcrs", rep.PCRs)
	}
	return rep, nil
}
