package phases

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"unicode"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/runner/fwplan"
	"github.com/cure-oss/cure/tools/mstflint"
	"github.com/cure-oss/cure/tools/pci"
)

// mellanoxVendor is the PCI vendor id of Mellanox (NVIDIA networking).
const mellanoxVendor = 0x15b3

// NewMFT returns the mstflint tool the runner uses: the binaries are
// resolved once (PATH, then /usr/bin and /usr/sbin, where the image puts
// them) so the exec seam runs absolute paths, and device presence is
// checked under sysRoot.
func NewMFT(sysRoot string, log *slog.Logger) *mstflint.Tool {
	return &mstflint.Tool{SysRoot: sysRoot, Mstflint: resolveTool("mstflint"), Mstfwreset: resolveTool("mstfwreset"), Log: log}
}

// resolveTool finds name on PATH or in the usual bin directories; the bare
// name is returned when absent so the tool's own check reports it.
func resolveTool(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, d := range []string{"/usr/bin", "/usr/sbin", "/bin", "/sbin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return name
}

// NICDevice is one Mellanox/NVIDIA Ethernet or InfiniBand adapter: PCI
// function 0 of a physical function (mstflint burns per device, not per
// port, and virtual functions have no flash).
type NICDevice struct {
	PCI      string // 0000:17:00.0
	DeviceID uint16
	Class    uint32
	// Family is the adapter family from the PCI device id ("ConnectX-7"),
	// "" when the id is not in the table.
	Family string
	// PartNumber and Name come from the PCI VPD (PN keyword and the
	// identifier string) when the kernel exposes it.
	PartNumber, Name string
}

func (d NICDevice) String() string {
	s := fmt.Sprintf("%s %#04x", d.PCI, d.DeviceID)
	if d.Family != "" {
		s += " " + d.Family
	}
	if d.PartNumber != "" {
		s += " " + d.PartNumber
	}
	return s
}

// mellanoxFamilies maps PCI device ids (pci.ids) of physical functions to
// adapter families, for match.model.
var mellanoxFamilies = map[uint16]string{
	0x1013: "ConnectX-4", 0x1015: "ConnectX-4 Lx", 0x1017: "ConnectX-5", 0x1019: "ConnectX-5 Ex",
	0x101b: "ConnectX-6", 0x101d: "ConnectX-6 Dx", 0x101f: "ConnectX-6 Lx", 0x1021: "ConnectX-7",
	0x1023: "ConnectX-8", 0xa2d2: "BlueField", 0xa2d6: "BlueField-2", 0xa2dc: "BlueField-3",
}

// FindMellanoxNICs lists the Mellanox Ethernet (class 0x0200xx) and
// InfiniBand (0x0207xx) physical functions .0 under root/sys/bus/pci/devices,
// sorted by address. A device whose sysfs files cannot be read is an error:
// skipping it would hide an adapter the manifest pins.
func FindMellanoxNICs(root string) ([]NICDevice, error) {
	fns, err := pci.Functions(root)
	if err != nil {
		return nil, err
	}
	var out []NICDevice
	for _, f := range fns {
		if !strings.HasSuffix(f.Addr, ".0") {
			continue
		}
		vendor, err := f.Vendor()
		if err != nil {
			return nil, err
		}
		if vendor != mellanoxVendor {
			continue
		}
		class, err := f.Class()
		if err != nil {
			return nil, err
		}
		if c := class >> 8; c != 0x0200 && c != 0x0207 {
			continue
		}
		if f.VirtualFunction() {
			continue
		}
		dev, err := f.Device()
		if err != nil {
			return nil, err
		}
		d := NICDevice{PCI: f.Addr, DeviceID: dev, Class: class, Family: mellanoxFamilies[dev]}
		// VPD is optional: old kernels and some firmware do not expose it.
		if b, err := f.ReadFile("vpd"); err == nil {
			d.Name, d.PartNumber = parseVPD(b)
		}
		out = append(out, d)
	}
	return out, nil
}

// parseVPD reads the identifier string (large resource tag 0x82) and the
// PN keyword of the read-only section (tag 0x90) from PCI VPD (PCI Local
// Bus 3.0 §6.4 / PCIe 6.28). It stops at the end tag or at the first
// malformed resource: VPD is advisory, used only to match model globs.
func parseVPD(b []byte) (name, pn string) {
	for len(b) >= 3 {
		tag := b[0]
		if tag&0x80 == 0 { // small resource: the end tag (0x78) or unknown
			return name, pn
		}
		n := int(b[1]) | int(b[2])<<8
		if 3+n > len(b) {
			return name, pn
		}
		data := b[3 : 3+n]
		switch tag {
		case 0x82:
			name = vpdString(data)
		case 0x90:
			for len(data) >= 3 {
				k, l := string(data[:2]), int(data[2])
				if 3+l > len(data) {
					break
				}
				if k == "PN" {
					pn = vpdString(data[3 : 3+l])
				}
				data = data[3+l:]
			}
		}
		b = b[3+n:]
	}
	return name, pn
}

// vpdString trims a VPD string field. The bytes are the adapter's: what
// is not UTF-8 becomes U+FFFD, since the name ends up in protobuf strings.
// Padding is spaces or NULs, in either order.
func vpdString(b []byte) string {
	s := strings.TrimFunc(string(b), func(r rune) bool { return r == 0 || unicode.IsSpace(r) })
	return strings.ToValidUTF8(s, "\uFFFD")
}

// NICObservation is one adapter and what `mstflint query` said of it.
type NICObservation struct {
	Device NICDevice
	Query  *mstflint.Query // nil when Err is set
	Err    error
}

// nicKind is the Mellanox/NVIDIA adapters' firmware, checked with
// mstflint and burnt in-band (PSID checked by mstflint before anything is
// written). Adapters no entry selects are SKIPs.
type nicKind struct {
	e *Executor
	// images are the downloaded image files by entry: eight fabric
	// adapters share one file. removeImages deletes them.
	images map[*manifests.Firmware]string
}

func (nicKind) Kind() string                  { return manifests.ComponentNIC }
func (nicKind) Label(o NICObservation) string { return "nic/" + o.Device.PCI }

func (nicKind) Broken(o NICObservation) string {
	if o.Err == nil {
		return ""
	}
	return fmt.Sprintf("%s: %v", o.Device, o.Err)
}

func (nicKind) Match(m manifests.Match, o NICObservation) (bool, string, error) {
	ok, err := matchNIC(m, o.Device, o.Query)
	return ok, "", err
}

func (nicKind) Judge(fw *manifests.Firmware, o NICObservation) fwplan.Judgement {
	st, msg := gate(*fw, o.Query.Running())
	if o.Query.PendingReset() {
		msg += fmt.Sprintf(" (flash holds %s, waiting for a reset)", o.Query.FWVersion)
	}
	return fwplan.Judgement{Status: st, Observed: o.Query.Running(), Message: fmt.Sprintf("%s PSID %s: %s", o.Device, o.Query.PSID, msg)}
}

func (nicKind) NoMatch(fw *manifests.Firmware, obs []NICObservation) string {
	return fmt.Sprintf("firmware entry %q: no Mellanox adapter matches %s (adapters seen: %s)", fw.Name, nicSelector(fw.Match), seenNICs(obs))
}

func (nicKind) Unmatched(o NICObservation) (fwplan.Judgement, bool) {
	return fwplan.Judgement{Observed: o.Query.Running(),
		Message: fmt.Sprintf("%s PSID %s: no nic firmware entry selects this adapter", o.Device, o.Query.PSID)}, true
}

func (nicKind) words() fwWords {
	return fwWords{devices: "adapter(s)", pinned: "pinned ", action: "update", kind: "nic firmware update", done: "updated"}
}

func (nicKind) entries(sku *manifests.SKU) ([]manifests.Firmware, string) {
	return inBand(sku, manifests.ComponentNIC), fmt.Sprintf("manifest %s pins no nic firmware (in-band): nothing to check", sku.Metadata.Name)
}

// observe lists the adapters and queries each; no adapter, or no usable
// mstflint, skips the phase (with a SKIP verdict per adapter for the latter).
func (k *nicKind) observe(ctx context.Context, entries []manifests.Firmware, emit agent.Emitter) ([]NICObservation, *agent.PhaseOutcome) {
	end := func(out agent.PhaseOutcome) ([]NICObservation, *agent.PhaseOutcome) { return nil, &out }
	devs, err := FindMellanoxNICs(k.e.cfg.Root)
	if err != nil {
		return end(failed("nic: listing Mellanox adapters: %v", err))
	}
	if len(devs) == 0 {
		return end(skipped("no Mellanox (PCI vendor 0x15b3) Ethernet/InfiniBand adapter on this node: %d nic firmware entr(y/ies) not checked", len(entries)))
	}
	mft := k.e.cfg.MFT
	if mft == nil {
		return end(skipped("runner has no mstflint tool configured: %d Mellanox adapter(s) not checked", len(devs)))
	}
	if err := mft.Available(); err != nil {
		reason := err.Error()
		var se *mstflint.SkipError
		if errors.As(err, &se) {
			reason = se.Reason
		}
		for _, d := range devs {
			emit.Verdict(&curev1.Verdict{Component: "nic/" + d.PCI, Check: "firmware", Status: curev1.VerdictStatus_SKIP, Message: reason})
		}
		return end(skipped("%s: %d Mellanox adapter(s) not checked", reason, len(devs)))
	}
	obs := make([]NICObservation, 0, len(devs))
	for _, d := range devs {
		q, err := mft.QueryDevice(ctx, d.PCI)
		obs = append(obs, NICObservation{Device: d, Query: q, Err: err})
	}
	return obs, nil
}

func (k *nicKind) update(ctx context.Context, a *curev1.Assignment, c fwplan.Check[NICObservation], _ agent.Emitter) (*curev1.Verdict, bool) {
	return k.e.updateNIC(ctx, a, c, k.images)
}

func (k *nicKind) removeImages() {
	for _, p := range k.images {
		os.Remove(p)
	}
}

// runNIC reports a verdict per Mellanox adapter and, in provision and service modes,
// burns the manifest's image on drifted ones.
func (e *Executor) runNIC(ctx context.Context, a *curev1.Assignment, emit agent.Emitter) agent.PhaseOutcome {
	k := &nicKind{e: e, images: map[*manifests.Firmware]string{}}
	defer k.removeImages()
	return runFirmware[NICObservation](ctx, e, k, a, emit)
}

// matchNIC applies vendorId, psid and the model glob of m.
func matchNIC(m manifests.Match, d NICDevice, q *mstflint.Query) (bool, error) {
	if m.VendorID != "" {
		v, err := pci.ParseVendorID(m.VendorID)
		if err != nil {
			return false, fmt.Errorf("match.vendorId: %w", err)
		}
		if v != mellanoxVendor {
			return false, nil
		}
	}
	if m.PSID != "" && !strings.EqualFold(m.PSID, q.PSID) {
		return false, nil
	}
	if m.Model != "" {
		hit := false
		for _, s := range []string{d.Family, d.PartNumber, d.Name} {
			if s == "" {
				continue
			}
			ok, err := path.Match(m.Model, s)
			if err != nil {
				return false, fmt.Errorf("match.model %q: %w", m.Model, err)
			}
			hit = hit || ok
		}
		if !hit {
			return false, nil
		}
	}
	return true, nil
}

func nicSelector(m manifests.Match) string {
	p := []string{}
	if m.VendorID != "" {
		p = append(p, fmt.Sprintf("vendorId=%q", m.VendorID))
	}
	if m.PSID != "" {
		p = append(p, fmt.Sprintf("psid=%q", m.PSID))
	}
	if m.Model != "" {
		p = append(p, fmt.Sprintf("model=%q", m.Model))
	}
	return "{" + strings.Join(p, " ") + "}"
}

func seenNICs(obs []NICObservation) string {
	var p []string
	for _, o := range obs {
		if o.Query != nil {
			p = append(p, fmt.Sprintf("%s PSID %s", o.Device, o.Query.PSID))
		}
	}
	if len(p) == 0 {
		return "none answered a query"
	}
	return strings.Join(p, ", ")
}

// nicActivation maps the manifest's activation onto mstflint's. An image
// without mstfwreset cannot reset the adapter, so a reset becomes a reboot.
func nicActivation(activation string, haveReset bool) (mstflint.Activation, string) {
	switch activation {
	case manifests.ActivationHostReboot:
		return mstflint.ActivateReboot, ""
	case manifests.ActivationNone:
		return mstflint.ActivateNone, ""
	default: // mstfwreset, or unset: a reset where possible, else a reboot
		if !haveReset {
			return mstflint.ActivateReboot, "mstfwreset is not in this image: a host reboot activates the image"
		}
		return mstflint.ActivateReset, ""
	}
}

// updateNIC burns one adapter and verifies. It returns the verdict and
// whether a host reboot is needed before the new firmware runs.
func (e *Executor) updateNIC(ctx context.Context, a *curev1.Assignment, c fwplan.Check[NICObservation], images map[*manifests.Firmware]string) (*curev1.Verdict, bool) {
	v := &curev1.Verdict{Component: nicKind{}.Label(c.Device), Check: "firmware_update", Observed: c.Observed, Expected: expected(*c.Entry)}
	fail := func(format string, args ...any) (*curev1.Verdict, bool) {
		v.Status = curev1.VerdictStatus_FAIL
		v.Message = fmt.Sprintf(format, args...)
		return v, false
	}
	mode, err := modes.FromProto(a.GetMode())
	if err != nil {
		return fail("%v", err)
	}
	if err := modes.CheckWrite(mode, "nic firmware update"); err != nil {
		return fail("%v", err)
	}
	fw := c.Entry
	if fw.Artifact == nil {
		return fail("firmware entry %q drifted but names no artifact", fw.Name)
	}
	image, ok := images[fw]
	if !ok {
		url, err := ArtifactURL(*fw.Artifact, a.GetArtifactBaseUrl())
		if err != nil {
			return fail("%v", err)
		}
		image, err = fetchArtifactFile(ctx, e.cfg.HTTP, url, *fw.Artifact, e.cfg.TmpDir, maxFirmwareImage)
		if err != nil {
			return fail("%v", err)
		}
		images[fw] = image
	}
	_, resetErr := lookTool(e.cfg.MFT.LookPath, e.cfg.MFT.Mstfwreset, "mstfwreset")
	act, note := nicActivation(fw.Activation, resetErr == nil)
	plan, res, err := e.cfg.MFT.Update(ctx, c.Device.Device.PCI, image, fw.Version, act)
	if err != nil {
		var pm *mstflint.PSIDMismatchError
		if errors.As(err, &pm) {
			return fail("%s: nothing burnt: %v", fw.Name, err)
		}
		if res != nil && res.Burned {
			return fail("%s %s -> %s: burnt, then: %v", c.Device.Device.PCI, c.Observed, fw.Version, err)
		}
		return fail("%s %s -> %s: %v", c.Device.Device.PCI, c.Observed, fw.Version, err)
	}
	notes := append([]string{plan.String()}, res.Notes...)
	if note != "" {
		notes = append(notes, note)
	}
	switch {
	case plan.Noop():
		v.Status = curev1.VerdictStatus_PASS
		v.Message = "already running the image's version: " + strings.Join(notes, "; ")
		return v, false
	case res.Activated:
		v.Status = curev1.VerdictStatus_PASS
		v.Observed = res.Final.Running()
		v.Message = fmt.Sprintf("updated %s -> %s, running version verified after mstfwreset: %s", c.Observed, v.Observed, strings.Join(notes, "; "))
		return v, false
	case act == mstflint.ActivateNone:
		// The manifest asks for no activation: the image runs after
		// whatever reboot comes next; CURE does not force one.
		v.Status = curev1.VerdictStatus_DRIFT
		v.Message = fmt.Sprintf("%s on flash; activation none: runs after the next reboot: %s", plan.ImageVersion, strings.Join(notes, "; "))
		return v, false
	default:
		v.Status = curev1.VerdictStatus_DRIFT
		v.Message = fmt.Sprintf("%s on flash, verified; activates at the next reboot: %s", plan.ImageVersion, strings.Join(notes, "; "))
		return v, true
	}
}

func lookTool(lp func(string) (string, error), name, def string) (string, error) {
	if lp == nil {
		lp = exec.LookPath
	}
	if name == "" {
		name = def
	}
	return lp(name)
}
