package vbmc

import (
	"fmt"
	"slices"
	"time"
)

// Profile is a vendor's Redfish shape: a Config preset whose quirks and
// version/Id/Name forms come from that vendor's published payloads (see
// profiles/README.md for each capture's source and licence). Profiles keep
// the DMTF mockup's resource tree and change what vendors change: task
// shapes, Id conventions, settings objects, allowable-value forms, session
// limits, reset timing and version strings.
type Profile struct {
	Name   string // e.g. "dell-idrac9"
	Vendor string
	// Captures lists the files (relative to this package) the profile is
	// built from; profiles/README.md gives each one's source and licence.
	Captures []string
	// Quirks says in words what differs, for docs and test names.
	Quirks []string
	// BMC and BIOS name the inventory members a manifest would select:
	// their Name as the vendor writes it (Ids are not a robust handle).
	// Where every member has the same Name (OpenBMC's "Software
	// Inventory"), BMCName is empty and BMCID, the member Id, selects.
	BMCName, BIOSName string
	BMCID             string // the BMC member's spec Id (what test packages name); default "BMC"
	apply             func(*Config)
}

// Apply sets the profile's shape on cfg (fields the caller set to
// non-zero values that the profile does not own are kept).
func (p Profile) Apply(cfg Config) Config {
	p.apply(&cfg)
	return cfg
}

// Profiles are the vendor shapes the driver's conformance suite
// (qemu-test/conformance) runs against.
func Profiles() []Profile {
	return []Profile{
		dmtfRackmount1Profile(),
		dellIDRAC9Profile(),
		hpeILO5Profile(),
		hpeILO4Profile(),
		lenovoXCCProfile(),
		supermicroX13Profile(),
		scpOnlyProfile(),
		nvidiaBlueFieldProfile(),
		nvidiaHGXProfile(),
	}
}

// dmtfRackmount1Profile is the DMTF mockup as published.
func dmtfRackmount1Profile() Profile {
	return Profile{
		Name: "dmtf-rackmount1", Vendor: "DMTF public-rackmount1 mockup",
		Captures: []string{"mockups/public-rackmount1", "profiles/dmtf/SoftwareInventory-BMC.json"},
		Quirks: []string{"task monitor (202 + Location to a TaskMonitor)", "@Redfish.Settings at /Bios/Settings",
			"Thermal/Power and the Sensors collection both", "SEL at Systems/…/LogServices/Log1, times in +06:00 (the mockup's DateTimeLocalOffset)"},
		BMCName: "Contoso BMC Firmware", BIOSName: "Contoso BIOS Firmware",
		apply: func(c *Config) {
			c.BootModes = []string{"Legacy", "UEFI"}
			c.EventLog = LogShape{ID: "Log1", EntryType: "SEL", UTCOffset: 6 * time.Hour}
		},
	}
}

// dellIDRAC9Profile is Dell iDRAC9's shape.
func dellIDRAC9Profile() Profile {
	return Profile{
		Name: "dell-idrac9", Vendor: "Dell iDRAC9",
		Captures: []string{"profiles/issue13/FirmwareInventory-versioned-ids.json"},
		Quirks: []string{"inventory Ids carry the version (Installed-<n>-<ver>__<comp>) and a Previous- member after an update",
			"SimpleUpdate answers 202 with Location to a Task (JID_...)", "If-Match required on PATCH",
			"Thermal/Power and the Sensors collection both", "SEL under the Manager (LogServices/Sel), newest entry first"},
		BMCName: "Integrated Dell Remote Access Controller", BIOSName: "BIOS",
		apply: func(c *Config) {
			c.BootModes = []string{"Legacy", "UEFI"}
			c.InventoryIDs = "versioned"
			c.TaskShape = ShapeTaskLocation
			c.RequireIfMatch = true
			c.MaxSessions = 8
			c.EventLog = LogShape{Under: "Managers", ID: "Sel", Name: "IPMI SEL", EntryType: "SEL", PageSize: 50, NewestFirst: true}
			c.Firmware = profileFirmware(
				"Integrated Dell Remote Access Controller", "7.00.00.171",
				"BIOS", "2.19.1")
		},
	}
}

// hpeILO5Profile is HPE iLO 5's shape.
func hpeILO5Profile() Profile {
	return Profile{
		Name: "hpe-ilo5", Vendor: "HPE iLO 5",
		Captures: nil, // versions and names from HPE's published iLO 5 inventory (see profiles/README.md)
		Quirks: []string{"versions with a build date (\"2.55 Oct 01 2021\") and the system-ROM form (\"U30 v2.54 (04/18/2024)\")",
			"inventory Ids are bare positions", "update answers with the Task in the body", "tasks purged on completion",
			"Thermal and Power only (no Sensors collection)", "Integrated Management Log (IML, EntryType Oem, Hpe-IML) newest first"},
		BMCName: "iLO 5", BIOSName: "System ROM",
		apply: func(c *Config) {
			c.BootModes = []string{"Legacy", "UEFI"}
			c.TaskShape = ShapeTaskBody
			c.TaskGoneAfterCompletion = true
			c.InventoryIDs = "positions" // "1" is iLO 5, "2" the System ROM
			c.SensorAPI = SensorAPILegacy
			c.EventLog = hpeIML
			c.Firmware = profileFirmware("iLO 5", "2.55 Oct 01 2021", "System ROM", "U30 v2.54 (04/18/2024)")
		},
	}
}

// hpeILO4Profile is HPE iLO 4's shape.
func hpeILO4Profile() Profile {
	return Profile{
		Name: "hpe-ilo4", Vendor: "HPE iLO 4",
		Captures: []string{"profiles/issue13/Bios-no-settings.json"},
		Quirks: []string{"Bios resource without @Redfish.Settings: settings are PATCHed on the Bios resource", "no MultipartHttpPushUri",
			"Thermal and Power only", "IML (EntryType Oem) newest first"},
		BMCName: "iLO", BIOSName: "System ROM",
		apply: func(c *Config) {
			c.NoBiosSettings = true
			c.NoMultipart = true
			c.NoBootMode = true
			c.SensorAPI = SensorAPILegacy
			c.EventLog = hpeIML
			c.Firmware = profileFirmware("iLO", "2.82 Feb 06 2023", "System ROM", "P89 v2.76 (10/21/2019)")
		},
	}
}

// lenovoXCCProfile is Lenovo XClarity Controller's shape.
func lenovoXCCProfile() Profile {
	return Profile{
		Name: "lenovo-xcc", Vendor: "Lenovo XClarity Controller",
		Captures: []string{"profiles/lenovo-xcc/Bios-settings.json"},
		Quirks: []string{"BootSourceOverrideEnabled allows only Disabled and Once (no persistent override)",
			"versions with a build id prefix (\"TGBT42S 2.83 2023-07-05\")",
			"Thermal/Power and the Sensors collection both", "platform event log at Systems/…/LogServices/PlatformLog (EntryType Event)"},
		BMCName: "XCC-Primary", BIOSName: "UEFI",
		apply: func(c *Config) {
			c.BootModes = []string{"Legacy", "UEFI"}
			c.NoContinuous = true
			c.EventLog = LogShape{ID: "PlatformLog", Name: "Platform Event Log", EntryType: "Event", PageSize: 32}
			c.Firmware = profileFirmware("XCC-Primary", "TGBT42S 2.83 2023-07-05", "UEFI", "U8E132C-3.20")
		},
	}
}

// supermicroX13Profile is Supermicro X13's shape.
func supermicroX13Profile() Profile {
	return Profile{
		Name: "supermicro-x13", Vendor: "Supermicro X13 (AMI MegaRAC based)",
		Captures: []string{"profiles/supermicro/UpdateService.json", "profiles/issue13/System-reset-run-together.json"},
		Quirks: []string{"ResetType values run together (\"GracefulShutdownGracefulRestart\")",
			"inventory Ids are bare positions", "session limit 4",
			"Thermal and Power only", "SEL at Systems/…/LogServices/Log1 in small pages"},
		BMCName: "BMC", BIOSName: "BIOS",
		apply: func(c *Config) {
			c.BootModes = []string{"Legacy", "UEFI"}
			c.RunTogetherResets = true
			c.InventoryIDs = "positions"
			c.MaxSessions = 4
			c.SensorAPI = SensorAPILegacy
			c.EventLog = LogShape{ID: "Log1", Name: "Event Log", EntryType: "SEL", PageSize: 20}
			c.Firmware = profileFirmware("BMC", "01.03.10", "BIOS", "BIOS Date: 08/04/2023 Ver 1.4")
		},
	}
}

// scpOnlyProfile is a BMC whose SimpleUpdate offers only SCP.
func scpOnlyProfile() Profile {
	return Profile{
		Name: "scp-only", Vendor: "BMC whose SimpleUpdate offers only SCP, as a nested array",
		Captures: []string{"profiles/issue13/UpdateService-nested-scp.json"},
		Quirks:   []string{"TransferProtocol@Redfish.AllowableValues is [[\"SCP\"]]: SimpleUpdate cannot fetch an HTTP artifact; multipart push can"},
		BMCName:  "BMC Firmware", BIOSName: "BIOS Firmware",
		apply: func(c *Config) {
			c.NestedAllowableValues = true
			c.TransferProtocols = []string{"SCP"}
			c.Firmware = profileFirmware("BMC Firmware", "1.45.455b66-rev4", "BIOS Firmware", "P79 v1.45")
		},
	}
}

// nvidiaBlueFieldProfile is NVIDIA BlueField-3 BMC's shape.
func nvidiaBlueFieldProfile() Profile {
	return Profile{
		Name: "nvidia-bluefield", Vendor: "NVIDIA BlueField-3 BMC",
		Captures: nil, // BMC_Firmware and BF-24.10-17 from NVIDIA's DPU documentation (see profiles/README.md)
		Quirks: []string{"versions with a product prefix (\"BF-24.10-17\")", "every member named \"Software Inventory\" (OpenBMC): select by Id", "task monitor with a slow BMC reset",
			"Thermal/Power and the Sensors collection both (bmcweb)", "event log at Systems/…/LogServices/EventLog (EntryType Event)"},
		BMCID: "BMC_Firmware",
		apply: func(c *Config) {
			c.BootModes = []string{"UEFI"} // an Arm UEFI platform: no legacy boot
			c.ResetDuration = max(c.ResetDuration, 500*time.Millisecond)
			c.EventLog = openBMCEventLog
			// OpenBMC (bmcweb) names every member "Software Inventory":
			// the Id is the handle there.
			c.Firmware = []FirmwareSpec{
				{ID: "BMC_Firmware", Name: "Software Inventory", Version: "BF-24.10-17", Updateable: true, Kind: KindBMC},
				{ID: "DPU_UEFI", Name: "Software Inventory", Version: "4.9.0-43-g7d1fe7e", Updateable: true, Kind: KindBIOS},
				{ID: "Bluefield_FW_ERoT", Name: "Software Inventory", Version: "00.02.0180.0000_n02", Updateable: true, Kind: KindBIOS},
			}
		},
	}
}

// nvidiaHGXProfile is NVIDIA HGX baseboard's (HMC) shape.
func nvidiaHGXProfile() Profile {
	return Profile{
		Name: "nvidia-hgx", Vendor: "NVIDIA HGX H100 baseboard (HMC)",
		Captures: nil, // HGX_FW_* Ids as DefaultFirmware names them
		Quirks: []string{"HGX_FW_* member Ids", "GPU versions in the 96.00.A5.00.01 form", "Task Location answers",
			"the Sensors collection only (no Thermal or Power resources)", "event log at Systems/…/LogServices/EventLog (EntryType Event)"},
		BMCName: "Contoso BMC Firmware", BIOSName: "Contoso BIOS Firmware",
		apply: func(c *Config) {
			c.TaskShape = ShapeTaskLocation
			c.SensorAPI = SensorAPISensors
			c.EventLog = openBMCEventLog
			c.Firmware = DefaultFirmware()
			c.Firmware[0].Version = "HGX-22.10-1-rc57"
		},
	}
}

// Log shapes shared by profiles. Page sizes differ between profiles so
// that the driver's paging is exercised in several sizes.
var (
	hpeIML          = LogShape{ID: "IML", Name: "Integrated Management Log", EntryType: "Oem", OemRecordFormat: "Hpe-IML", PageSize: 40, NewestFirst: true}
	openBMCEventLog = LogShape{ID: "EventLog", Name: "System Event Log", EntryType: "Event", PageSize: 1000}
)

// ProfileByName returns the named profile.
func ProfileByName(name string) (Profile, error) {
	ps := Profiles()
	i := slices.IndexFunc(ps, func(p Profile) bool { return p.Name == name })
	if i < 0 {
		var names []string
		for _, p := range ps {
			names = append(names, p.Name)
		}
		return Profile{}, fmt.Errorf("no vbmc profile %q (have %v)", name, names)
	}
	return ps[i], nil
}

// profileFirmware is a BMC and a BIOS member named and versioned as the
// vendor writes them. Ids are the spec's "BMC" and "BIOS" (what test
// packages name); the Id the client sees follows Config.InventoryIDs.
func profileFirmware(bmcName, bmcVersion, biosName, biosVersion string) []FirmwareSpec {
	return []FirmwareSpec{
		{ID: "BMC", Name: bmcName, Version: bmcVersion, Updateable: true, Kind: KindBMC},
		{ID: "BIOS", Name: biosName, Version: biosVersion, Updateable: true, Kind: KindBIOS},
	}
}
