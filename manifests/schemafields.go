package manifests

// SchemaField is what the published JSON Schema (manifests/schema) says of
// one field beyond its Go type: the decoder's rules that a struct tag
// cannot carry. The values are the decoder's own lists and patterns, so the
// schema cannot drift from what the loader accepts.
type SchemaField struct {
	Required bool
	Enum     []string // allowed values (the loader's list)
	Default  any      // what the loader fills in when the field is absent
	Pattern  string   // a string value (or each item of a list) matches it
	// Range bounds an integer: {min} or {min, max}; nil when unbounded.
	Range []int64
}

// SchemaFields lists those rules keyed "GoType.yamlKey". OSImage is
// OS.image: an Artifact that may pin a chunk list and whose format is an
// image format. It is a function, not a table built at init, because the
// runner links this package and starts twice per boot.
func SchemaFields() map[string]SchemaField {
	req := SchemaField{Required: true}
	name := SchemaField{Required: true, Pattern: nameRE.String()}
	sha := SchemaField{Required: true, Pattern: sha256RE.String()}
	devices := SchemaField{Range: []int64{1, maxDevices}}
	return map[string]SchemaField{
		"SKU.apiVersion": req, "SKU.kind": req, "SKU.metadata": req, "SKU.spec": req,
		"ValidationSuite.apiVersion": req, "ValidationSuite.kind": req, "ValidationSuite.metadata": req, "ValidationSuite.spec": req,
		"Metadata.name": name,

		"SKUSpec.attestation":    {Enum: []string{AttestationRequired, AttestationOptional}, Default: AttestationOptional},
		"SKUSpec.arch":           {Enum: []string{ArchAMD64, ArchARM64}, Default: ArchAMD64},
		"Firmware.name":          name,
		"Firmware.component":     {Required: true, Enum: Components},
		"Firmware.via":           {Required: true, Enum: []string{ViaRedfish, ViaInBand}},
		"Firmware.match":         req,
		"Firmware.version":       req,
		"Firmware.gate":          {Enum: []string{GateEqual, GateAtLeast}, Default: GateEqual},
		"Firmware.activation":    {Required: true, Enum: allActivations},
		"Match.vendorId":         {Pattern: vendorIDRE.String()},
		"Match.psid":             {Pattern: psidRE.String()},
		"Artifact.sha256":        sha,
		"Artifact.size":          {Required: true, Range: []int64{1}},
		"Artifact.format":        {Required: true, Pattern: formatRE.String()},
		"OSImage.sha256":         sha,
		"OSImage.size":           {Required: true, Range: []int64{1}},
		"OSImage.format":         {Required: true, Enum: imageFormats},
		"OSImage.chunks":         {Pattern: sha256RE.String()},
		"BIOS.settings":          {Required: true, Pattern: attributeRE.String()}, // the attribute names
		"Wipe.policy":            {Required: true, Enum: wipePolicies},
		"DiskSelector.transport": {Enum: transports},
		"DiskSelector.name":      {Pattern: kernelNameRE.String()},
		"OS.image":               req,
		"RAID.level":             {Required: true, Enum: RAIDLevels},
		"RAID.members":           req,
		"Filesystem.type":        {Required: true, Enum: FilesystemTypes},
		"Filesystem.label":       {Required: true, Pattern: fsLabelRE.String()},
		"Filesystem.mount":       {Required: true, Pattern: mountRE.String()},

		"CPUSpec.sockets":            devices,
		"CPUSpec.cores":              devices,
		"MemorySpec.dimms":           devices,
		"MemorySpec.locators":        {Pattern: locatorRE.String()},
		"GPUSpec.count":              devices,
		"Inspection.match":           req,
		"InspectionMatch.gpuCount":   devices,
		"InspectionMatch.nicVendors": {Pattern: vendorIDRE.String()},
		"GPUSpec.pciId":              {Pattern: pciIDRE.String()},
		"GPUSpec.addresses":          {Pattern: pciAddrRE.String()},
		"GPUSpec.nvlinks":            {Range: []int64{1, 64}},
		"NVSwitchSpec.count":         {Required: true, Range: []int64{1, maxDevices}},
		"PCIeSpec.gen":               {Range: []int64{1, 6}},
		"PCIeSpec.width":             {Range: []int64{1, 32}},
		"NICSpec.pciId":              {Pattern: pciIDRE.String()},
		"NICSpec.count":              devices,
		"NICSpec.speedMbps":          {Range: []int64{10, maxSpeed}},
		"NVMeSpec.model":             req,
		"NVMeSpec.count":             devices,

		"Admission.boot":        {Enum: []string{BootHTTPS, BootPXE}, Default: BootHTTPS},
		"Admission.attestation": {Enum: []string{AdmitAttested, AdmitUnattested}, Default: AdmitAttested},
		"Admission.fleetBand":   {Enum: []string{FleetBandRequired, FleetBandIfAvailable}, Default: FleetBandRequired},
		"Admission.acceptance":  req,
		"Acceptance.suite":      name,
		"Acceptance.mode":       {Enum: []string{"burnin", "diagnostic"}, Default: "burnin"},
		"Acceptance.maxAge":     {Default: DefaultAcceptanceMaxAge.String()},

		"ValidationSuiteSpec.grace":  {Default: DefaultGrace.String()},
		"ValidationSuiteSpec.resume": {Enum: []string{ResumeContinue, ResumeRestart}, Default: ResumeContinue},
		"ValidationSuiteSpec.end":    {Enum: []string{EndHostOS, EndPowerOff, EndStay}, Default: EndStay},
		"FleetPolicy.window":         {Default: DefaultFleetWindow.String()},
		"FleetPolicy.minNodes":       {Default: DefaultFleetMinNodes, Range: []int64{1, 100000}},
		"BMCBars.powerSupplies":      {Enum: []string{BMCPartsOK, BMCIgnore}, Default: BMCPartsOK},
		"BMCBars.fans":               {Enum: []string{BMCPartsOK, BMCIgnore}, Default: BMCPartsOK},
		"BMCBars.eventLog":           {Enum: []string{BMCSeverityCritical, BMCSeverityWarning, BMCIgnore}, Default: BMCSeverityCritical},
		"SensorBar.match":            req,
		"Stage.name":                 name,
		"Stage.checks":               req,
		"Telemetry.interval":         {Default: DefaultTelemetryInterval.String()},
		"Telemetry.bmcInterval":      {Default: DefaultBMCInterval.String()},
		"Check.name":                 name,
		"Check.type":                 {Required: true, Enum: checkTypes},
		"Optional.reason":            req,
		"SiteProgram.sha256":         sha,
		"SiteProgram.size":           {Required: true, Range: []int64{1, MaxSiteProgram}},
		"SiteProgram.description":    req,
		"SiteProgram.network":        {Enum: []string{SiteNetworkNone, SiteNetworkNode}, Default: SiteNetworkNone},
	}
}
