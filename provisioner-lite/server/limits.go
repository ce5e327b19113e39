package server

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Limits are what a hostile peer meets on the gRPC port (docs/SECURITY.md);
// zero fields take the defaults.
type Limits struct {
	MaxConcurrentStreams uint32        // per connection (default 32)
	MaxRecvMsgSize       int           // bytes (default 1 MiB)
	MaxSendMsgSize       int           // bytes (default 16 MiB)
	HandshakeTimeout     time.Duration // TLS and HTTP/2 setup (default 10s)
	MaxConnectionIdle    time.Duration // a connection without streams (default 5 min)
}

// ServerOptions are the transport options of the coordinator's gRPC server:
// explicit message and stream limits, a handshake deadline, keepalives
// that find dead runners (a node powered off mid-session sends no FIN), and
// the runner session's stream control (sessionTap).
func ServerOptions(l Limits) []grpc.ServerOption {
	if l.MaxConcurrentStreams == 0 {
		l.MaxConcurrentStreams = 32
	}
	if l.MaxRecvMsgSize == 0 {
		l.MaxRecvMsgSize = 1 << 20
	}
	if l.MaxSendMsgSize == 0 {
		l.MaxSendMsgSize = 16 << 20
	}
	if l.HandshakeTimeout == 0 {
		l.HandshakeTimeout = 10 * time.Second
	}
	if l.MaxConnectionIdle == 0 {
		l.MaxConnectionIdle = 5 * time.Minute
	}
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(l.MaxConcurrentStreams),
		grpc.MaxRecvMsgSize(l.MaxRecvMsgSize),
		grpc.MaxSendMsgSize(l.MaxSendMsgSize),
		grpc.ConnectionTimeout(l.HandshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, MaxConnectionIdle: l.MaxConnectionIdle}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// Every node holds one connection for its whole run, mostly idle:
		// per-connection buffers are per-node memory. The 32 KiB read buffer
		// gRPC puts in front of each connection duplicates the TLS record
		// buffer behind it (0 lets the framer read the TLS connection
		// directly), and a shared write buffer goes back to a pool after each
		// flush instead of staying with its idle connection. At 1,000
		// simulated nodes the read buffers alone were 29 MB of the heap.
		grpc.ReadBufferSize(0),
		grpc.SharedWriteBuffer(true),
		// A runner session reads its stream on its handler's goroutine,
		// with no receiver goroutine beside it: the tap gives it the cancel
		// that ends that read when the hub closes the session
		// (sessionloop.go). gRPC takes one tap handle: a server built on
		// these options sets no other.
		grpc.InTapHandle(sessionTap),
	}
}
