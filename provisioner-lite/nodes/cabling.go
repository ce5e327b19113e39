package nodes

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// maxCables bounds a node's cabling map (a node has a handful of ports; a
// GPU node with its fabric, a few dozen).
const maxCables = 256

// portRE is a Linux interface name (IFNAMSIZ: at most 15 bytes).
var portRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@:-]{0,14}$`)

// CheckCable checks one entry of a cabling map: port is the node's
// interface, c where it plugs in. Switch or chassis names the switch
// (LLDP system name, chassis ID); port names its port (LLDP port ID or
// description). A MAC chassis is normalised.
func CheckCable(port string, c *store.Cable) error {
	if !portRE.MatchString(port) {
		return fmt.Errorf("port %s: want the node's interface name as CURE sees it (enp1s0, eth0; at most 15 characters)", quote(port))
	}
	var errs []error
	if c.Switch == "" && c.Chassis == "" {
		errs = append(errs, errors.New("switch or chassis: at least one names the switch (its LLDP system name, its chassis ID)"))
	}
	if c.Port == "" {
		errs = append(errs, errors.New("port: required (the switch's port as LLDP names it: Ethernet12, swp7)"))
	}
	for _, f := range []struct{ name, v string }{{"switch", c.Switch}, {"chassis", c.Chassis}, {"port", c.Port}} {
		if len(f.v) > 255 || strings.ContainsFunc(f.v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			errs = append(errs, fmt.Errorf("%s: %s: at most 255 printable characters (what LLDP carries)", f.name, quote(f.v)))
		}
	}
	if hw, err := net.ParseMAC(c.Chassis); err == nil && len(hw) == 6 {
		c.Chassis = hw.String()
	}
	return errors.Join(errs...)
}

// checkCabling checks a whole map (Check's part for nodes built by hand).
func checkCabling(m map[string]store.Cable, bad func(string, error)) map[string]store.Cable {
	if len(m) > maxCables {
		bad("cabling", fmt.Errorf("%d ports: at most %d", len(m), maxCables))
		return m
	}
	out := make(map[string]store.Cable, len(m))
	for _, port := range slices.Sorted(maps.Keys(m)) {
		c := m[port]
		if err := CheckCable(port, &c); err != nil {
			bad("cabling."+port, err)
		}
		out[port] = c
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// cabling parses a node's `cabling:` mapping (port: {switch, chassis, port}).
func (p *yamlParser) cabling(n *yaml.Node, field string) map[string]store.Cable {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	ports := p.mapping(n, field)
	if ports == nil {
		return nil
	}
	if len(ports) > maxCables {
		p.errf(n, field, "%d ports: at most %d", len(ports), maxCables)
		return nil
	}
	out := map[string]store.Cable{}
	for _, port := range sortedKeys(ports) {
		f := ports[port]
		name := join(field, port)
		fields := p.mapping(f.val, name)
		if fields == nil {
			continue
		}
		var c store.Cable
		for _, k := range sortedKeys(fields) {
			v := fields[k]
			switch k {
			case "switch":
				c.Switch, _ = p.scalar(v.val, join(name, k))
			case "chassis":
				c.Chassis, _ = p.scalar(v.val, join(name, k))
			case "port":
				c.Port, _ = p.scalar(v.val, join(name, k))
			default:
				p.errf(v.key, join(name, k), "unknown field (want switch, chassis, port)")
			}
		}
		if err := CheckCable(port, &c); err != nil {
			at := f.val
			if !portRE.MatchString(port) {
				at = f.key
			}
			p.errf(at, name, "%v", err)
			continue
		}
		out[port] = c
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// CablingProto is a cabling map as NodeSpec carries it.
func CablingProto(m map[string]store.Cable) map[string]*curev1.PlannedCable {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]*curev1.PlannedCable, len(m))
	for port, c := range m {
		out[port] = &curev1.PlannedCable{SwitchName: c.Switch, ChassisId: c.Chassis, Port: c.Port}
	}
	return out
}

// CablingFromProto is NodeSpec's cabling map for the store (Check checks it).
func CablingFromProto(m map[string]*curev1.PlannedCable) map[string]store.Cable {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]store.Cable, len(m))
	for port, c := range m {
		out[port] = store.Cable{Switch: c.GetSwitchName(), Chassis: c.GetChassisId(), Port: c.GetPort()}
	}
	return out
}
