package manifests

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Inspection rules (spec.inspection): an enlisted machine
// (provisioner-lite/enlist) whose report matches every condition a SKU's
// rule sets is proposed as a node of that SKU, named by the rule's
// template. A proposal only: an operator approves it.

// Inspection is a SKU's inspection rule.
type Inspection struct {
	// Match holds the conditions; every one set must hold.
	Match InspectionMatch `yaml:"match"`
	// Name is the proposed node id: text with {serial} (the system
	// serial), {mac} (the booting MAC, without colons) and {sku}, lowercased
	// to letters, digits and '-'. Default: {sku}-{serial}.
	Name string `yaml:"name,omitempty"`
}

// InspectionMatch are hardware facts an enlisted machine reported.
type InspectionMatch struct {
	// CPUModel is a regular expression every processor's model must match.
	CPUModel string `yaml:"cpuModel,omitempty"`
	// GPUModel is a regular expression every GPU's name must match.
	GPUModel string `yaml:"gpuModel,omitempty"`
	// GPUCount is the number of GPUs (0: not checked).
	GPUCount int `yaml:"gpuCount,omitempty"`
	// NICVendors are PCI vendor ids (0x15b3) each of which some NIC has.
	NICVendors []string `yaml:"nicVendors,omitempty"`
	// Serial is a regular expression the system serial must match.
	Serial string `yaml:"serial,omitempty"`
}

// Facts are what inspection rules match: an enlisted machine's report.
type Facts struct {
	CPUModels  []string
	GPUModels  []string
	NICVendors []uint32
	Serial     string
	MAC        string
	// Arch is the machine's architecture (amd64, arm64); a SKU of
	// another spec.arch is never proposed. Empty: not checked.
	Arch string
}

// Proposal is the SKU and name a rule proposes.
type Proposal struct {
	SKU, Name string
	// Conditions is how many conditions the rule set (the most specific
	// matching rule wins).
	Conditions int
}

var templateRE = lazyRegexp(`\{[a-z]+\}`)

func (d *decoder) inspection(n *yaml.Node, p string) *Inspection {
	f := d.mapping(n, p, "match", "name")
	out := &Inspection{}
	name, nv := f.str("name", false)
	out.Name = name
	for _, ph := range templateRE.compile().FindAllString(name, -1) {
		if !slices.Contains([]string{"{serial}", "{mac}", "{sku}"}, ph) {
			d.errorf(nv, join(p, "name"), "unknown placeholder %s (known: {serial}, {mac}, {sku})", ph)
		}
	}
	mv := f.get("match")
	if mv == nil {
		f.missing("match")
		return out
	}
	mp := join(p, "match")
	m := d.mapping(mv, mp, "cpuModel", "gpuModel", "gpuCount", "nicVendors", "serial")
	for _, key := range []string{"cpuModel", "gpuModel", "serial"} {
		s, v := m.str(key, false)
		if v != nil {
			if _, err := regexp.Compile(s); err != nil {
				d.errorf(v, join(mp, key), "%q is not a regular expression: %v", s, err)
			}
		}
		switch key {
		case "cpuModel":
			out.Match.CPUModel = s
		case "gpuModel":
			out.Match.GPUModel = s
		case "serial":
			out.Match.Serial = s
		}
	}
	out.Match.GPUCount = m.devices("gpuCount", 1)
	for i, item := range m.seq("nicVendors", false) {
		ip := index(join(mp, "nicVendors"), i)
		s, ok := d.scalarString(item, ip)
		if ok && !vendorIDRE.MatchString(s) {
			d.errorf(item, ip, "%q is not a PCI vendor id (0x followed by 4 hex digits, e.g. 0x15b3)", s)
		}
		out.Match.NICVendors = append(out.Match.NICVendors, strings.ToLower(s))
	}
	if m.ok && m.count() == 0 {
		d.errorf(mv, mp, "no condition: a rule that matches every machine proposes its SKU for all of them")
	}
	return out
}

// Propose is the proposal of the SKUs' inspection rules for facts: of the
// SKUs of the machine's architecture, the matching rule with the most
// conditions, ties going to the SKU whose name
// sorts first; ok is false when no rule matches.
func Propose(skus []*SKU, facts Facts) (Proposal, bool) {
	var best Proposal
	found := false
	for _, s := range skus {
		r := s.Spec.Inspection
		if r == nil || (facts.Arch != "" && s.Spec.Architecture() != facts.Arch) {
			continue
		}
		n, ok := r.Match.matches(facts)
		if !ok {
			continue
		}
		if !found || n > best.Conditions || (n == best.Conditions && s.Metadata.Name < best.SKU) {
			best = Proposal{SKU: s.Metadata.Name, Name: r.nodeName(s.Metadata.Name, facts), Conditions: n}
			found = true
		}
	}
	return best, found
}

// matches says whether facts meet every condition set, and how many are.
func (m InspectionMatch) matches(f Facts) (int, bool) {
	n := 0
	all := func(expr string, vals []string) bool {
		if expr == "" {
			return true
		}
		n++
		re, err := regexp.Compile(expr)
		if err != nil || len(vals) == 0 {
			return false
		}
		for _, v := range vals {
			if !re.MatchString(v) {
				return false
			}
		}
		return true
	}
	ok := all(m.CPUModel, f.CPUModels) && all(m.GPUModel, f.GPUModels) && all(m.Serial, []string{f.Serial})
	if m.GPUCount > 0 {
		n++
		ok = ok && len(f.GPUModels) == m.GPUCount
	}
	for _, v := range m.NICVendors {
		n++
		ok = ok && slices.ContainsFunc(f.NICVendors, func(id uint32) bool { return fmt.Sprintf("0x%04x", id) == v })
	}
	return n, ok
}

// nodeName fills the rule's template.
func (r *Inspection) nodeName(sku string, f Facts) string {
	tmpl := r.Name
	if tmpl == "" {
		tmpl = "{sku}-{serial}"
	}
	s := strings.NewReplacer("{serial}", f.Serial, "{mac}", strings.ReplaceAll(f.MAC, ":", ""), "{sku}", sku).Replace(tmpl)
	var b strings.Builder
	for _, c := range strings.ToLower(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
			b.WriteRune(c)
		default:
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-")
}
