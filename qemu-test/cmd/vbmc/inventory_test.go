package main

import (
	"context"
	"testing"

	"github.com/cure-oss/cure/provisioner-lite/nodes"
	"github.com/cure-oss/cure/qemu-test/vbmc"
)

// The node inventory -nodes-yaml writes is one the coordinator imports as
// is: the TLS BMC pinned to the certificate it serves, the plain one insecure.
func TestNodesYAMLImports(t *testing.T) {
	b, err := vbmc.New(vbmc.Config{Name: "node1"}, vbmc.NewFakeMachine())
	if err != nil {
		t.Fatal(err)
	}
	s, err := vbmc.Listen("127.0.0.1:0", b, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	inv := []entry{
		{Name: "node1", URL: s.URL, Fingerprint: s.Fingerprint(), MAC: "52:54:00:c0:00:01", Serial: "S1", Username: "admin", Password: `pa"ss`},
		{Name: "node2", URL: "http://127.0.0.1:9002", MAC: "52:54:00:c0:00:02", Serial: "S2", Username: "admin", Password: "password"},
	}
	ns, err := nodes.ParseYAML("nodes.yaml", nodesYAML(inv))
	if err != nil {
		t.Fatalf("coordinator refuses the generated inventory: %v\n%s", err, nodesYAML(inv))
	}
	if ns[0].BMCFingerprint != s.Fingerprint() || ns[0].BMCInsecure || ns[0].BMCURL != s.URL || ns[0].BMCPassword != `pa"ss` {
		t.Errorf("TLS BMC imported as %+v; want pinned to %s", ns[0], s.Fingerprint())
	}
	if !ns[1].BMCInsecure || ns[1].BMCFingerprint != "" {
		t.Errorf("plain HTTP BMC imported as %+v; want insecure", ns[1])
	}
}
