package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/inventory"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/grpc/codes"
)

// The Hello inventory is stored per boot, from authenticated sessions only,
// cleaned and bounded, once per boot, and shown in the run's report.
func TestHelloInventoryStoredPerBoot(t *testing.T) {
	h := newHostile(t)
	ctx := context.Background()
	inv := &curev1.Inventory{
		System:   &curev1.SystemInfo{Vendor: "ACME", Product: "HGX\x1b]0;owned\x07", Serial: "SER-A", BiosVersion: "2.1"},
		CpuCount: 2, MemoryBytes: 1 << 30,
		Gpus: []*curev1.Gpu{{Index: 0, Name: "NVIDIA H100", PciAddress: "0000:18:00.0", Vbios: "96.00.99"}},
	}
	for i := range 3000 {
		inv.Disks = append(inv.Disks, &curev1.BlockDevice{Name: fmt.Sprintf("sd%d", i), Model: strings.Repeat("m", 200)})
	}

	// Without a valid token nothing is stored.
	s, cancel := h.session(helloOpts{token: "forged", boot: "b0", node: nodeA, inv: inv})
	if err := send(s, logEvent(1, "", "x")); codeOf(err) != codes.Unauthenticated {
		t.Fatalf("forged token: %v", err)
	}
	cancel()
	if _, err := h.st.LatestInventory(ctx, nodeA.id); err == nil {
		t.Fatal("an unauthenticated Hello's inventory was stored")
	}

	tok := h.fetchToken(nodeA.mac)
	s, cancel = h.session(helloOpts{token: tok, boot: "b1", node: nodeA, inv: inv})
	if err := send(s, logEvent(1, "", "hello")); err != nil {
		t.Fatal(err)
	}
	cancel()
	rec, err := h.st.RunInventory(ctx, nodeA.run)
	if err != nil || rec.BootID != "b1" || rec.NodeID != nodeA.id || rec.Peer != "127.0.0.1" || !rec.Truncated || len(rec.JSON) > inventory.MaxJSON {
		t.Fatalf("stored: %+v (%d bytes), %v", rec, len(rec.JSON), err)
	}
	got, err := inventory.Unmarshal(rec.JSON)
	if err != nil || !textsafe.Safe(got.GetSystem().GetProduct()) || !strings.HasPrefix(got.GetSystem().GetProduct(), "HGX") ||
		len(got.GetDisks()) == 0 || len(got.GetDisks()) >= 3000 || got.GetGpus()[0].GetVbios() != "96.00.99" {
		t.Fatalf("stored inventory: system %+v, %d disks, %v", got.GetSystem(), len(got.GetDisks()), err)
	}

	// A reconnect of the same boot keeps the first record.
	other := &curev1.Inventory{System: &curev1.SystemInfo{Serial: "changed"}}
	s, cancel = h.session(helloOpts{token: tok, boot: "b1", node: nodeA, inv: other})
	if err := send(s, logEvent(2, "", "again")); err != nil {
		t.Fatal(err)
	}
	cancel()
	if again, _ := h.st.LatestInventory(ctx, nodeA.id); again.ID != rec.ID {
		t.Fatalf("reconnect stored another record: %+v", again)
	}
	if _, err := h.st.LatestInventory(ctx, nodeB.id); err == nil {
		t.Fatal("node B has an inventory")
	}

	// The run's report carries it.
	rep, err := server.BuildReport(ctx, h.st, h.run(nodeA.run))
	if err != nil || rep.GetInventory().GetBootId() != "b1" || rep.GetInventory().GetInventory().GetSystem().GetVendor() != "ACME" || !rep.GetInventory().GetTruncated() {
		t.Fatalf("report inventory: %+v, %v", rep.GetInventory(), err)
	}
	if rep, _ := server.BuildReport(ctx, h.st, h.run(nodeB.run)); rep.GetInventory() != nil {
		t.Fatalf("node B's report shows %+v", rep.GetInventory())
	}
}
