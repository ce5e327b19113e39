package manifests

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/cure-oss/cure/manifests/version"
)

// viaAllowed: out-of-band-only components must go through the BMC.
var viaAllowed = map[string][]string{
	ComponentBMC:  {ViaRedfish},
	ComponentBIOS: {ViaRedfish},
	ComponentHGX:  {ViaRedfish},
	ComponentNIC:  {ViaRedfish, ViaInBand},
	ComponentDPU:  {ViaRedfish, ViaInBand},
	ComponentNVMe: {ViaRedfish, ViaInBand},
}

// activationAllowed: which activation can make a staged image of each
// component the running one. A BMC reset does nothing for an SSD, and an
// NVMe controller reset does nothing for a BMC.
var activationAllowed = map[string][]string{
	ComponentBMC:  {ActivationNone, ActivationBMCReset},
	ComponentBIOS: {ActivationNone, ActivationHostReboot},
	ComponentHGX:  {ActivationNone, ActivationHostReboot},
	ComponentNIC:  {ActivationNone, ActivationHostReboot, ActivationMstfwreset},
	ComponentDPU:  {ActivationNone, ActivationHostReboot, ActivationDPUReset, ActivationMstfwreset},
	ComponentNVMe: {ActivationNone, ActivationHostReboot, ActivationNVMeReset},
}

var (
	allActivations = []string{ActivationNone, ActivationBMCReset, ActivationHostReboot, ActivationNVMeReset, ActivationMstfwreset, ActivationDPUReset}
	wipePolicies   = []string{WipeNone, WipePSIDRevert, WipeRevertSID, WipeCryptoErase, WipeSanitize, WipeFormat}
	transports     = []string{TransportNVMe, TransportSATA, TransportSAS, TransportVirtio, TransportUSB, TransportAny}
	imageFormats   = []string{ImageRaw, ImageRawGzip, ImageRawZstd, ImageRawXz, ImageQcow2}
)

func (d *decoder) sku(top *fields) *SKU {
	s := &SKU{APIVersion: APIVersion, Kind: KindSKU}
	if v := top.get("metadata"); v != nil {
		s.Metadata = d.metadata(v, "metadata")
	} else {
		top.missing("metadata")
	}
	v := top.get("spec")
	if v == nil {
		top.missing("spec")
		return s
	}
	spec := d.mapping(v, "spec", "firmware", "bios", "wipe", "os", "hardware", "attestation", "admission", "inspection", "arch")
	s.Spec.Arch = spec.optEnum("arch", ArchAMD64, ArchARM64)
	s.Spec.Attestation = spec.optEnum("attestation", AttestationRequired, AttestationOptional)
	s.Spec.Admission = d.admission(spec, "spec.admission", s.Spec.Attestation)
	seen := map[string]int{}
	for i, item := range spec.seq("firmware", false) {
		p := index("spec.firmware", i)
		fw := d.firmware(item, p)
		if fw.Name != "" {
			if line, dup := seen[fw.Name]; dup {
				d.errorf(item, join(p, "name"), "duplicate firmware name %q (first used on line %d)", fw.Name, line)
			} else {
				seen[fw.Name] = item.Line
			}
		}
		s.Spec.Firmware = append(s.Spec.Firmware, fw)
	}
	if v := spec.get("bios"); v != nil {
		s.Spec.BIOS = d.bios(v, "spec.bios")
	}
	if v := spec.get("wipe"); v != nil {
		s.Spec.Wipe = d.wipe(v, "spec.wipe")
	}
	if v := spec.get("os"); v != nil {
		s.Spec.OS = d.os(v, "spec.os")
	}
	if v := spec.get("hardware"); v != nil {
		s.Spec.Hardware = d.hardware(v, "spec.hardware")
	}
	if v := spec.get("inspection"); v != nil {
		s.Spec.Inspection = d.inspection(v, "spec.inspection")
	}
	return s
}

func (d *decoder) firmware(n *yaml.Node, p string) Firmware {
	f := d.mapping(n, p, "name", "component", "via", "match", "version", "gate", "artifact", "activation")
	var fw Firmware
	var v *yaml.Node
	fw.Name, v = f.str("name", true)
	d.checkName(v, join(p, "name"), fw.Name)
	fw.Component = f.enum("component", "", Components...)
	fw.Via = f.enum("via", "", ViaRedfish, ViaInBand)
	if fw.Component != "" && fw.Via != "" && !slices.Contains(viaAllowed[fw.Component], fw.Via) {
		d.errorf(f.vals["via"], join(p, "via"), "component %s must be updated via %s, not %s",
			fw.Component, strings.Join(viaAllowed[fw.Component], " or "), fw.Via)
	}

	if mv := f.get("match"); mv != nil {
		fw.Match = d.match(mv, join(p, "match"), fw)
	} else {
		f.missing("match")
	}

	fw.Version, v = f.str("version", true)
	if v != nil && fw.Version != "" {
		if _, err := version.Parse(fw.Version); err != nil {
			reason := err.Error()
			if pe, ok := errors.AsType[*version.ParseError](err); ok {
				reason = pe.Reason
			}
			d.errorf(v, join(p, "version"), "%q is not a valid version: %s", fw.Version, reason)
		}
	}
	fw.Gate = f.enum("gate", GateEqual, GateEqual, GateAtLeast)

	if av := f.get("artifact"); av != nil {
		a := d.artifact(av, join(p, "artifact"), nil)
		fw.Artifact = &a
	}

	fw.Activation = f.enum("activation", "", allActivations...)
	if fw.Component != "" && fw.Activation != "" && !slices.Contains(activationAllowed[fw.Component], fw.Activation) {
		d.errorf(f.vals["activation"], join(p, "activation"), "%s cannot activate %s firmware (want one of %s)",
			fw.Activation, fw.Component, strings.Join(activationAllowed[fw.Component], ", "))
	}
	return fw
}

func (d *decoder) match(n *yaml.Node, p string, fw Firmware) Match {
	f := d.mapping(n, p, "model", "vendorId", "redfishId", "psid", "name", "softwareId", "relatedItem", "updateable")
	var m Match
	var mv, vv, rv, pv *yaml.Node
	m.Model, mv = f.str("model", false)
	d.checkGlob(mv, join(p, "model"), m.Model)
	m.VendorID, vv = f.str("vendorId", false)
	if vv != nil && !vendorIDRE.MatchString(m.VendorID) {
		d.errorf(vv, join(p, "vendorId"), "%q is not a PCI vendor id (want 0x followed by 4 hex digits, e.g. 0x15b3)", m.VendorID)
	}
	m.RedfishID, rv = f.str("redfishId", false)
	d.checkGlob(rv, join(p, "redfishId"), m.RedfishID)
	m.PSID, pv = f.str("psid", false)
	if pv != nil && !psidRE.MatchString(m.PSID) {
		d.errorf(pv, join(p, "psid"), "%q is not a PSID (want up to 16 letters, digits or '_', e.g. MT_0000000838)", m.PSID)
	}
	// The Redfish-only member fields: globs, and Updateable.
	rfKeys := []string{"name", "softwareId", "relatedItem", "updateable"}
	for i, dst := range []*string{&m.Name, &m.SoftwareID, &m.RelatedItem} {
		var v *yaml.Node
		*dst, v = f.str(rfKeys[i], false)
		d.checkGlob(v, join(p, rfKeys[i]), *dst)
	}
	if f.has("updateable") {
		b := f.boolean("updateable")
		m.Updateable = &b
	}
	if !f.ok {
		return m
	}
	if m == (Match{}) {
		d.errorf(n, p, "selector is empty: set at least one of model, vendorId, redfishId, psid, name, softwareId, relatedItem")
		return m
	}
	// The FirmwareInventory member id is the only stable handle on a
	// component over Redfish; in-band there is no inventory to match it to.
	switch fw.Via {
	case ViaRedfish:
		if m.RedfishID == "" && m.Name == "" && m.SoftwareID == "" && m.RelatedItem == "" {
			d.errorf(n, p, "a redfish selector needs at least one of redfishId, name, softwareId, relatedItem (FirmwareInventory member fields, e.g. redfishId: BMC or name: \"Integrated Dell Remote Access Controller\")")
		}
	case ViaInBand:
		for _, key := range rfKeys {
			if v := f.get(key); v != nil {
				d.errorf(v, join(p, key), "only meaningful when via is redfish, but via is in-band")
			}
		}
		if rv != nil {
			d.errorf(rv, join(p, "redfishId"), "only meaningful when via is redfish, but via is in-band")
		}
		if m.Model == "" && m.VendorID == "" && m.PSID == "" {
			d.errorf(n, p, "in-band selector needs at least one of model, vendorId, psid")
		}
	}
	if pv != nil && fw.Component != "" && fw.Component != ComponentNIC && fw.Component != ComponentDPU {
		d.errorf(pv, join(p, "psid"), "PSIDs identify NVIDIA NIC/DPU boards; component is %s", fw.Component)
	}
	return m
}

// artifact reads a file reference; formats, when set, restricts the format.
func (d *decoder) artifact(n *yaml.Node, p string, formats []string) Artifact {
	return d.artifactKeys(n, p, formats, false)
}

// artifactKeys reads a file reference; chunks says the reference may pin
// a chunk list (OS images: the only artifact written as it streams).
func (d *decoder) artifactKeys(n *yaml.Node, p string, formats []string, chunks bool) Artifact {
	keys := []string{"url", "sha256", "size", "format"}
	if chunks {
		keys = append(keys, "chunks")
	}
	f := d.mapping(n, p, keys...)
	var a Artifact
	var v *yaml.Node
	if chunks {
		a.Chunks, v = f.str("chunks", false)
		if v != nil && a.Chunks != "" && !sha256RE.MatchString(a.Chunks) {
			d.errorf(v, join(p, "chunks"), "%q is not the sha256 of a chunk list (want 64 lowercase hex digits, found %d characters)", a.Chunks, len(a.Chunks))
		}
	}
	a.URL, v = f.str("url", false)
	d.checkURL(v, join(p, "url"), a.URL)
	a.SHA256, v = f.str("sha256", true)
	if v != nil && a.SHA256 != "" && !sha256RE.MatchString(a.SHA256) {
		d.errorf(v, join(p, "sha256"), "%q is not a sha256 (want 64 lowercase hex digits, found %d characters)", a.SHA256, len(a.SHA256))
	}
	if v := f.get("size"); v != nil {
		if n, ok := d.integer(v, join(p, "size")); ok {
			if n <= 0 {
				d.errorf(v, join(p, "size"), "must be a positive number of bytes, found %d", n)
			}
			a.Size = n
		}
	} else {
		f.missing("size")
	}
	if formats != nil {
		a.Format = f.enum("format", "", formats...)
	} else {
		a.Format, v = f.str("format", true)
		if v != nil && a.Format != "" && !formatRE.MatchString(a.Format) {
			d.errorf(v, join(p, "format"), "%q is not a format token (lowercase letters, digits, '.', '+', '-')", a.Format)
		}
	}
	return a
}

func (d *decoder) bios(n *yaml.Node, p string) *BIOS {
	f := d.mapping(n, p, "settings")
	b := &BIOS{}
	v := f.get("settings")
	if v == nil {
		f.missing("settings")
		return b
	}
	sp := join(p, "settings")
	if v.Kind != yaml.MappingNode {
		d.errorf(v, sp, "expected a mapping of attribute names to values, found %s", describe(v))
		return b
	}
	if len(v.Content) == 0 {
		// An empty section would marshal away; say what is meant instead.
		d.errorf(v, sp, "must not be empty (remove spec.bios to leave BIOS settings alone)")
		return b
	}
	b.Settings = map[string]any{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := resolve(v.Content[i]), resolve(v.Content[i+1])
		kp := join(sp, k.Value)
		if _, dup := b.Settings[k.Value]; dup {
			d.errorf(k, kp, "duplicate attribute")
			continue
		}
		if !attributeRE.MatchString(k.Value) {
			d.errorf(k, kp, "%q is not a BIOS attribute name (letters, digits, '_')", k.Value)
			continue
		}
		if x, ok := d.scalar(val, kp, false); ok {
			b.Settings[k.Value] = x
		}
	}
	return b
}

func (d *decoder) wipe(n *yaml.Node, p string) *Wipe {
	f := d.mapping(n, p, "policy", "allowWeakerFallback", "disks")
	w := &Wipe{}
	w.Policy = f.enum("policy", "", wipePolicies...)
	w.AllowWeakerFallback = f.boolean("allowWeakerFallback")
	if v := f.get("disks"); v != nil {
		w.Disks = d.diskSelector(v, join(p, "disks"))
	} else if w.Policy != "" && w.Policy != WipeNone {
		// Erasing needs an explicit target, never "whatever is there".
		d.errorf(n, join(p, "disks"), "required when policy is %s: select the disks to wipe", w.Policy)
	}
	return w
}

func (d *decoder) diskSelector(n *yaml.Node, p string) DiskSelector {
	f := d.mapping(n, p, "transport", "model", "serial", "name", "minSize", "maxSize")
	var s DiskSelector
	var v *yaml.Node
	s.Transport = f.optEnum("transport", transports...)
	s.Model, v = f.str("model", false)
	d.checkGlob(v, join(p, "model"), s.Model)
	s.Serial, _ = f.str("serial", false)
	s.Name, v = f.str("name", false)
	if v != nil && !kernelNameRE.MatchString(s.Name) {
		d.errorf(v, join(p, "name"), "%q is not a kernel block device name (e.g. nvme0n1, sda; without /dev/)", s.Name)
	}
	s.MinSize = f.byteSize("minSize")
	s.MaxSize = f.byteSize("maxSize")
	if s.MinSize > 0 && s.MaxSize > 0 && s.MinSize > s.MaxSize {
		d.errorf(f.vals["maxSize"], join(p, "maxSize"), "%s is smaller than minSize %s", s.MaxSize, s.MinSize)
	}
	if f.ok && s.IsZero() && f.count() == 0 {
		d.errorf(n, p, "selector is empty: set at least one of transport, model, serial, name, minSize, maxSize")
	}
	return s
}

func (d *decoder) os(n *yaml.Node, p string) *OS {
	f := d.mapping(n, p, "image", "targetDisk", "growRoot", "firstBoot", "storage")
	o := &OS{}
	if v := f.get("image"); v != nil {
		o.Image = d.artifactKeys(v, join(p, "image"), imageFormats, true)
	} else {
		f.missing("image")
	}
	o.GrowRoot = f.boolean("growRoot")
	if v := f.get("storage"); v != nil {
		o.Storage = d.storage(v, join(p, "storage"), o.GrowRoot)
	}
	raid := o.Storage != nil && o.Storage.RAID != nil
	switch v := f.get("targetDisk"); {
	case v != nil && raid:
		d.errorf(v, join(p, "targetDisk"), "must be absent when storage.raid is set: the image goes to the array")
	case v != nil:
		o.TargetDisk = d.diskSelector(v, join(p, "targetDisk"))
	case !raid:
		f.missing("targetDisk")
	}
	if v := f.get("firstBoot"); v != nil {
		o.FirstBoot = d.firstBoot(v, join(p, "firstBoot"))
	}
	return o
}

func (d *decoder) firstBoot(n *yaml.Node, p string) FirstBoot {
	f := d.mapping(n, p, "hostname", "userData")
	var fb FirstBoot
	var v *yaml.Node
	fb.Hostname, v = f.str("hostname", false)
	if v != nil {
		if _, err := renderHostname(fb.Hostname, "node-1", "serial1"); err != nil {
			d.errorf(v, join(p, "hostname"), "%v", err)
		}
	}
	fb.UserData, v = f.str("userData", false)
	if v != nil {
		if err := checkUserData(fb.UserData); err != nil {
			d.errorf(v, join(p, "userData"), "%v", err)
		}
	}
	return fb
}

// checkUserData accepts a #cloud-config document whose body is a mapping,
// which is what cloud-init merges.
func checkUserData(s string) error {
	first, _, _ := strings.Cut(s, "\n")
	if strings.TrimSpace(first) != "#cloud-config" {
		return fmt.Errorf("must start with a #cloud-config line, found %q", first)
	}
	var body yaml.Node
	if err := yaml.Unmarshal([]byte(s), &body); err != nil {
		return fmt.Errorf("is not valid YAML (lines counted from the #cloud-config line): %v", err)
	}
	if len(body.Content) == 1 && body.Content[0].Kind != yaml.MappingNode {
		return fmt.Errorf("must be a mapping of cloud-config keys, found %s", describe(body.Content[0]))
	}
	return nil
}
