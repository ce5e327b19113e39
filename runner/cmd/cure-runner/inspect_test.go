package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/runner/boot"
	"github.com/cure-oss/cure/runner/inventory/invtest"
	"github.com/cure-oss/cure/runner/transport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

type inspectCoord struct {
	curev1.UnimplementedRunnerServiceServer
	mu   sync.Mutex
	got  *curev1.InspectReport
	done chan struct{}
}

func (c *inspectCoord) Inspect(_ context.Context, rep *curev1.InspectReport) (*curev1.InspectAck, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.got == nil {
		c.got = rep
		close(c.done)
	}
	return &curev1.InspectAck{DiscoveredId: "disc-1"}, nil
}

// In inspect mode the runner reports (with its discovery token) its
// inventory, its BMC's type 42 record and its drives, then waits: it
// opens no session.
func TestInspectModeReports(t *testing.T) {
	root := invtest.Root(t)
	mac, _ := net.ParseMAC("02:00:5e:10:00:01")
	invtest.Write(t, root, "sys/firmware/dmi/entries/42-0/raw", string(invtest.HostInterface(mac, net.IPv4(169, 254, 0, 17), 443, "bmc")))
	caPEM, cert := tlsPair(t)
	caFile := filepath.Join(root, "ca.pem")
	writeFile(t, caFile, string(caPEM))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewServerTLSFromCert(&cert)))
	co := &inspectCoord{done: make(chan struct{})}
	curev1.RegisterRunnerServiceServer(srv, co)
	go srv.Serve(lis)
	defer srv.Stop()
	var console bytes.Buffer
	var cmu sync.Mutex
	r := &runner{opt: options{dryRun: true, root: root, caFile: caFile}, console: lockedWriter{&cmu, &console},
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), procRoot: filepath.Join(root, "proc"),
		cmd:      boot.ParseCmdline("cure.coordinator=" + lis.Addr().String() + " cure.mode=inspect cure.enlist=disc-token"),
		timeline: boot.NewTimeline()}
	if err := r.cmd.Validate(); err != nil {
		t.Fatal(err)
	}
	inv, _ := r.inventory(context.Background(), &boot.Lease{MAC: "52:54:00:00:00:99"})
	conn, err := transport.Dial(r.cmd.Coordinator, caFile)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ended := make(chan struct{})
	go func() { r.inspect(ctx, conn, inv); close(ended) }()
	select {
	case <-co.done:
	case <-ctx.Done():
		t.Fatal("no inspection report")
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		cmu.Lock()
		said := strings.Contains(console.String(), "enlisted as disc-1")
		cmu.Unlock()
		if said {
			break
		}
	}
	cancel()
	<-ended
	rep := co.got
	if rep.GetToken() != "disc-token" || rep.GetInventory() == nil || len(rep.GetBmc()) != 1 || rep.GetBmc()[0].GetBmcIp() != "169.254.0.17" ||
		rep.GetBmc()[0].GetBmcMac() != "02:00:5e:10:00:01" || rep.GetArch() == "" {
		t.Fatalf("report %v", rep)
	}
	cmu.Lock()
	defer cmu.Unlock()
	if !strings.Contains(console.String(), "enlisted as disc-1") {
		t.Fatalf("console: %s", console.String())
	}
}
