package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNodesImportCabling: a nodes file's cabling map reaches the
// coordinator's store through curectl nodes add -f (NodeSpec.cabling), and
// nodes show lists it.
func TestNodesImportCabling(t *testing.T) {
	c := startCoordinator(t)
	f := filepath.Join(t.TempDir(), "n1.yaml")
	os.WriteFile(f, []byte("id: n1\nbmc: {url: https://192.0.2.11, username: admin, password: pw, insecure: true}\nmacs: [52:54:00:aa:00:01]\n"+
		"cabling:\n  enp1s0: {switch: leaf-r12-a, port: Ethernet12}\n  enp2s0: {chassis: 0C-42-A1-00-00-02, port: swp7}\n"), 0o600)
	if rc, out, errOut := c.curectl(t, "nodes", "add", "-f", f); rc != 0 {
		t.Fatalf("nodes add -f: rc %d\n%s%s", rc, out, errOut)
	}
	n1, err := c.st.GetNode(context.Background(), "n1")
	if err != nil || n1.Cabling["enp1s0"].Switch != "leaf-r12-a" || n1.Cabling["enp2s0"].Chassis != "0c:42:a1:00:00:02" || n1.Cabling["enp2s0"].Port != "swp7" {
		t.Fatalf("n1 cabling stored as %+v, %v", n1.Cabling, err)
	}
	if rc, out, errOut := c.curectl(t, "nodes", "show", "n1"); rc != 0 || !strings.Contains(out, "cabling enp1s0 -> leaf-r12-a port Ethernet12, enp2s0 -> chassis 0c:42:a1:00:00:02 port swp7") {
		t.Fatalf("nodes show: rc %d\n%s%s", rc, out, errOut)
	}
}
