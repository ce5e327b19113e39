// Package manifests defines schema v1 of CURE's YAML manifests — SKU manifests
// (the end state of a node: firmware, BIOS settings, wipe policy, OS image) and
// validation suites — and a strict loader whose errors name file, line and field.
//
// Go field names follow the YAML keys, so "spec.firmware[3].version" in an
// error is SKU.Spec.Firmware[3].Version in code.
package manifests

import (
	"fmt"
	"strings"
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
	// Checks driving the tool bundle's reference tools (CheckTools).
	CheckStorageRandom   = "storage-random"   // fio: 4 KiB random read IOPS, p99 latency per drive
	CheckMemoryBandwidth = "memory-bandwidth" // stress-ng --stream per NUMA node
	CheckCPUThroughput   = "cpu-throughput"   // stress-ng --cpu --verify per socket
	CheckNICThroughput   = "nic-throughput"   // iperf3 against a server the suite names
	// The network between the nodes of a burn-in batch, paired and rotated
	// by the coordinator: iperf3 on Ethernet ports, perftest on RDMA ports.
	CheckNodePair = "node-pair"
	// A site's own program, fetched from the artifact server and pinned by
	// sha256 (Check.Program); it reports verdicts as JSON lines.
	CheckSite = "site"
	// GPU bandwidth checks driving the site's GPU tools (the image's
	// driver bundle carries them: docs/VALIDATION.md), through cure-nvml.
	CheckGPUBandwidth  = "gpu-bandwidth"  // nvbandwidth: host<->GPU per GPU, GPU<->GPU per pair
	CheckNCCLAllReduce = "nccl-allreduce" // nccl-tests all_reduce_perf over the node's GPUs (and per pair)
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
	// Attestation is AttestationRequired (every boot must attest its
	// measured boot with the node's TPM before it gets work or secrets)
	// or AttestationOptional, the default: a boot that presents an
	// attestation must pass it, and a node once enrolled with an EK must
	// attest on every later boot (docs/SECURITY.md).
	Attestation string `yaml:"attestation,omitempty"`
	// Admission is what a node must show before it is in service
	// (admission.go); nil: in service once its provision succeeds.
	Admission *Admission `yaml:"admission,omitempty"`
	// Inspection proposes this SKU for an enlisted machine that matches
	// it (inspection.go); nil: never proposed.
	Inspection *Inspection `yaml:"inspection,omitempty"`
	// Arch is the nodes' CPU architecture, ArchAMD64 (the default) or
	// ArchARM64: the coordinator boots each node the CURE image of its
	// architecture (--image-dir, --image-dir-arm64) and refuses an arm64
	// SKU when no arm64 image is configured (docs/ARM.md).
	Arch string `yaml:"arch,omitempty"`
}

// SKU architectures (spec.arch), GOARCH names as cure-build --arch takes.
const (
	ArchAMD64 = "amd64"
	ArchARM64 = "arm64"
)

// Architecture is the SKU's architecture, ArchAMD64 when spec.arch is unset.
func (s SKUSpec) Architecture() string {
	if s.Arch == "" {
		return ArchAMD64
	}
	return s.Arch
}

// SKU attestation policies.
const (
	AttestationRequired = "required"
	AttestationOptional = "optional"
)

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
	// Chunks, on an OS image only, is the sha256 of the image's chunk list
	// (tools/chunklist; `provisioner-lite artifacts add` makes it), an
	// artifact of its own: with it the runner verifies the image's chunks
	// on all cores as they arrive and writes nothing unverified. Without
	// it the image's sha256 is checked when the download ends.
	Chunks string `yaml:"chunks,omitempty"`
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
	Image Artifact `yaml:"image"`
	// TargetDisk is where the image goes; required unless Storage.RAID
	// names the drives (the image then goes to the array).
	TargetDisk DiskSelector `yaml:"targetDisk,omitempty"`
	GrowRoot   bool         `yaml:"growRoot,omitempty"`
	FirstBoot  FirstBoot    `yaml:"firstBoot,omitempty"`
	Storage    *Storage     `yaml:"storage,omitempty"`
}

// Storage is the layout beyond one image on one disk: an md array the
// image is written to, and extra filesystems.
type Storage struct {
	RAID        *RAID        `yaml:"raid,omitempty"`
	Filesystems []Filesystem `yaml:"filesystems,omitempty"`
}

// RAID levels the runner builds (Linux md, metadata 1.0).
const (
	RAID1  = "raid1"
	RAID10 = "raid10"
)

// RAIDLevels lists the accepted levels; raidMinMembers their least member count.
var (
	RAIDLevels     = []string{RAID1, RAID10}
	raidMinMembers = map[string]int{RAID1: 2, RAID10: 4}
)

// RAID is an md array over named drives; each member selector must match
// exactly one drive on the node, and no drive twice.
type RAID struct {
	Level   string         `yaml:"level"`
	Members []DiskSelector `yaml:"members"`
}

// Filesystem types the runner creates.
const (
	FSExt4 = "ext4"
	FSXFS  = "xfs"
)

// FilesystemTypes lists the accepted filesystem types.
var FilesystemTypes = []string{FSExt4, FSXFS}

// Filesystem is an extra filesystem: on a whole named drive (Disk), or in
// a partition over the array's space after the image (Array).
type Filesystem struct {
	Type  string        `yaml:"type"`
	Label string        `yaml:"label"`
	Mount string        `yaml:"mount"`
	Disk  *DiskSelector `yaml:"disk,omitempty"`
	Array bool          `yaml:"array,omitempty"`
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
	// Grace is what the coordinator adds to the planned duration (Planned)
	// before it calls the validate phase overdue; zero means DefaultGrace.
	// Liveness is proven by the runner's heartbeats, not by this deadline.
	Grace    Duration `yaml:"grace,omitempty"`
	FailFast bool     `yaml:"failFast,omitempty"`
	// Resume is what a node reset during the suite does: ResumeContinue
	// (checks that ended stay ended, the interrupted one and the rest run)
	// or ResumeRestart (the whole suite again). Empty means continue.
	Resume string `yaml:"resume,omitempty"`
	// End is where the node goes once the suite is done: EndHostOS (boot
	// from disk, verified by the installed OS's callback where the node has
	// one on record), EndPowerOff, or EndStay (idle in CURE). Empty means
	// EndStay, what a suite did before it could say.
	End string `yaml:"end,omitempty"`
	// Fleet sets how results are compared with the SKU's fleet (MARGINAL);
	// nil means the defaults (DefaultFleetWindow, DefaultFleetMinNodes) for
	// the checks that name fleet bands.
	Fleet *FleetPolicy `yaml:"fleet,omitempty"`
	// BMC are the bars on the BMC's evidence of the run (bmcbars.go); nil
	// means DefaultBMCBars.
	BMC *BMCBars `yaml:"bmc,omitempty"`
	// Stages group checks that run at once. A suite written with a flat
	// `checks:` list has no stages: each check is its own step, in order.
	Stages []Stage `yaml:"-"`
	// Checks is every check of the suite in order; a check from `stages:`
	// has Stage set to its stage's name.
	Checks []Check `yaml:"checks"`
}

// Resume policies of a suite.
const (
	ResumeContinue = "continue"
	ResumeRestart  = "restart"
)

// End policies of a suite (ValidationSuiteSpec.End).
const (
	EndHostOS   = "host-os"
	EndPowerOff = "power-off"
	EndStay     = "stay"
)

// EndPolicy is the suite's end policy, EndStay when unset.
func (s *ValidationSuiteSpec) EndPolicy() string {
	if s.End == "" {
		return EndStay
	}
	return s.End
}

// DefaultGrace is the validate phase's grace when a suite sets none:
// enough for one-shot checks, driver bring-up and a slow device.
const DefaultGrace = Duration(15 * time.Minute)

// Stage is a group of checks that run at the same time, loading the node
// as a training job does; the stage ends when its last check ends.
type Stage struct {
	Name string `yaml:"name"`
	// Duration is the stage's length: a check in it without its own
	// duration runs this long.
	Duration Duration `yaml:"duration,omitempty"`
	// Telemetry is what the runner samples (and the coordinator polls from
	// the BMC) while the stage runs; nil means no sampling.
	Telemetry *Telemetry `yaml:"telemetry,omitempty"`
	// Checks are the names of the stage's checks (in Spec.Checks).
	Checks []string `yaml:"-"`
}

// Telemetry is sampling during a stage and the bars on the sampled series.
type Telemetry struct {
	// Interval is the runner's host sampling period (hwmon, throttle
	// counters, clocks, GPU readings); zero means DefaultTelemetryInterval.
	Interval Duration `yaml:"interval,omitempty"`
	// BMCInterval is how often the coordinator reads the BMC's sensors;
	// zero means DefaultBMCInterval.
	BMCInterval Duration `yaml:"bmcInterval,omitempty"`
	// Thresholds are bars on the sampled series, keyed by series metric
	// (tools/telemetry/bars names them; the suite build refuses others).
	Thresholds map[string]Threshold `yaml:"thresholds,omitempty"`
}

// Sampling defaults.
const (
	DefaultTelemetryInterval = Duration(10 * time.Second)
	DefaultBMCInterval       = Duration(30 * time.Second)
)

// FleetPolicy is how a node's measured results are compared with the
// recent passing results of other nodes of its SKU.
type FleetPolicy struct {
	// Window is how recent a fleet result must be; zero: DefaultFleetWindow.
	Window Duration `yaml:"window,omitempty"`
	// MinNodes is how many other nodes must have a result before the band
	// applies; below it only the absolute thresholds do, and the report
	// says so. Zero means DefaultFleetMinNodes.
	MinNodes int `yaml:"minNodes,omitempty"`
}

// Fleet defaults.
const (
	DefaultFleetWindow   = Duration(30 * 24 * time.Hour)
	DefaultFleetMinNodes = 5
)

// Band is a check metric's fleet band: a value more than Below robust
// deviations (scaled MAD) under the fleet median, or more than Above over
// it, is MARGINAL. At least one is set.
type Band struct {
	Below *float64 `yaml:"below,omitempty"`
	Above *float64 `yaml:"above,omitempty"`
}

// Planned is how long the suite is planned to run: its duration bound when
// set, else the sum over its steps (a stage, or a lone check) of the longest
// check in each. One-shot checks count as zero; the grace covers them.
func (s *ValidationSuiteSpec) Planned() time.Duration {
	if s.Duration > 0 {
		return time.Duration(s.Duration)
	}
	var total time.Duration
	stageLen := map[string]time.Duration{}
	for _, st := range s.Stages {
		stageLen[st.Name] = time.Duration(st.Duration)
	}
	for _, c := range s.Checks {
		d := time.Duration(c.Duration)
		if c.Stage == "" {
			total += d
			continue
		}
		stageLen[c.Stage] = max(stageLen[c.Stage], d)
	}
	for _, d := range stageLen {
		total += d
	}
	return total
}

// Deadline is Planned plus the grace: when the coordinator gives up on a
// validate phase that is still alive.
func (s *ValidationSuiteSpec) Deadline() time.Duration {
	g := s.Grace
	if g <= 0 {
		g = DefaultGrace
	}
	return s.Planned() + time.Duration(g)
}

// Check is one validation check.
type Check struct {
	Name string `yaml:"name"`
	Type string `yaml:"type"`
	// Stage is the name of the stage the check runs in ("" : on its own).
	Stage string `yaml:"-"`
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
	// Fleet are the fleet bands, keyed by measured metric name.
	Fleet map[string]Band `yaml:"fleet,omitempty"`
	// Program is the site program a CheckSite check runs (set for that
	// type only, required there).
	Program *SiteProgram `yaml:"program,omitempty"`
	// Optional lets the check test nothing (no component matched, its
	// tool missing) with a SKIP that shows the reason; without it such a
	// check is an ERROR (docs/VALIDATION.md, "Fail closed").
	Optional *Optional `yaml:"optional,omitempty"`
}

// Optional is why a check may test nothing on some nodes ("QEMU test
// node: no GPU"); the reason is required and shown in the report.
type Optional struct {
	Reason string `yaml:"reason"`
}

// OptionalReason is the check's optional reason ("" : not optional).
func (c Check) OptionalReason() string {
	if c.Optional == nil {
		return ""
	}
	return c.Optional.Reason
}

// SiteProgram is a site check's program and its declared metadata (the
// check's name and params are the rest): an executable the coordinator
// serves from its artifact store, pinned by sha256 and size.
type SiteProgram struct {
	// URL is optional; when empty the coordinator serves it by SHA256.
	URL    string `yaml:"url,omitempty"`
	SHA256 string `yaml:"sha256"`
	Size   int64  `yaml:"size"`
	// Description says what the program tests (the timeline says it when
	// the check starts).
	Description string `yaml:"description"`
	// Timeout is the program's time limit; zero means the check's
	// duration (its own, else its stage's), else DefaultSiteTimeout.
	Timeout Duration `yaml:"timeout,omitempty"`
	// Network is what network the program sees: SiteNetworkNone (the
	// default: a network namespace of its own with only a loopback that
	// is down, so it cannot reach the coordinator, a BMC or another node
	// as the node) or SiteNetworkNode (the node's, for a check that must
	// reach a switch or a server; the suite says so, in review).
	Network string `yaml:"network,omitempty"`
}

// The networks a site program may see (SiteProgram.Network).
const (
	SiteNetworkNone = "none"
	SiteNetworkNode = "node"
)

// MaxSiteProgram bounds a site program's size: it is held in memory and
// in the sandbox's tmpfs while it runs.
const MaxSiteProgram = 64 << 20

// DefaultSiteTimeout is a one-shot site check's time limit when neither
// the program nor the check sets one.
const DefaultSiteTimeout = Duration(5 * time.Minute)

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

// FirmwareVia returns the component's entries updated via via
// (ViaRedfish: the coordinator's, through the BMC; ViaInBand: the
// runner's), in manifest order.
func (s *SKU) FirmwareVia(component, via string) []Firmware {
	var out []Firmware
	for _, f := range s.FirmwareFor(component) {
		if f.Via == via {
			out = append(out, f)
		}
	}
	return out
}

// String names the fields a selector sets, for messages:
// {vendorId="0x15b3" psid="MT_0000000838"}, {name="BMC" updateable=true};
// {any} when it sets none.
func (m Match) String() string {
	var p []string
	for _, f := range []struct{ k, v string }{
		{"vendorId", m.VendorID}, {"psid", m.PSID}, {"model", m.Model},
		{"redfishId", m.RedfishID}, {"name", m.Name}, {"softwareId", m.SoftwareID}, {"relatedItem", m.RelatedItem},
	} {
		if f.v != "" {
			p = append(p, fmt.Sprintf("%s=%q", f.k, f.v))
		}
	}
	if m.Updateable != nil {
		p = append(p, fmt.Sprintf("updateable=%t", *m.Updateable))
	}
	if len(p) == 0 {
		return "{any}"
	}
	return "{" + strings.Join(p, " ") + "}"
}
