package main

import (
	"context"
	"strings"
	"testing"

	"github.com/cure-oss/cure/provisioner-lite/store"
)

// A provision that reaches a node in the pool lists it (state and disks)
// and asks like a wipe; --yes confirms exactly the deployed nodes, and a
// node outside the pool is provisioned without a question, as before.
func TestProvisionDeployedAsks(t *testing.T) {
	c := startCoordinator(t)
	ctx := context.Background()
	t.Setenv("SITE_BMC_PW", "pw")
	for _, id := range []string{"n1", "n2"} {
		if rc, out, errOut := c.curectl(t, "nodes", "add", "--id", id, "--bmc-url", "https://192.0.2.11", "--bmc-user", "admin",
			"--bmc-password-env", "SITE_BMC_PW", "--bmc-insecure", "--mac", "52-54-00-AA-00-0"+id[1:], "--sku", "qemu-nvme", "--label", "rack=r1"); rc != 0 {
			t.Fatalf("nodes add %s: rc %d\n%s%s", id, rc, out, errOut)
		}
	}
	if _, err := c.st.SetNodePool(ctx, store.NodePool{NodeID: "n1", State: "in_service", Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	oldIn := stdin
	t.Cleanup(func() { stdin = oldIn })
	stdin = strings.NewReader("")
	started := func() map[string]bool {
		runs, err := c.st.LatestRunSummaries(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for id := range runs {
			m[id] = true
		}
		return m
	}

	// No terminal, no --yes: the deployed node named with its state, nothing started.
	rc, out, errOut := c.curectl(t, "provision", "--selector", "rack=r1")
	if rc != 2 || !strings.Contains(errOut, "mode provision erases 1 node(s) in the pool") ||
		!strings.Contains(errOut, "node n1  sku qemu-nvme  serial -  pool in_service") || strings.Contains(errOut, "node n2") ||
		!strings.Contains(errOut, "to provision without a question, give --yes") {
		t.Fatalf("provision of a deployed node without --yes: rc %d\n%s%s", rc, out, errOut)
	}
	if s := started(); len(s) != 0 {
		t.Fatalf("refused provision started runs on %v", s)
	}
	// A node outside the pool: no question.
	rc, out, errOut = c.curectl(t, "provision", "n2")
	if rc != 0 || !strings.Contains(out, "started on n2") || strings.Contains(errOut, "erases") {
		t.Fatalf("provision of a new node: rc %d\n%s%s", rc, out, errOut)
	}
	// --yes: the deployed node confirmed, and the coordinator (admin
	// certificate) starts it.
	rc, out, errOut = c.curectl(t, "provision", "n1", "--yes")
	if rc != 0 || !strings.Contains(out, "started on n1") || !strings.Contains(errOut, "pool in_service") {
		t.Fatalf("provision --yes of a deployed node: rc %d\n%s%s", rc, out, errOut)
	}
	if rc, _, _ := c.curectl(t, "cancel", "n1", "n2"); rc != 0 {
		t.Fatalf("cancel: rc %d", rc)
	}
}
