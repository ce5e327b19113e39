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
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
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
	return &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}, nil
}

// Dial prepares a TLS client connection to coordinator (HOST:PORT) trusting
// the CA in caFile. The connection is established lazily; Session waits for
// it with a timeout on every attempt.
func Dial(coordinator, caFile string, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	host, _, err := net.SplitHostPort(coordinator)
	if err != nil {
		return nil, fmt.Errorf("coordinator address %q: expected HOST:PORT: %w", coordinator, err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading coordinator CA: %w", err)
	}
	tc, err := TLSConfig(pem, host)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", caFile, err)
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(credentials.NewTLS(tc)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: 10 * time.Second, PermitWithoutStream: true}),
	}, extra...)
	conn, err := grpc.NewClient("passthrough:///"+coordinator, opts...)
	if err != nil {
		return nil, fmt.Errorf("creating gRPC client for %s: %w", coordinator, err)
	}
	return conn, nil
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
