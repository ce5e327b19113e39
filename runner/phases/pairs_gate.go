package phases

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"
)

// The node-pair test server's gate. iperf3 has no way to admit only one
// peer (its RSA authentication needs a build with OpenSSL and still lets
// any peer hold the one-test server while it authenticates), so the tool
// listens on loopback only and a gate on the node's own address of the
// port stands in front of it:
//
//   - a connection from any address but the slot's partner is closed at
//     once, so nobody else can hold the server for the window;
//   - the partner proves the slot's secret (minted by the coordinator for
//     this pair and window and sent to both ends only): the gate sends a
//     fresh nonce, the partner answers HMAC-SHA256(secret, nonce and both
//     ends), so the secret never crosses the wire and a recorded answer
//     is worth nothing in another connection;
//   - only then is the connection spliced to the tool on loopback.
//
// The client's end is the same gate turned round: the tool connects to a
// loopback listener, which dials the partner's gate from the node's own
// address and answers its nonce.

// gateMagic opens the gate's hello; the nonce follows.
var gateMagic = []byte("CURE-PAIR-GATE1\n")

const (
	gateNonceSize = 32
	gateProofSize = sha256.Size
	// gateAdmitted is the gate's one-byte answer to a good proof.
	gateAdmitted = 0x01
	// gateHandshake bounds a handshake: a peer that connects and says
	// nothing is dropped.
	gateHandshake = 3 * time.Second
	// gateMaxPending bounds the handshakes in flight; more connections
	// from the partner's address are closed, not queued.
	gateMaxPending = 8
)

// gateProof is what the client end answers to a nonce: bound to the
// nonce, both addresses and the server's port.
func gateProof(secret, nonce []byte, client, server net.IP, port int) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("cure-pair-gate-v1\x00"))
	m.Write(nonce)
	m.Write(client.To16())
	m.Write(server.To16())
	m.Write([]byte(strconv.Itoa(port)))
	return m.Sum(nil)
}

// gateRefusals counts what a gate refused, by reason and address, for the
// slot's log.
type gateRefusals struct {
	mu   sync.Mutex
	seen map[string]int
	last error // the client end's last failure
}

func (g *gateRefusals) note(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.seen == nil {
		g.seen = map[string]int{}
	}
	g.seen[err.Error()]++
	g.last = err
}

// summary lists the refusals ("" when none).
func (g *gateRefusals) summary() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for k, n := range g.seen {
		out = append(out, fmt.Sprintf("%s (x%d)", k, n))
	}
	slices.Sort(out)
	if len(out) == 0 {
		return ""
	}
	return fmt.Sprint(out)
}

func (g *gateRefusals) lastErr() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last
}

// serverGate listens on the node's own address and port for the slot's
// partner; admitted connections are spliced to backend (the tool on
// loopback). It serves until ctx ends.
type serverGate struct {
	ln      net.Listener
	partner net.IP
	own     net.IP
	port    int
	secret  []byte
	backend string
	pending chan struct{}
	refused gateRefusals
}

// startServerGate binds own:port (never a wildcard address) and serves
// until ctx ends.
func startServerGate(ctx context.Context, own, partner string, port int, secret []byte, backend string) (*serverGate, error) {
	g := &serverGate{partner: net.ParseIP(partner), own: net.ParseIP(own), port: port, secret: secret, backend: backend,
		pending: make(chan struct{}, gateMaxPending)}
	switch {
	case g.own == nil || g.own.IsUnspecified():
		return nil, fmt.Errorf("test server gate: own address %q is not one address", own)
	case g.partner == nil || g.partner.IsUnspecified():
		return nil, fmt.Errorf("test server gate: partner address %q is not one address", partner)
	case len(secret) < 16:
		return nil, fmt.Errorf("test server gate: the slot's secret is %d bytes (want at least 16): the coordinator sent none", len(secret))
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(g.own.String(), strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("test server gate: %w", err)
	}
	g.ln = ln
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	go g.serve(ctx)
	return g, nil
}

func (g *serverGate) serve(ctx context.Context) {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return // closed at the window's end
		}
		from := remoteIP(c)
		if !from.Equal(g.partner) {
			g.refused.note(fmt.Errorf("a connection from %s, not the partner %s", from, g.partner))
			c.Close()
			continue
		}
		select {
		case g.pending <- struct{}{}:
		default:
			g.refused.note(fmt.Errorf("a connection from %s beyond %d handshakes in flight", from, gateMaxPending))
			c.Close()
			continue
		}
		go func() {
			err := g.admit(c)
			<-g.pending
			if err != nil {
				g.refused.note(fmt.Errorf("a connection from %s: %v", from, err))
				c.Close()
				return
			}
			g.splice(ctx, c)
		}()
	}
}

// admit runs the gate's side of the handshake on c: nil when the peer
// proved the slot's secret.
func (g *serverGate) admit(c net.Conn) error {
	c.SetDeadline(time.Now().Add(gateHandshake))
	defer c.SetDeadline(time.Time{})
	nonce := make([]byte, gateNonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return fmt.Errorf("nonce: %w", err)
	}
	if _, err := c.Write(append(slices.Clone(gateMagic), nonce...)); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	return checkProof(c, g.secret, nonce, remoteIP(c), g.own, g.port, func() error {
		_, err := c.Write([]byte{gateAdmitted})
		return err
	})
}

// checkProof reads the peer's proof from r and compares it with the one
// the secret gives; admitted runs only on a match.
func checkProof(r io.Reader, secret, nonce []byte, client, server net.IP, port int, admitted func() error) error {
	got := make([]byte, gateProofSize)
	if _, err := io.ReadFull(r, got); err != nil {
		return fmt.Errorf("no proof of the slot's secret (%d bytes expected): %w", gateProofSize, err)
	}
	if !hmac.Equal(got, gateProof(secret, nonce, client, server, port)) {
		return errors.New("a wrong proof of the slot's secret")
	}
	return admitted()
}

// splice joins an admitted connection to the tool on loopback, dialling
// it again while it is not listening yet (the gate opens before the tool).
func (g *serverGate) splice(ctx context.Context, c net.Conn) {
	defer c.Close()
	var d net.Dialer
	for {
		b, err := d.DialContext(ctx, "tcp", g.backend)
		if err == nil {
			pipe(c, b)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// clientGate is the client end: the tool connects to its loopback
// listener; each connection is carried to the partner's gate from the
// node's own address, after answering the gate's nonce.
type clientGate struct {
	ln      net.Listener
	own     net.IP
	partner net.IP
	port    int
	secret  []byte
	refused gateRefusals
}

// startClientGate listens on loopback until ctx ends; its address is what
// the tool connects to.
func startClientGate(ctx context.Context, own, partner string, port int, secret []byte) (*clientGate, error) {
	g := &clientGate{own: net.ParseIP(own), partner: net.ParseIP(partner), port: port, secret: secret}
	switch {
	case g.own == nil || g.partner == nil:
		return nil, fmt.Errorf("test client gate: addresses %q and %q must be IP addresses", own, partner)
	case len(secret) < 16:
		return nil, fmt.Errorf("test client gate: the slot's secret is %d bytes (want at least 16): the coordinator sent none", len(secret))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("test client gate: %w", err)
	}
	g.ln = ln
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go g.carry(ctx, c)
		}
	}()
	return g, nil
}

// port is the loopback port the tool connects to.
func (g *clientGate) localPort() int { return g.ln.Addr().(*net.TCPAddr).Port }

func (g *clientGate) carry(ctx context.Context, local net.Conn) {
	defer local.Close()
	remote, err := g.dial(ctx)
	if err != nil {
		g.refused.note(err)
		return
	}
	defer remote.Close()
	if err := g.handshake(remote); err != nil {
		g.refused.note(fmt.Errorf("the partner's gate at %s: %w", remote.RemoteAddr(), err))
		return
	}
	pipe(local, remote)
}

// dial reaches the partner's gate from the node's own address, again
// while it is not listening yet, until ctx ends.
func (g *clientGate) dial(ctx context.Context) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: g.own}, Timeout: 3 * time.Second}
	to := net.JoinHostPort(g.partner.String(), strconv.Itoa(g.port))
	for {
		c, err := d.DialContext(ctx, "tcp", to)
		if err == nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the partner's gate at %s: %w", to, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// handshake answers the gate's nonce on c and reads its admission.
func (g *clientGate) handshake(c net.Conn) error {
	c.SetDeadline(time.Now().Add(gateHandshake))
	defer c.SetDeadline(time.Time{})
	return answerGate(c, g.secret, g.own, g.partner, g.port)
}

// answerGate is the client end of the handshake on rw: read the gate's
// hello, prove the secret for this pair of addresses, read the verdict.
func answerGate(rw io.ReadWriter, secret []byte, own, partner net.IP, port int) error {
	hello := make([]byte, len(gateMagic)+gateNonceSize)
	if _, err := io.ReadFull(rw, hello); err != nil {
		return fmt.Errorf("no hello (%d bytes expected): %w", len(hello), err)
	}
	if !bytes.Equal(hello[:len(gateMagic)], gateMagic) {
		return fmt.Errorf("a hello that is not a CURE pair gate's (%q)", hello[:len(gateMagic)])
	}
	if _, err := rw.Write(gateProof(secret, hello[len(gateMagic):], own, partner, port)); err != nil {
		return fmt.Errorf("proof: %w", err)
	}
	ok := make([]byte, 1)
	if _, err := io.ReadFull(rw, ok); err != nil || ok[0] != gateAdmitted {
		return fmt.Errorf("refused our proof of the slot's secret (%v)", cmpErr(err, ok[0]))
	}
	return nil
}

func cmpErr(err error, b byte) any {
	if err != nil {
		return err
	}
	return fmt.Sprintf("answer 0x%02x", b)
}

func remoteIP(c net.Conn) net.IP {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP
	}
	return nil
}

// pipe copies both ways until both directions ended, closing each write
// side as its source ends (iperf3 reads the end of a stream).
func pipe(a, b net.Conn) {
	var wg sync.WaitGroup
	half := func(dst, src net.Conn) {
		defer wg.Done()
		io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		} else {
			dst.Close()
		}
	}
	wg.Add(2)
	go half(a, b)
	go half(b, a)
	wg.Wait()
}
