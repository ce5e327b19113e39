// Package iperfcheck measures TCP throughput with iperf3, the reference
// network benchmark, against an iperf3 server the suite names (a site
// host on the fabric under test). The verdict's component is the NIC the
// traffic left by (nic/<interface>, found from the local address iperf3
// bound), with the receiver's Mb/s and the sender's retransmits.
package iperfcheck

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/iperf3"
)

// DefaultPort is iperf3's.
const DefaultPort = 5201

// Options configure the check.
type Options struct {
	// Server is host or host:port (DefaultPort when absent).
	Server string
	Tools  checks.Tools `json:"-"`
	// Duration of the transfer (default 10s).
	Duration time.Duration
	// Reverse makes the server send (the node's receive path).
	Reverse bool
	// Streams in parallel (default 1).
	Streams int
	// Bind is the local address to send from ("" lets routing choose).
	Bind string
	// ThroughputMbps bars the received rate; Retransmits the sender's.
	ThroughputMbps, Retransmits checks.Limit
	// Interface names the interface holding a local address; nil reads
	// the host's interfaces.
	Interface func(ip net.IP) (string, error) `json:"-"`
}

// Check runs one iperf3 client and returns the NIC's verdict. An iperf3
// that could not measure (refused, server busy) is an error naming the
// server and what iperf3 said.
func Check(ctx context.Context, o Options) ([]checks.Verdict, error) {
	if o.Tools == nil {
		return nil, fmt.Errorf("iperfcheck: no way to run iperf3")
	}
	host, port, err := SplitServer(o.Server)
	if err != nil {
		return nil, err
	}
	dur := o.Duration
	if dur <= 0 {
		dur = 10 * time.Second
	}
	args := []string{"--client", host, "--port", strconv.Itoa(port), "--time", strconv.Itoa(max(1, int(dur.Round(time.Second)/time.Second))),
		// --interval 0: no per-second entries, so the JSON report stays
		// a few KB however long the run (a burn-in soak runs for hours;
		// with 8 streams, per-second entries outgrow checks.MaxToolOutput
		// in about half an hour).
		"--json", "--interval", "0", "--connect-timeout", "5000"}
	if o.Reverse {
		args = append(args, "--reverse")
	}
	if o.Streams > 1 {
		args = append(args, "--parallel", strconv.Itoa(o.Streams))
	}
	if o.Bind != "" {
		args = append(args, "--bind", o.Bind)
	}
	cmd, err := o.Tools(ctx, "iperf3", args...)
	if err != nil {
		return nil, fmt.Errorf("iperfcheck: %w", err)
	}
	stdout, _, runErr := checks.RunTool(cmd)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r, err := iperf3.Parse(stdout)
	switch {
	case err != nil && runErr != nil:
		return nil, fmt.Errorf("iperfcheck: server %s: %w", o.Server, runErr)
	case err != nil:
		return nil, fmt.Errorf("iperfcheck: server %s: %w", o.Server, err)
	case r.Error != "":
		return nil, fmt.Errorf("iperfcheck: server %s: iperf3: %s", o.Server, r.Error)
	case runErr != nil:
		return nil, fmt.Errorf("iperfcheck: server %s: %w", o.Server, runErr)
	}
	ifname := o.Interface
	if ifname == nil {
		ifname = interfaceOf
	}
	comp := "nic/unknown"
	if name, err := ifname(net.ParseIP(r.LocalHost)); err == nil {
		comp = "nic/" + name
	}
	v := checks.Judge(comp,
		checks.Value("throughputMbps", round2(r.ReceivedBps/1e6), o.ThroughputMbps).In("Mb/s"),
		checks.Value("retransmits", float64(r.Retransmits), o.Retransmits),
		checks.Value("streams", float64(r.Streams), checks.Limit{}),
	)
	dir := "sent to"
	if r.Reverse {
		dir = "received from"
	}
	v.Message = joinMsg(v.Message, fmt.Sprintf("%s %s from %s", dir, r.Remote, r.LocalHost))
	return []checks.Verdict{v}, nil
}

// SplitServer reads host or host:port (IPv6 in brackets with a port).
func SplitServer(s string) (string, int, error) {
	if s == "" {
		return "", 0, fmt.Errorf("iperfcheck: no server")
	}
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return s, DefaultPort, nil
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 || host == "" {
		return "", 0, fmt.Errorf("iperfcheck: server %q: want host or host:port", s)
	}
	return host, port, nil
}

func interfaceOf(ip net.IP) (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return ifc.Name, nil
			}
		}
	}
	return "", fmt.Errorf("no interface holds %s", ip)
}

func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }

func joinMsg(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
