package vbmc

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// FirmwareKind says how a component's new firmware activates.
type FirmwareKind string

const (
	// KindBMC activates on a Manager reset (#Manager.Reset).
	KindBMC FirmwareKind = "bmc"
	// KindBIOS activates on the next host boot.
	KindBIOS FirmwareKind = "bios"
	// KindHGX (GPU baseboard: GPUs, NVSwitches, ERoTs) activates on the next
	// host boot.
	KindHGX FirmwareKind = "hgx"
)

// FirmwareSpec is one member of the simulated FirmwareInventory.
type FirmwareSpec struct {
	ID         string // SoftwareInventory Id, e.g. "BMC", "HGX_FW_GPU_SXM_1"
	Name       string
	Version    string
	Updateable bool
	Kind       FirmwareKind
	SoftwareID string // default: derived from ID
}

// DefaultFirmware is the inventory a BMC gets when Config.Firmware is nil:
// the mockup's BMC and BIOS plus an HGX baseboard named the way NVIDIA's
// HGX BMC names its members.
func DefaultFirmware() []FirmwareSpec {
	fw := []FirmwareSpec{
		{ID: "BMC", Name: "Contoso BMC Firmware", Version: "1.45.455b66-rev4", Updateable: true, Kind: KindBMC, SoftwareID: "1624A9DF-5E13-47FC-874A-DF3AFF143089"},
		{ID: "BIOS", Name: "Contoso BIOS Firmware", Version: "P79 v1.45", Updateable: true, Kind: KindBIOS, SoftwareID: "FEE82A67-6CE2-4625-9F44-237AD2402C28"},
	}
	for i := 1; i <= 8; i++ {
		fw = append(fw,
			FirmwareSpec{ID: fmt.Sprintf("HGX_FW_GPU_SXM_%d", i), Name: fmt.Sprintf("GPU SXM %d firmware", i), Version: "96.00.A5.00.01", Updateable: true, Kind: KindHGX},
			FirmwareSpec{ID: fmt.Sprintf("HGX_FW_ERoT_GPU_SXM_%d", i), Name: fmt.Sprintf("GPU SXM %d ERoT firmware", i), Version: "01.03.0183.0000_n04", Updateable: true, Kind: KindHGX})
	}
	for i := 0; i <= 3; i++ {
		fw = append(fw,
			FirmwareSpec{ID: fmt.Sprintf("HGX_FW_NVSwitch_%d", i), Name: fmt.Sprintf("NVSwitch %d firmware", i), Version: "96.10.55.00.01", Updateable: true, Kind: KindHGX},
			FirmwareSpec{ID: fmt.Sprintf("HGX_FW_ERoT_NVSwitch_%d", i), Name: fmt.Sprintf("NVSwitch %d ERoT firmware", i), Version: "01.03.0183.0000_n04", Updateable: true, Kind: KindHGX})
	}
	return fw
}

func validateFirmware(specs []FirmwareSpec) error {
	seen := map[string]bool{}
	for i, s := range specs {
		switch {
		case s.ID == "" || strings.ContainsAny(s.ID, "/?#"):
			return fmt.Errorf("Firmware[%d].ID %q: want a non-empty URL segment", i, s.ID)
		case seen[s.ID]:
			return fmt.Errorf("Firmware[%d].ID %q: duplicate", i, s.ID)
		case s.Version == "":
			return fmt.Errorf("Firmware[%d] (%s).Version is empty", i, s.ID)
		case s.Kind != KindBMC && s.Kind != KindBIOS && s.Kind != KindHGX:
			return fmt.Errorf("Firmware[%d] (%s).Kind %q: want bmc, bios or hgx", i, s.ID, s.Kind)
		}
		seen[s.ID] = true
	}
	return nil
}

// fwState is one inventory member's live state.
type fwState struct {
	spec    FirmwareSpec
	active  string // the running version, what the inventory reports
	pending string // flashed but not yet activated
	flashes int    // images written to this component's flash
	// previous is the version active before the last activation (served
	// as a "Previous-" member under InventoryIDs "versioned").
	previous string
	pos      int // 1-based position, the member Id under InventoryIDs "positions"
}

// memberID is the FirmwareInventory member Id of f as this BMC's vendor
// writes it: Dell's iDRAC puts the version in it
// ("Installed-<n>-<version>__<component>", so an update renames the
// member), some BMCs number members ("1").
func (b *BMC) memberID(f *fwState) string {
	switch b.cfg.InventoryIDs {
	case "versioned":
		return fmt.Sprintf("Installed-%d-%s__%s", 25000+f.pos, f.active, f.spec.ID)
	case "positions":
		return fmt.Sprint(f.pos)
	}
	return f.spec.ID
}

// previousID is the Id of f's previous-version member ("" if none).
func (b *BMC) previousID(f *fwState) string {
	if b.cfg.InventoryIDs != "versioned" || f.previous == "" {
		return ""
	}
	return fmt.Sprintf("Previous-%d-%s__%s", 25000+f.pos, f.previous, f.spec.ID)
}

// fwByMemberID finds the member with inventory Id id; prev reports that
// id names a previous-version member (read-only).
func (b *BMC) fwByMemberID(id string) (f *fwState, prev bool) {
	for _, f := range b.fw {
		if b.memberID(f) == id {
			return f, false
		}
		if p := b.previousID(f); p != "" && p == id {
			return f, true
		}
	}
	return nil, false
}

// The test firmware package format (what SimpleUpdate downloads and
// MultipartHttpPushUri receives as UpdateFile):
//
//	{"component":"BMC","version":"1.2.3","size":1234,"sha256":"..."}\n
//	<payload bytes>
//
// One JSON header line (at most 4 KiB) followed by the payload. component
// is an inventory Id, or a prefix ending in "*" ("HGX_FW_GPU_SXM_*") for a
// bundle covering several members. size and sha256 describe the payload
// and are checked when present, so a truncated or corrupted transfer fails
// the task instead of being flashed.
type PackageHeader struct {
	Component string `json:"component"`
	Version   string `json:"version"`
	Size      int64  `json:"size,omitempty"`
	SHA256    string `json:"sha256,omitempty"`
}

// maxHeader bounds the header line, so garbage is refused quickly.
const maxHeader = 4096

// Line is the header as it starts a package, newline included.
func (h PackageHeader) Line() []byte {
	b, _ := json.Marshal(h) // plain strings and ints: cannot fail
	return append(b, '\n')
}

// Matches reports whether the package applies to inventory member id.
func (h PackageHeader) Matches(id string) bool {
	if p, ok := strings.CutSuffix(h.Component, "*"); ok {
		return strings.HasPrefix(id, p)
	}
	return h.Component == id
}

// readPackage parses the header and streams the payload through a hash,
// never holding it in memory. It returns the header and payload size.
func readPackage(r io.Reader) (PackageHeader, int64, error) {
	br := bufio.NewReaderSize(r, maxHeader)
	line, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return PackageHeader{}, 0, fmt.Errorf("firmware package: no header line within the first %d bytes", maxHeader)
		}
		return PackageHeader{}, 0, fmt.Errorf("firmware package: reading header line: %w", err)
	}
	var h PackageHeader
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return PackageHeader{}, 0, fmt.Errorf("firmware package: header line %q: %w", bytes.TrimSpace(line), err)
	}
	if h.Component == "" || h.Version == "" {
		return PackageHeader{}, 0, fmt.Errorf("firmware package: header line %q: component and version are required", bytes.TrimSpace(line))
	}
	sum := sha256.New()
	n, err := io.Copy(sum, br)
	if err != nil {
		return h, n, fmt.Errorf("firmware package %s %s: payload after %d bytes: %w", h.Component, h.Version, n, err)
	}
	if h.Size > 0 && n != h.Size {
		return h, n, fmt.Errorf("firmware package %s %s: payload is %d bytes, header says %d", h.Component, h.Version, n, h.Size)
	}
	if h.SHA256 != "" && !strings.EqualFold(hex.EncodeToString(sum.Sum(nil)), h.SHA256) {
		return h, n, fmt.Errorf("firmware package %s %s: payload sha256 %x, header says %s", h.Component, h.Version, sum.Sum(nil), h.SHA256)
	}
	return h, n, nil
}

// Flashes is how many images were written to component id (staged or
// activated), so tests can prove a component was never flashed twice.
func (b *BMC) Flashes(id string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if f := b.fwByID(id); f != nil {
		return f.flashes
	}
	return 0
}

// FirmwareVersion returns the active and the pending (staged, not yet
// activated; empty if none) version of component id.
func (b *BMC) FirmwareVersion(id string) (active, pending string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if f := b.fwByID(id); f != nil {
		return f.active, f.pending, true
	}
	return "", "", false
}

func (b *BMC) fwByID(id string) *fwState {
	i := slices.IndexFunc(b.fw, func(f *fwState) bool { return f.spec.ID == id })
	if i < 0 {
		return nil
	}
	return b.fw[i]
}

// activateLocked makes staged firmware of the given kinds the running one.
func (b *BMC) activateLocked(kinds ...FirmwareKind) {
	for _, f := range b.fw {
		if f.pending != "" && slices.Contains(kinds, f.spec.Kind) {
			b.log.Info("firmware activated", "component", f.spec.ID, "from", f.active, "to", f.pending)
			f.previous, f.active, f.pending = f.active, f.pending, ""
		}
	}
}

// softwareID makes a stable SoftwareId for members that have none.
func softwareID(id string) string {
	s := sha256.Sum256([]byte(id))
	h := hex.EncodeToString(s[:16])
	return strings.ToUpper(h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32])
}
