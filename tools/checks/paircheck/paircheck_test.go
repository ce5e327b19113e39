package paircheck

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/tools/checks"
)

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestEthernetSlotRealIperf3: the server side (iperf3 -s bound to its
// address) and the client side of one slot, both real iperf3 on the
// loopback; the client starts before the server listens, as a partner's
// may, and retries; both directions are measured.
func TestEthernetSlotRealIperf3(t *testing.T) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Skip("iperf3 not installed (scripts/install-deps.sh)")
	}
	port := freePort(t)
	base := Slot{Transport: Ethernet, TCPPort: port, Duration: time.Second, Tools: checks.HostTools}
	srv, cli := base, base
	srv.Role, srv.Address, srv.Partner = Server, "127.0.0.1", "client-node"
	cli.Role, cli.Address, cli.PartnerAddress, cli.Partner = Client, "127.0.0.1", "127.0.0.1", "server-node"

	window, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	served := make(chan error, 1)
	go func() {
		time.Sleep(time.Second) // the client is early
		served <- Serve(window, srv)
	}()
	res, err := Measure(window, cli)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Errorf("server: %v", err)
	}
	if res.Unit != "Mb/s" || res.Forward <= 0 || res.Reverse <= 0 {
		t.Fatalf("result %+v", res)
	}
	t.Logf("loopback: forward %.0f Mb/s, reverse %.0f Mb/s", res.Forward, res.Reverse)
	back, err := FromVerdict(res.Verdict("server-node"))
	if err != nil || back != res {
		t.Errorf("verdict round trip %+v %v", back, err)
	}
}

func TestEthernetSlotNoServer(t *testing.T) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Skip("iperf3 not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := Measure(ctx, Slot{Role: Client, Transport: Ethernet, Address: "127.0.0.1", PartnerAddress: "127.0.0.1", TCPPort: freePort(t),
		Duration: time.Second, Partner: "n2", Tools: checks.HostTools})
	if err == nil || !strings.Contains(err.Error(), "window ended") || !strings.Contains(err.Error(), "n2") {
		t.Fatalf("err = %v", err)
	}
}

// fixtureTools answers each perftest program with a recorded report.
func fixtureTools(files map[string]string, calls *[]string) checks.Tools {
	return func(ctx context.Context, name string, args ...string) (*exec.Cmd, error) {
		*calls = append(*calls, name+" "+strings.Join(args, " "))
		return exec.CommandContext(ctx, "cat", "../../perftest/testdata/"+files[name]), nil
	}
}

func TestRDMASlotClient(t *testing.T) {
	var calls []string
	s := Slot{Role: Client, Transport: RDMA, Device: "mlx5_0", Address: "10.1.0.2", PartnerAddress: "10.1.0.1", TCPPort: 5301,
		Duration: 10 * time.Second, Tools: fixtureTools(map[string]string{"ib_write_bw": "write-client-mbs.txt", "ib_read_bw": "read-roce-gbits.txt"}, &calls)}
	res, err := Measure(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if res.Unit != "Gb/s" || res.Forward != 385.21 || res.Reverse != 371.52 {
		t.Errorf("result %+v", res)
	}
	want := []string{"ib_write_bw -d mlx5_0 -i 1 -p 5301 -D 10 -F --report_gbits 10.1.0.1", "ib_read_bw -d mlx5_0 -i 1 -p 5301 -D 10 -F --report_gbits 10.1.0.1"}
	if strings.Join(calls, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls\n%s\nwant\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
	}
	calls = nil
	s.Tools = fixtureTools(map[string]string{"ib_write_bw": "no-device.txt"}, &calls)
	if _, err := Measure(context.Background(), s); err == nil || !strings.Contains(err.Error(), "Unable to find the Infiniband/RoCE device") {
		t.Errorf("no device: %v", err)
	}
}

func TestSlotRefused(t *testing.T) {
	for _, s := range []Slot{
		{Role: Client, Transport: Ethernet, Address: "eth0", PartnerAddress: "10.0.0.1", TCPPort: 1, Tools: checks.HostTools},
		{Role: Client, Transport: Ethernet, Address: "10.0.0.2", PartnerAddress: "", TCPPort: 1, Tools: checks.HostTools},
		{Role: Client, Transport: RDMA, Address: "10.0.0.2", PartnerAddress: "10.0.0.1", TCPPort: 1, Tools: checks.HostTools},
		{Role: Client, Transport: "carrier-pigeon", Address: "10.0.0.2", PartnerAddress: "10.0.0.1", TCPPort: 1, Tools: checks.HostTools},
		{Role: Client, Transport: Ethernet, Address: "10.0.0.2", PartnerAddress: "10.0.0.1", TCPPort: 0, Tools: checks.HostTools},
	} {
		if _, err := Measure(context.Background(), s); err == nil {
			t.Errorf("%+v accepted", s)
		}
	}
}
