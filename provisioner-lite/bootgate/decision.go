package bootgate

import (
	"context"
	"errors"
	"net/url"
)

// The gate owns the boot decision; the boot server (provisioner-lite/bootserver)
// only serves it over HTTP and iPXE. These types live here so that control and
// imports both go one way: bootserver → bootgate.

// Decision is the coordinator's answer for one booting NIC.
type Decision struct {
	Boot    bool   // false → iPXE `exit` so firmware falls through to the next boot device (disk)
	Cmdline string // extra kernel args incl. cure.token=..., cure.node=...
	Reason  string // shown on the console either way
}

// Coordinator makes the decisions the boot server serves (Gate, or the
// pipeline's Engine forwarding to it).
type Coordinator interface {
	// BootDecision answers for a MAC (lowercase, colon-separated) asked by
	// peer (the client's IP address). An error wrapping ErrUnknownNode (or
	// store.ErrNotFound) becomes a 404, ErrRateLimited a 429, ErrContested
	// a 409.
	BootDecision(ctx context.Context, mac, peer string) (Decision, error)
	// HostReady records that the installed OS phoned home. It checks the
	// token first and calls readForm (which reads the request body) only
	// once the token is good. An error wrapping ErrUnauthorized (or
	// store.ErrNotFound / store.ErrExpired for the token) becomes a 401;
	// ErrUnknownNode a 404; an error of readForm a 400.
	HostReady(ctx context.Context, nodeID, token, peer string, readForm func() (url.Values, error)) error
}

// HTTPSBooter is a Coordinator that also answers the signed image's
// request for its boot parameters (GET /v1/boot/{mac}, over TLS only).
type HTTPSBooter interface {
	HTTPSBootDecision(ctx context.Context, mac, peer string) (Decision, error)
}

// Errors a Coordinator wraps to choose the boot server's HTTP status.
var (
	ErrUnknownNode  = errors.New("unknown node")
	ErrUnauthorized = errors.New("unauthorized")
	ErrRateLimited  = errors.New("rate limited")
	// ErrContested: two addresses claimed the node's boot window; neither
	// gets a boot identity (the run stops for an operator).
	ErrContested = errors.New("boot identity contested")
)

// The gate is what the boot server serves.
var (
	_ Coordinator = (*Gate)(nil)
	_ HTTPSBooter = (*Gate)(nil)
)
