package qemutest

import (
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/qemu-test/harness"
	"github.com/cure-oss/cure/qemu-test/vbmc"
	"github.com/cure-oss/cure/runner/inventory/invtest"
)

// TestEnlistUnknownMachine: with --enlist, a QEMU machine in no node's
// inventory, powered on through its BMC, PXE-boots CURE in inspect mode
// and is discovered with its inventory and its BMC's SMBIOS type 42 record
// (a binary structure QEMU loads with -smbios file=, naming the virtual
// BMC's address and port); the SKU's inspection rule proposes it, an
// approval makes it a node with that BMC, and it is then provisioned end
// to end (make test; `make e2e-enlist` runs it alone). The parts are also
// tested without a boot: provisioner-lite/enlist
// TestEnlistUnknownMachineInProcess, TestEnlistGivesNoSecrets; on fixture
// sysfs, cure-runner TestInspectModeReports, inventory TestHostInterfaces.
func TestEnlistUnknownMachine(t *testing.T) {
	t.Parallel() // its own environment: see startEnv
	began := time.Now()
	env := startEnv(t, harness.Options{ExtraCoordinatorArgs: []string{"--enlist"}, EditManifest: func(s *manifests.SKU) {
		s.Spec.Inspection = &manifests.Inspection{Match: manifests.InspectionMatch{Serial: "^CURE-ENLIST-", NICVendors: []string{"0x1af4"}},
			Name: "enlisted-{serial}"}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	srv, bmcMAC := unlistedMachine(ctx, t, env)
	u, _ := url.Parse(srv.URL)

	// The discovered record, once its inspection is in.
	var d *curev1.Discovered
	for d == nil {
		if ctx.Err() != nil {
			t.Fatal("the unlisted machine was not discovered")
		}
		l, err := env.Client.ListDiscovered(ctx, &curev1.ListDiscoveredRequest{})
		if err == nil && len(l.GetDiscovered()) == 1 && l.GetDiscovered()[0].GetState() == "reported" {
			d = l.GetDiscovered()[0]
			break
		}
		time.Sleep(2 * time.Second)
	}
	discovered := time.Since(began)
	rep := d.GetReport()
	if d.GetMac() != "52:54:00:c0:de:99" || rep.GetInventory().GetSystem().GetSerial() != "CURE-ENLIST-0001" || len(rep.GetInventory().GetNvme()) != 1 ||
		d.GetProposedSku() != "qemu-nvme" || d.GetProposedName() != "enlisted-cure-enlist-0001" {
		t.Fatalf("discovered %v", d)
	}
	if len(rep.GetBmc()) != 1 || rep.GetBmc()[0].GetBmcIp() != "127.0.0.1" || strconv.Itoa(int(rep.GetBmc()[0].GetBmcPort())) != u.Port() ||
		rep.GetBmc()[0].GetBmcMac() != bmcMAC.String() {
		t.Fatalf("BMC record %v, want 127.0.0.1:%s and %s", rep.GetBmc(), u.Port(), bmcMAC)
	}
	ar, err := env.Client.ApproveDiscovered(ctx, &curev1.ApproveDiscoveredRequest{Id: d.GetId(),
		Node: &curev1.NodeSpec{Bmc: &curev1.BMCSpec{Username: "admin", Password: "password", Fingerprint: srv.Fingerprint()}}})
	if err != nil || ar.GetNodeId() != "enlisted-cure-enlist-0001" || ar.GetBmcUrl() != "https://127.0.0.1:"+u.Port() {
		t.Fatalf("approve: %v, %v", ar, err)
	}
	approved := time.Since(began)
	run := provisionAndWait(t, env, ar.GetNodeId(), false)
	if run.GetStatus() != "succeeded" {
		t.Fatalf("the approved node's run ended %s: %s", run.GetStatus(), run.GetMessage())
	}
	t.Logf("enlist-e2e discovered=%s approved=%s provisioned=%s", discovered.Round(time.Second), approved.Round(time.Second),
		time.Since(began).Round(time.Second))
}

// unlistedMachine is a QEMU node with its virtual BMC that no nodes file
// names, its SMBIOS carrying a type 42 record for that BMC, powered on
// into a one-time PXE boot as a technician would.
func unlistedMachine(ctx context.Context, t *testing.T, env *harness.Env) (*vbmc.Server, net.HardwareAddr) {
	t.Helper()
	dir := t.TempDir()
	disk, blob := filepath.Join(dir, "nvme.raw"), filepath.Join(dir, "type42.bin")
	if err := os.WriteFile(disk, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, 1<<30); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(env.HTTPAddr)
	m, err := vbmc.NewQEMUMachine(vbmc.QEMUConfig{Name: "unlisted", MAC: "52:54:00:c0:de:99", Serial: "CURE-ENLIST-0001",
		UUID: "4c4c4544-0000-4000-8000-000000000099", DiskPath: disk, MemoryMiB: 1024, ConsoleLog: filepath.Join(dir, "console.log"),
		BootURL: "http://10.0.2.2:" + port + "/boot.ipxe", RebootTimeout: 10 * time.Second, Logger: env.Opts.Logger.With("vm", "unlisted"),
		ExtraArgs: []string{"-smbios", "file=" + blob}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := vbmc.New(vbmc.Config{Name: "unlisted", Serial: "CURE-ENLIST-0001", MAC: "52:54:00:c0:de:99", Logger: env.Opts.Logger.With("bmc", "unlisted"),
		TaskDuration: time.Second, ResetDuration: time.Second}, m)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := vbmc.Listen("127.0.0.1:0", b, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = srv.Shutdown(cctx)
		_ = b.Close(cctx)
	})
	u, _ := url.Parse(srv.URL)
	p, _ := strconv.Atoi(u.Port())
	bmcMAC := net.HardwareAddr{0x02, 0x00, 0x5e, 0x10, 0x00, 0x99}
	if err := os.WriteFile(blob, invtest.HostInterface(bmcMAC, net.IPv4(127, 0, 0, 1), uint16(p), "vbmc-unlisted"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := redfish.Connect(ctx, redfish.Endpoint{URL: srv.URL, Username: "admin", Password: "password", Insecure: true}, redfish.Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetBootOverride(ctx, redfish.BootPxe, true); err != nil {
		t.Fatal(err)
	}
	if err := c.PowerOn(ctx); err != nil {
		t.Fatal(err)
	}
	return srv, bmcMAC
}
