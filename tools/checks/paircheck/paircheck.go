// Package paircheck measures one link of the node-pair network burn-in
// from one end: the server side listens on the node's own address on the
// port (iperf3 -s bound to it; perftest's listener on the port's RDMA
// device), the client side connects from its own address on its port and
// measures both directions, one after the other: iperf3 forward and
// --reverse on Ethernet, ib_write_bw (client to server) and ib_read_bw
// (server to client) on RDMA. It runs in cure-measure, from the tool
// bundle; the coordinator plans who meets whom (provisioner-lite/pairplan).
package paircheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/iperf3"
	"github.com/cure-oss/cure/tools/perftest"
)

// Roles and transports, as the coordinator's PairSlot names them.
const (
	Server   = "server"
	Client   = "client"
	Ethernet = "ethernet"
	RDMA     = "rdma"
)

// Slot is this node's part of one link in one round.
type Slot struct {
	Role      string
	Transport string
	// Address is this node's own address on the port; PartnerAddress the
	// partner's on its port.
	Address, PartnerAddress string
	// Device is the RDMA device of the port (mlx5_0), RDMA only.
	Device string
	// IBPort is the device's port number (default 1), RDMA only.
	IBPort  int
	TCPPort int
	// Duration is one direction's transfer.
	Duration time.Duration
	// Partner names the partner node, for messages.
	Partner string
	Tools   checks.Tools `json:"-"`
}

// Tools are the bundle programs a slot of transport runs.
func Tools(transport string) []string {
	if transport == RDMA {
		return []string{"ib_write_bw", "ib_read_bw"}
	}
	return []string{"iperf3"}
}

// Result is a client's measurement: both directions.
type Result struct {
	// Forward is client to server, Reverse server to client, in Unit.
	Forward, Reverse float64
	Unit             string // Mb/s (Ethernet), Gb/s (RDMA)
	// Retransmits are iperf3's, both directions summed (Ethernet).
	Retransmits int64
}

func (s Slot) check() error {
	if s.Tools == nil {
		return errors.New("paircheck: no way to run the tools")
	}
	if net.ParseIP(s.Address) == nil {
		return fmt.Errorf("paircheck: own address %q is not an IP address", s.Address)
	}
	if s.Role == Client && net.ParseIP(s.PartnerAddress) == nil {
		return fmt.Errorf("paircheck: partner address %q is not an IP address", s.PartnerAddress)
	}
	if s.TCPPort < 1 || s.TCPPort > 65535 {
		return fmt.Errorf("paircheck: port %d", s.TCPPort)
	}
	if s.Transport == RDMA && s.Device == "" {
		return errors.New("paircheck: an RDMA slot needs the port's RDMA device")
	}
	if s.Transport != Ethernet && s.Transport != RDMA {
		return fmt.Errorf("paircheck: transport %q", s.Transport)
	}
	return nil
}

func (s Slot) seconds() string {
	d := s.Duration
	if d <= 0 {
		d = 10 * time.Second
	}
	return strconv.Itoa(max(1, int(d.Round(time.Second)/time.Second)))
}

// Serve is the server side: it listens until ctx ends (the round's
// window), serving the client's tests. Its error is only for a listener
// that could not start or died before the window ended.
func Serve(ctx context.Context, s Slot) error {
	if err := s.check(); err != nil {
		return err
	}
	if s.Transport == RDMA {
		// perftest's listener serves one test, then exits: the write test,
		// then the read test, each waiting for the client.
		for _, tool := range Tools(RDMA) {
			cmd, err := s.Tools(ctx, tool, s.perftestArgs("")...)
			if err != nil {
				return fmt.Errorf("paircheck: %w", err)
			}
			out, _, err := checks.RunTool(cmd)
			if ctx.Err() != nil {
				return nil
			}
			if _, perr := perftest.Parse(out); perr != nil {
				return fmt.Errorf("paircheck: %s listener for %s: %w (%v)", tool, s.Partner, perr, err)
			}
		}
		<-ctx.Done()
		return nil
	}
	cmd, err := s.Tools(ctx, "iperf3", "--server", "--bind", s.Address, "--port", strconv.Itoa(s.TCPPort))
	if err != nil {
		return fmt.Errorf("paircheck: %w", err)
	}
	_, stderr, err := checks.RunTool(cmd)
	if ctx.Err() != nil {
		return nil // the window ended: the server was meant to stop
	}
	return fmt.Errorf("paircheck: iperf3 server on %s:%d stopped early: %v: %s", s.Address, s.TCPPort, err, strings.TrimSpace(string(stderr)))
}

// Measure is the client side: both directions, each retried while the
// partner's listener is not up yet, until ctx ends.
func Measure(ctx context.Context, s Slot) (Result, error) {
	if err := s.check(); err != nil {
		return Result{}, err
	}
	if s.Transport == RDMA {
		return s.measureRDMA(ctx)
	}
	var res Result
	res.Unit = "Mb/s"
	for _, reverse := range []bool{false, true} {
		r, err := s.iperf(ctx, reverse)
		if err != nil {
			return Result{}, err
		}
		if reverse {
			res.Reverse = round2(r.ReceivedBps / 1e6)
		} else {
			res.Forward = round2(r.ReceivedBps / 1e6)
		}
		res.Retransmits += r.Retransmits
	}
	return res, nil
}

// retryEvery is how long a client waits before connecting again to a
// listener that is not up yet.
const retryEvery = 500 * time.Millisecond

func (s Slot) iperf(ctx context.Context, reverse bool) (*iperf3.Report, error) {
	args := []string{"--client", s.PartnerAddress, "--bind", s.Address, "--port", strconv.Itoa(s.TCPPort), "--time", s.seconds(),
		"--json", "--interval", "0", "--connect-timeout", "3000"}
	if reverse {
		args = append(args, "--reverse")
	}
	dir := map[bool]string{false: s.Address + " -> " + s.PartnerAddress, true: s.PartnerAddress + " -> " + s.Address}[reverse]
	var last string
	for {
		cmd, err := s.Tools(ctx, "iperf3", args...)
		if err != nil {
			return nil, fmt.Errorf("paircheck: %w", err)
		}
		stdout, _, runErr := checks.RunTool(cmd)
		r, err := iperf3.Parse(stdout)
		switch {
		case err == nil && r.Error == "" && runErr == nil:
			return r, nil
		case err == nil && r.Error != "":
			last = r.Error
		case err != nil:
			last = fmt.Sprintf("%v (%v)", err, runErr)
		default:
			last = runErr.Error()
		}
		// Refused (not listening yet) or busy (the partner's server still
		// finishing the other direction): try again within the window.
		if !strings.Contains(last, "refused") && !strings.Contains(last, "busy") && !strings.Contains(last, "unable to connect") {
			return nil, fmt.Errorf("paircheck: iperf3 %s (port %d, %s): %s", dir, s.TCPPort, s.Partner, last)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("paircheck: iperf3 %s (port %d, %s): window ended: %s", dir, s.TCPPort, s.Partner, last)
		case <-time.After(retryEvery):
		}
	}
}

func (s Slot) perftestArgs(server string) []string {
	port := s.IBPort
	if port <= 0 {
		port = 1
	}
	args := []string{"-d", s.Device, "-i", strconv.Itoa(port), "-p", strconv.Itoa(s.TCPPort), "-D", s.seconds(), "-F", "--report_gbits"}
	if server != "" {
		args = append(args, server)
	}
	return args
}

func (s Slot) measureRDMA(ctx context.Context) (Result, error) {
	res := Result{Unit: "Gb/s"}
	for i, tool := range Tools(RDMA) {
		var last string
		for {
			cmd, err := s.Tools(ctx, tool, s.perftestArgs(s.PartnerAddress)...)
			if err != nil {
				return Result{}, fmt.Errorf("paircheck: %w", err)
			}
			out, _, runErr := checks.RunTool(cmd)
			r, err := perftest.Parse(out)
			if err == nil {
				if i == 0 {
					res.Forward = round2(r.AvgGbps)
				} else {
					res.Reverse = round2(r.AvgGbps)
				}
				break
			}
			last = fmt.Sprintf("%v (%v)", err, runErr)
			if !strings.Contains(last, "Couldn't connect") && !strings.Contains(last, "socket connection") {
				return Result{}, fmt.Errorf("paircheck: %s %s to %s (port %d): %s", tool, s.Device, s.PartnerAddress, s.TCPPort, last)
			}
			select {
			case <-ctx.Done():
				return Result{}, fmt.Errorf("paircheck: %s %s to %s (port %d): window ended: %s", tool, s.Device, s.PartnerAddress, s.TCPPort, last)
			case <-time.After(retryEvery):
			}
		}
	}
	return res, nil
}

// Verdict is a client's result as the measure helper returns it: the
// measurements forward and reverse in their unit, PASS (the batch's
// judge, not the node, decides).
func (r Result) Verdict(partner string) checks.Verdict {
	return checks.Verdict{Component: "pair/" + partner, Status: checks.Pass,
		Observed:     fmt.Sprintf("forward %s %s, reverse %s %s", checks.Num(r.Forward), r.Unit, checks.Num(r.Reverse), r.Unit),
		Measurements: []checks.Measurement{{Metric: "forward", Value: r.Forward, Unit: r.Unit}, {Metric: "reverse", Value: r.Reverse, Unit: r.Unit}, {Metric: "retransmits", Value: float64(r.Retransmits), Unit: "count"}}}
}

// FromVerdict reads a Result back from Verdict's form.
func FromVerdict(v checks.Verdict) (Result, error) {
	var r Result
	seen := 0
	for _, m := range v.Measurements {
		switch m.Metric {
		case "forward":
			r.Forward, r.Unit = m.Value, m.Unit
			seen++
		case "reverse":
			r.Reverse = m.Value
			seen++
		case "retransmits":
			r.Retransmits = int64(m.Value)
		}
	}
	if seen != 2 {
		return r, fmt.Errorf("paircheck: helper verdict %s lacks forward and reverse measurements", v.Component)
	}
	return r, nil
}

func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }
