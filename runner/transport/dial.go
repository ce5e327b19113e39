// Package transport is the runner's gRPC client: a TLS connection to the
// coordinator and the Session loop (Hello, numbered events kept until acked,
// replay after reconnect, drain before reboot).
package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// DefaultCAFile is where the image builder puts the coordinator's CA.
const DefaultCAFile = "/etc/cure/ca.pem"

// KeepaliveTime is how often the client pings an idle connection. The
// coordinator's keepalive.EnforcementPolicy.MinTime must not exceed it, or
// the server answers with GOAWAY "too_many_pings".
const KeepaliveTime = 30 * time.Second

// TLSConfig trusts only the CA in caPEM and checks the server certificate
// against serverName (a DNS name or an IP address in the certificate's SANs).
func TLSConfig(caPEM []byte, serverName string) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("coordinator CA: expected at least one PEM certificate, found none (%d bytes)", len(caPEM))
	}
	if serverName == "" {
		return nil, fmt.Errorf("coordinator TLS: empty server name")
	}
	// TLS 1.3 only, as the coordinator serves: the busybox is built with
	// old GODEBUG defaults (tlsrsakex, tls3des), which TLS 1.3 never uses.
	return &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS13}, nil
}

// Dial prepares a TLS client connection to coordinator (HOST:PORT) trusting
// the CA in caFile. The connection is established lazily; Session waits for
// it with a timeout on every attempt.
//
// coordinator may list several instances, comma-separated: the connection
// uses the first that answers, in order, and when it is lost the next
// reconnect starts again from the first (gRPC pick_first), so a runner whose
// coordinator died carries on with another instance of the same fleet. Each
// instance's certificate is checked against its own host.
func Dial(coordinator, caFile string, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	addrs, err := SplitCoordinators(coordinator)
	if err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading coordinator CA: %w", err)
	}
	host, _, _ := net.SplitHostPort(addrs[0])
	tc, err := TLSConfig(pem, host)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", caFile, err)
	}
	opts := []grpc.DialOption{
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: 10 * time.Second, PermitWithoutStream: true}),
	}
	target := "passthrough:///" + coordinator
	if len(addrs) > 1 {
		// gRPC takes the name to verify from each address when the TLS
		// config names none.
		tc.ServerName = ""
		r := manual.NewBuilderWithScheme("cure-coordinators")
		state := resolver.State{}
		for _, a := range addrs {
			h, _, _ := net.SplitHostPort(a)
			state.Addresses = append(state.Addresses, resolver.Address{Addr: a, ServerName: h})
		}
		r.InitialState(state)
		target = r.Scheme() + ":///coordinators"
		opts = append(opts, grpc.WithResolvers(r), grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"pick_first":{}}]}`))
	}
	opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	opts = append(opts, extra...)
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("creating gRPC client for %s: %w", coordinator, err)
	}
	return conn, nil
}

// SplitCoordinators parses cure.coordinator: one or more HOST:PORT,
// comma-separated, in order of preference.
func SplitCoordinators(s string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(s, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("coordinator address %q: expected HOST:PORT: %w", a, err)
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("coordinator address %q: expected HOST:PORT[,HOST:PORT...]", s)
	}
	return out, nil
}

// waitReady connects conn and waits until it is READY, or fails after
// timeout with the last state seen.
func waitReady(ctx context.Context, conn *grpc.ClientConn, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn.Connect()
	for {
		s := conn.GetState()
		if s == connectivity.Ready {
			return nil
		}
		if !conn.WaitForStateChange(ctx, s) {
			return fmt.Errorf("connecting to coordinator %s: still %v after %v", conn.Target(), s, timeout)
		}
	}
}
