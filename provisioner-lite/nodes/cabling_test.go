package nodes

import (
	"reflect"
	"strings"
	"testing"

	"github.com/cure-oss/cure/provisioner-lite/store"
)

const cablingNode = `nodes:
  - id: node7
    bmc: {url: "https://10.0.0.7", username: admin, password: pw, insecure: true}
    macs: ["52:54:00:00:00:07"]
    cabling:
      enp1s0: {switch: leaf-r12-a, port: Ethernet12}
      enp2s0: {chassis: "0C-42-A1-00-00-02", port: swp7}
`

func TestParseCabling(t *testing.T) {
	ns, err := ParseYAML("nodes.yaml", []byte(cablingNode))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]store.Cable{
		"enp1s0": {Switch: "leaf-r12-a", Port: "Ethernet12"},
		"enp2s0": {Chassis: "0c:42:a1:00:00:02", Port: "swp7"},
	}
	if !reflect.DeepEqual(ns[0].Cabling, want) {
		t.Errorf("cabling = %v, want %v", ns[0].Cabling, want)
	}
	// What Check sees for a node built by hand, the same.
	n := ns[0]
	n.Cabling = map[string]store.Cable{"enp2s0": {Chassis: "0C:42:A1:00:00:02", Port: "swp7"}}
	if err := Check(&n); err != nil || n.Cabling["enp2s0"].Chassis != "0c:42:a1:00:00:02" {
		t.Errorf("Check = %v, cabling %v", err, n.Cabling)
	}
	n.Cabling = map[string]store.Cable{"enp2s0": {Port: "swp7"}, "bad port name!": {Switch: "s", Port: "p"}}
	if err := Check(&n); err == nil || !strings.Contains(err.Error(), "cabling.enp2s0: switch or chassis") || !strings.Contains(err.Error(), "cabling.bad port name!") {
		t.Errorf("Check with a bad map = %v", err)
	}
}

func TestParseCablingRefusals(t *testing.T) {
	for _, tc := range []struct{ cabling, want string }{
		{"      enp1s0: {switch: leaf-a}\n", "nodes.yaml:6:15: nodes[0].cabling.enp1s0: port: required"},
		{"      enp1s0: {port: Ethernet1}\n", "nodes.yaml:6:15: nodes[0].cabling.enp1s0: switch or chassis"},
		{"      enp1s0: {switch: a, port: b, vlan: 3}\n", "nodes.yaml:6:36: nodes[0].cabling.enp1s0.vlan: unknown field (want switch, chassis, port)"},
		{"      this-name-is-far-too-long: {switch: a, port: b}\n", "nodes.yaml:6:7: nodes[0].cabling.this-name-is-far-too-long: port \"this-name-is-far-too-long\""},
		{"      enp1s0: leaf-a\n", "nodes.yaml:6:15: nodes[0].cabling.enp1s0: want a mapping"},
	} {
		doc := strings.SplitAfter(cablingNode, "cabling:\n")[0] + tc.cabling
		_, err := ParseYAML("nodes.yaml", []byte(doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cabling %q: error %v\nwant it to contain %q", tc.cabling, err, tc.want)
		}
	}
}
