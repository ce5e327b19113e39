// Package manifests defines schema v1 of CURE's YAML manifests — SKU manifests
// (the end state of a node: firmware, BIOS settings, wipe policy, OS image) and
// validation suites — and a strict loader whose errors name file, line and field.
//
// Go field names follow the YAML keys, so "spec.firmware[3].version" in an
// error is SKU.Spec.Firmware[3].Version in code.
package manifests

import (
	"time"

	"github.com/cure-oss/cure/manifests/version"
)

// APIVersion is the only apiVersion this package reads and writes.
const APIVersion = "cure.dev/v1"

// Document kinds.
const (
	KindSKU             = "SKU"
	KindValidationSuite = "ValidationSuite"
)

// Firmware components, one per provisioning phase that handles them.
const (
	ComponentBMC  = "bmc"
	ComponentBIOS = "bios"
	ComponentHGX  = "hgx"
	ComponentNIC  = "nic"
	ComponentDPU  = "dpu"
	ComponentNVMe = "nvme"
)

// Components lists firmware components in pipeline order.
var Components = []string{ComponentBMC, ComponentBIOS, ComponentHGX, ComponentNIC, ComponentDPU, ComponentNVMe}

// Firmware update paths.
const (
	ViaRedfish = "redfish"
	ViaInBand  = "in-band"
)

// Gates: when is the running firmware good enough.
const (
	GateEqual   = version.GateEqual   // running == desired (after version normalisation)
	GateAtLeast = version.GateAtLeast // running >= desired, same version family
)

// Activations: what makes a staged image the running one.
const (
	ActivationNone       = "none"
	ActivationBMCReset   = "bmc-reset"
	ActivationHostReboot = "host-reboot"
	ActivationNVMeReset  = "nvme-reset"
	ActivationMstfwreset = "mstfwreset"
	ActivationDPUReset   = "dpu-reset"
)

// Wipe policies, strongest first.
const (
	WipeNone        = "none"
	WipePSIDRevert  = "psid-revert"
	WipeRevertSID   = "revert-sid"
	WipeCryptoErase = "crypto-erase"
	WipeSanitize    = "sanitize"
	WipeFormat      = "format"
)

// Disk transports for DiskSelector.Transport.
const (
	TransportNVMe   = "nvme"
	TransportSATA   = "sata"
	TransportSAS    = "sas"
	TransportVirtio = "virtio"
	TransportUSB    = "usb"
	TransportAny    = "any"
)

// OS image formats (the file as served).
const (
	ImageRaw     = "raw"
	ImageRawGzip = "raw.gz"
	ImageRawZstd = "raw.zst"
	ImageRawXz   = "raw.xz"
	ImageQcow2   = "qcow2"
)

// Validation check types.
const (
	CheckGPU               = "gpu"
	CheckMemory            = "memory"
	CheckCPU               = "cpu"
	CheckNVMeSMART         = "nvme-smart"
	CheckStorageThroughput = "storage-throughput"
	CheckEthernet          = "ethernet"
	CheckInfiniBand        = "infiniband"
	CheckThermal           = "thermal"
)

// Metadata names a document.
type Metadata struct {
	Name        string            `yaml:"name"`
	Description string            `yaml:"description,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
}

// SKU is a node SKU manifest: the end state of one class of node.
type SKU struct {
	APIVersion string   `yaml:"apiVersion"`
	Kind       string   `yaml:"kind"`
	Metadata   Metadata `yaml:"metadata"`
	Spec       SKUSpec  `yaml:"spec"`
}

// SKUSpec is what a SKU declares. Every section is optional; an absent section
// means "this SKU does not manage it".
type SKUSpec struct {
	// Firmware in apply order within each component's phase.
	Firmware []Firmware `yaml:"firmware,omitempty"`
	BIOS     *BIOS      `yaml:"bios,omitempty"`
	Wipe     *Wipe      `yaml:"wipe,omitempty"`
	OS       *OS        `yaml:"os,omitempty"`
	// Hardware is what a node of this SKU must have (checked, never changed).
	Hardware *Hardware `yaml:"hardware,omitempty"`
}

// Firmware is the desired firmware of one device family.
type Firmware struct {
	Name      string `yaml:"name"`
	Component string `yaml:"component"`
	Via       string `yaml:"via"`
	Match     Match  `yaml:"match"`
	// Version is the desired running version (see manifests/version).
	Version string `yaml:"version"`
	// Gate is GateEqual (the default, filled in by the loader) or GateAtLeast.
	Gate string `yaml:"gate"`
	// Artifact is optional: a component that already matches needs none, and
	// a DRIFT with no artifact is a plan error at run time.
	Artifact   *Artifact `yaml:"artifact,omitempty"`
	Activation string    `yaml:"activation"`
}

// Match selects the devices (in-band) or FirmwareInventory members (Redfish)
// a Firmware entry applies to. Model, RedfishID, Name, SoftwareID and
// RelatedItem are path.Match globs; every field set must match.
//
// Over Redfish the member Id alone is a weak handle: vendors put positions
// ("1"), versions ("Installed-25227-6.10.30.00__...") or nothing stable in
// it, so a redfish entry may select by Name, SoftwareId, a RelatedItem link
// (the @odata.id of the device the firmware runs on) and Updateable too.
type Match struct {
	Model     string `yaml:"model,omitempty"`
	VendorID  string `yaml:"vendorId,omitempty"`
	RedfishID string `yaml:"redfishId,omitempty"`
	PSID      string `yaml:"psid,omitempty"`

	// Redfish FirmwareInventory member fields (via redfish only).
	Name        string `yaml:"name,omitempty"`
	SoftwareID  string `yaml:"softwareId,omitempty"`
	RelatedItem string `yaml:"relatedItem,omitempty"`
	Updateable  *bool  `yaml:"updateable,omitempty"`
}

// Artifact is a file the coordinator serves, identified by its content.
type Artifact struct {
	// URL is optional; when empty the coordinator serves the file by SHA256.
	URL    string `yaml:"url,omitempty"`
	SHA256 string `yaml:"sha256"`
	Size   int64  `yaml:"size"`
	Format string `yaml:"format"`
}

// BIOS holds Redfish BIOS attributes. Values are string, int64 or bool.
type BIOS struct {
	Settings map[string]any `yaml:"settings"`
}

// Wipe says how data disks are erased before install.
type Wipe struct {
	Policy string `yaml:"policy"`
	// AllowWeakerFallback lets the runner use the next weaker policy a disk
	// supports (e.g. format when PSID revert is unsupported) instead of failing.
	AllowWeakerFallback bool         `yaml:"allowWeakerFallback,omitempty"`
	Disks               DiskSelector `yaml:"disks,omitempty"`
}

// DiskSelector picks block devices. Every set field must match. Model is a
// path.Match glob; Serial and Name are exact.
type DiskSelector struct {
	Transport string   `yaml:"transport,omitempty"`
	Model     string   `yaml:"model,omitempty"`
	Serial    string   `yaml:"serial,omitempty"`
	Name      string   `yaml:"name,omitempty"`
	MinSize   ByteSize `yaml:"minSize,omitempty"`
	MaxSize   ByteSize `yaml:"maxSize,omitempty"`
}

// IsZero reports whether no field is set.
func (d DiskSelector) IsZero() bool { return d == DiskSelector{} }

// OS is the operating system image and where it goes.
type OS struct {
	// Image's SHA256 and Size are those of the file as served (compressed).
	Image      Artifact     `yaml:"image"`
	TargetDisk DiskSelector `yaml:"targetDisk"`
	GrowRoot   bool         `yaml:"growRoot,omitempty"`
	FirstBoot  FirstBoot    `yaml:"firstBoot,omitempty"`
}

// FirstBoot configures the installed OS's first boot (cloud-init NoCloud).
type FirstBoot struct {
	// Hostname is a template; only {{.NodeID}} and {{.Serial}} are allowed.
	Hostname string `yaml:"hostname,omitempty"`
	// UserData is an extra #cloud-config document the runner merges.
	UserData string `yaml:"userData,omitempty"`
}

// IsZero reports whether no field is set.
func (f FirstBoot) IsZero() bool { return f == FirstBoot{} }

// ValidationSuite is a set of checks with pass bars (diagnostic and burn-in).
type ValidationSuite struct {
	APIVersion string              `yaml:"apiVersion"`
	Kind       string              `yaml:"kind"`
	Metadata   Metadata            `yaml:"metadata"`
	Spec       ValidationSuiteSpec `yaml:"spec"`
}

// ValidationSuiteSpec lists the checks of a suite.
type ValidationSuiteSpec struct {
	// Duration bounds the whole suite; zero means no bound beyond the checks'.
	Duration Duration `yaml:"duration,omitempty"`
	FailFast bool     `yaml:"failFast,omitempty"`
	Checks   []Check  `yaml:"checks"`
}

// Check is one validation check.
type Check struct {
	Name string `yaml:"name"`
	Type string `yaml:"type"`
	// AppliesTo is a path.Match glob over component ids ("gpu/*", "nvme/0").
	AppliesTo string `yaml:"appliesTo,omitempty"`
	// Duration is how long the check runs (burn-in); zero means one shot.
	Duration Duration `yaml:"duration,omitempty"`
	// Interval is how often a long-running check samples.
	Interval Duration `yaml:"interval,omitempty"`
	// Params are check-specific knobs: scalars or lists of scalars.
	Params map[string]any `yaml:"params,omitempty"`
	// Thresholds are the pass bars, keyed by metric name.
	Thresholds map[string]Threshold `yaml:"thresholds,omitempty"`
}

// Threshold is a pass bar: Min and/or Max, or Equals (a scalar).
type Threshold struct {
	Min    *float64 `yaml:"min,omitempty"`
	Max    *float64 `yaml:"max,omitempty"`
	Equals any      `yaml:"equals,omitempty"`
}

// Duration is a time.Duration written as a Go duration string ("90s", "4h").
type Duration time.Duration

// String formats d like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalYAML writes d as a Go duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// Document is any manifest: exactly one of SKU and Suite is set, per Kind.
type Document struct {
	Kind  string
	SKU   *SKU
	Suite *ValidationSuite
}

// FirmwareFor returns the firmware entries of one component, in apply order.
func (s *SKU) FirmwareFor(component string) []Firmware {
	var out []Firmware
	for _, f := range s.Spec.Firmware {
		if f.Component == component {
			out = append(out, f)
		}
	}
	return out
}
