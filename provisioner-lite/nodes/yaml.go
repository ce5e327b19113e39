package nodes

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"gopkg.in/yaml.v3"

	"github.com/cure-oss/cure/provisioner-lite/store"
)

// ParseYAML parses an inventory document:
//
//	nodes:
//	  - id: gpu-001
//	    bmc:
//	      url: https://10.0.0.11
//	      username: admin
//	      passwordEnv: BMC_PW          # or passwordFile: /etc/cure/bmc-pw, or password: ...
//	      fingerprint: sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//	    macs: ["52:54:00:12:34:56"]
//	    sku: hgx-h100
//	    hostname: gpu-001.dc1
//	    serial: SN123
//	    psids: {S3EVNX0K123456: ABCDEFGHIJKLMNOPQRSTUVWXYZ012345}
//	    labels: {rack: r12}
//	    cabling:                     # the site's cabling map: port -> switch and switch port
//	      enp1s0: {switch: leaf-r12-a, port: Ethernet12}
//	      enp2s0: {switch: leaf-r12-b, chassis: "0c:42:a1:00:00:02", port: Ethernet12}
//
// The BMC's TLS identity is verified: by the pinned SHA-256 fingerprint of
// its certificate (hex, any case, ':' separators allowed; stored as
// "sha256:<lowercase hex>"), or against caFile (a PEM bundle), or, with
// neither, against the coordinator's --bmc-ca or the system roots.
// insecure: true skips verification and is the only way to allow an
// http:// url; it cannot be combined with fingerprint or caFile.
// Exactly one of password, passwordEnv (an environment variable, which must
// be set at import) and passwordFile (a file not readable by group or
// others) gives the password; for the last two only the reference is kept
// and the value is read at every BMC connection. Relative caFile and
// passwordFile paths are relative to the inventory file.
//
// Labels are names a selector can use (CheckLabel). Cabling maps each port
// of the node (its interface name in CURE) to where it must plug in: the
// switch by its LLDP system name (switch) or chassis ID (chassis), and the
// switch's port (port, its LLDP port ID or description); with a map, the
// coordinator judges what LLDP shows on each port (CheckCable). A document may also be
// one node's mapping (id, bmc, macs...) without the `nodes:` list around it:
// a snippet for `curectl nodes add -f`.
//
// name is used in error messages (file:line:col: field: problem). All problems
// found are reported, joined.
func ParseYAML(name string, data []byte, opts ...Option) ([]store.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &yamlParser{file: name, seen: newSeen(), opts: newOptions(opts)}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: empty document: want a top-level `nodes:` list", name)
	}
	root := deref(doc.Content[0])
	fields := p.mapping(root, "")
	if fields == nil {
		return nil, errors.Join(p.errs...)
	}
	if _, one := fields["id"]; one {
		if _, list := fields["nodes"]; !list {
			n, ok := p.node(root, "node")
			if !ok {
				return nil, errors.Join(p.errs...)
			}
			return []store.Node{n}, nil
		}
	}
	for _, key := range sortedKeys(fields) {
		if key != "nodes" {
			p.errf(fields[key].key, key, "unknown field (want only `nodes`)")
		}
	}
	list, ok := fields["nodes"]
	if !ok {
		p.errf(root, "nodes", "required")
		return nil, errors.Join(p.errs...)
	}
	seq := deref(list.val)
	if seq.Kind != yaml.SequenceNode {
		p.errf(seq, "nodes", "want a list, found %s", kindName(seq))
		return nil, errors.Join(p.errs...)
	}
	if len(seq.Content) == 0 {
		p.errf(seq, "nodes", "empty list")
	}
	var out []store.Node
	for i, item := range seq.Content {
		if n, ok := p.node(deref(item), fmt.Sprintf("nodes[%d]", i)); ok {
			out = append(out, n)
		}
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return out, nil
}

type yamlParser struct {
	file string
	seen *seen
	opts options
	errs []error
}

type kv struct{ key, val *yaml.Node }

func (p *yamlParser) where(n *yaml.Node) string {
	return fmt.Sprintf("%s:%d:%d", p.file, n.Line, n.Column)
}

func (p *yamlParser) errf(n *yaml.Node, field, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s: %s: %s", p.where(n), field, fmt.Sprintf(format, args...)))
}

// deref follows YAML aliases (*anchor) so shared fragments work.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return "scalar " + quote(n.Value)
	}
	return "something else"
}

// mapping returns the key/value pairs of a mapping node, reporting a non-mapping,
// non-scalar keys and duplicate keys. nil means "not a mapping".
func (p *yamlParser) mapping(n *yaml.Node, field string) map[string]kv {
	if n.Kind != yaml.MappingNode {
		f := field
		if f == "" {
			f = "document"
		}
		p.errf(n, f, "want a mapping, found %s", kindName(n))
		return nil
	}
	out := map[string]kv{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			p.errf(k, field, "mapping key must be a scalar")
			continue
		}
		name := join(field, k.Value)
		if prev, dup := out[k.Value]; dup {
			p.errf(k, name, "duplicate key (first at line %d)", prev.key.Line)
			continue
		}
		out[k.Value] = kv{k, v}
	}
	return out
}

func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

// scalar returns a scalar's text; null is "". Anything else is reported.
func (p *yamlParser) scalar(n *yaml.Node, field string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		p.errf(n, field, "want a value, found %s", kindName(n))
		return "", false
	}
	if n.Tag == "!!null" {
		return "", true
	}
	return n.Value, true
}

func (p *yamlParser) node(n *yaml.Node, field string) (store.Node, bool) {
	before := len(p.errs)
	fields := p.mapping(n, field)
	if fields == nil {
		return store.Node{}, false
	}
	var out store.Node
	var macsKV *kv
	for _, k := range sortedKeys(fields) {
		f := fields[k]
		name := join(field, k)
		switch k {
		case "id":
			out.ID, _ = p.scalar(f.val, name)
		case "sku":
			out.SKU, _ = p.scalar(f.val, name)
			if err := p.opts.checkSKU(out.SKU); err != nil {
				p.errf(f.val, name, "%v", err)
			}
		case "hostname":
			out.Hostname, _ = p.scalar(f.val, name)
			if err := checkHostname(out.Hostname); err != nil {
				p.errf(f.val, name, "%v", err)
			}
		case "serial":
			out.SystemSerial, _ = p.scalar(f.val, name)
		case "bmc":
			p.bmc(f.val, name, &out)
		case "macs":
			macsKV = &f
		case "psids":
			out.PSIDs = p.stringMap(f.val, name, checkPSID)
		case "labels":
			out.Labels = p.stringMap(f.val, name, CheckLabel)
		case "ek_sha256":
			out.EKSHA256, _ = p.scalar(f.val, name)
			if err := CheckEKSHA256(out.EKSHA256); err != nil {
				p.errf(f.val, name, "%v", err)
			}
		case "cabling":
			out.Cabling = p.cabling(f.val, name)
		default:
			p.errf(f.key, name, "unknown field (want id, bmc, macs, sku, hostname, serial, psids, labels, ek_sha256, cabling)")
		}
	}
	if f, ok := fields["id"]; !ok {
		p.errf(n, join(field, "id"), "required")
	} else if err := checkID(out.ID); err != nil {
		p.errf(f.val, join(field, "id"), "%v", err)
	} else if err := p.seen.id(out.ID, p.where(f.val)); err != nil {
		p.errf(f.val, join(field, "id"), "%v", err)
	}
	if _, ok := fields["bmc"]; !ok {
		p.errf(n, join(field, "bmc"), "required")
	}
	if macsKV == nil {
		p.errf(n, join(field, "macs"), "required: at least one MAC the node PXE-boots from")
	} else {
		out.MACs = p.macs(macsKV.val, join(field, "macs"), out.ID)
	}
	return out, len(p.errs) == before
}

func (p *yamlParser) bmc(n *yaml.Node, field string, out *store.Node) {
	fields := p.mapping(n, field)
	if fields == nil {
		return
	}
	var b bmcFields
	for _, k := range sortedKeys(fields) {
		f := fields[k]
		name := join(field, k)
		switch k {
		case "url":
			b.url, _ = p.scalar(f.val, name)
			out.BMCURL = b.url
			if err := checkBMCURL(out.BMCURL); err != nil {
				p.errf(f.val, name, "%v", err)
			}
		case "username":
			out.BMCUser, _ = p.scalar(f.val, name)
		case "password":
			b.password, _ = p.scalar(f.val, name)
		case "passwordEnv":
			b.passwordEnv, _ = p.scalar(f.val, name)
		case "passwordFile":
			b.passwordFile, _ = p.scalar(f.val, name)
		case "caFile":
			b.caFile, _ = p.scalar(f.val, name)
		case "fingerprint":
			b.fingerprint, _ = p.scalar(f.val, name)
		case "insecure":
			if f.val.Kind != yaml.ScalarNode || f.val.Tag != "!!bool" || f.val.Decode(&b.insecure) != nil {
				p.errf(f.val, name, "want true or false, found %s", kindName(f.val))
			}
		default:
			p.errf(f.key, name, "unknown field (want url, username, password, passwordEnv, passwordFile, caFile, fingerprint, insecure)")
		}
	}
	if _, ok := fields["url"]; !ok {
		p.errf(n, join(field, "url"), "required")
	}
	if out.BMCUser == "" {
		p.errf(n, join(field, "username"), "required")
	}
	for _, fe := range b.apply(filepath.Dir(p.file), out) {
		at, name := n, field
		if f, ok := fields[fe.field]; ok && fe.field != "" {
			at, name = f.val, join(field, fe.field)
		}
		p.errf(at, name, "%v", fe.err)
	}
}

func (p *yamlParser) macs(n *yaml.Node, field, nodeID string) []string {
	if n.Kind != yaml.SequenceNode {
		p.errf(n, field, "want a list, found %s", kindName(n))
		return nil
	}
	if len(n.Content) == 0 {
		p.errf(n, field, "empty: at least one MAC the node PXE-boots from")
	}
	var out []string
	for i, item := range n.Content {
		item = deref(item)
		name := fmt.Sprintf("%s[%d]", field, i)
		s, ok := p.scalar(item, name)
		if !ok {
			continue
		}
		m, err := store.NormalizeMAC(s)
		if err != nil {
			p.errf(item, name, "%v", err)
			continue
		}
		if err := p.seen.mac(m, nodeID, p.where(item)); err != nil {
			p.errf(item, name, "%v", err)
			continue
		}
		out = append(out, m)
	}
	return out
}

func (p *yamlParser) stringMap(n *yaml.Node, field string, check func(k, v string) error) map[string]string {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	fields := p.mapping(n, field)
	if fields == nil {
		return nil
	}
	out := map[string]string{}
	for _, k := range sortedKeys(fields) {
		f := fields[k]
		name := join(field, k)
		v, ok := p.scalar(f.val, name)
		if !ok {
			continue
		}
		if err := check(k, v); err != nil {
			p.errf(f.val, name, "%v", err)
			continue
		}
		out[k] = v
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// sortedKeys gives a deterministic order so errors read the same on every run.
func sortedKeys(m map[string]kv) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
