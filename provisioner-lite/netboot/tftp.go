package netboot

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/peerlimit"
	"golang.org/x/net/ipv4"
)

// TFTPLimits are what a TFTP client meets; zero fields take the defaults.
type TFTPLimits struct {
	Transfers      int           // acknowledged transfers at once, all clients (default 64)
	TransfersPerIP int           // acknowledged transfers at once, one client address (default 4)
	Pending        int           // requests waiting for their first acknowledgement, a socket each (default 512); beyond it the oldest is forgotten
	FirstBlock     time.Duration // how long a request waits for the client's first acknowledgement (default 1.5s)
	Timeout        time.Duration // per block round trip once acknowledged (default 2s)
	Retries        int           // per block once acknowledged (default 5)
	BlockSize      int           // largest blksize granted (default 1468: one Ethernet frame)
	RequestRate    float64       // requests per second one source address may make (default 10)
	RequestBurst   int           // requests one source address may make back to back (default 20)
	Sources        int           // source addresses whose request budget is remembered (default 16384)
}

func (l *TFTPLimits) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.Transfers, 64)
	def(&l.TransfersPerIP, 4)
	def(&l.Pending, 512)
	def(&l.Retries, 5)
	def(&l.BlockSize, 1468)
	def(&l.RequestBurst, 20)
	def(&l.Sources, 16384)
	if l.FirstBlock <= 0 {
		l.FirstBlock = 1500 * time.Millisecond
	}
	if l.Timeout <= 0 {
		l.Timeout = 2 * time.Second
	}
	if l.RequestRate <= 0 {
		l.RequestRate = 10
	}
	l.BlockSize = min(max(l.BlockSize, defaultBlockSize), maxBlockSize)
}

// TFTPStats are the server's counters.
type TFTPStats struct {
	Requests       uint64 // packets to the listening port
	OverBudget     uint64 // requests dropped: their source spent its budget
	Refused        uint64 // answered with an ERROR: unknown name, write, mode, busy
	Unacknowledged uint64 // requests whose first packet was never acknowledged
	Evicted        uint64 // requests forgotten for newer ones (pending full)
	Sent           uint64 // transfers completed
	Failed         uint64 // acknowledged transfers that ended early
}

// TFTP serves Files read-only over TFTP (RFC 1350, with the blksize and
// tsize options of RFC 2347/2348/2349): write requests are refused, and
// only the loaded files exist.
//
// Nothing proves a request's source address, so a request holds no
// transfer slot until the client has acknowledged the first packet (the
// OACK, or DATA 1 without options) sent to that address. Until then it is
// pending: a socket of its own (the transfer's port, as RFC 1350 has it)
// and a goroutine waiting FirstBlock at most; at most Pending of them, the
// oldest forgotten first when a newer request needs the room. A request's
// own socket also keeps its packets apart from those queued towards forged
// addresses that never resolve.
type TFTP struct {
	files    *Files
	log      *slog.Logger
	lim      TFTPLimits
	sources  *peerlimit.Keyed
	refusals *peerlimit.Refusals
	nameLog  *peerlimit.Bucket // lines naming a refused file, beside the summary

	mu      sync.Mutex
	closed  bool
	conn    *net.UDPConn     // the listening socket
	main    *ipv4.PacketConn // conn, read with the request's destination address
	local   net.IP           // conn's address; nil when it listens on 0.0.0.0
	pending map[netip.AddrPort]*transfer
	order   *list.List             // pending transfers, oldest first
	live    map[*transfer]struct{} // pending and active: closed by Shutdown
	active  int
	perIP   map[netip.Addr]int
	done    chan struct{} // closed by Shutdown
	wg      sync.WaitGroup

	requests, overBudget, refused, unacked, evicted, sent, failed atomic.Uint64

	// Standby, if set (before Serve) and true, leaves requests unanswered:
	// another coordinator instance holds the front door's lease.
	Standby func() bool
}

// transfer is one read, pending (waiting for its first acknowledgement)
// or active (acknowledged, holding a slot).
type transfer struct {
	peer     netip.AddrPort
	to       *net.UDPAddr
	conn     *net.UDPConn // its own port: the transfer's TID
	name     string
	data     []byte
	blksize  int
	oack     []byte // the first packet when options were accepted; else DATA 1 is
	firstAck uint16 // the block that acknowledges it: 0 after an OACK, 1 after DATA 1
	created  time.Time
	elem     *list.Element
}

// NewTFTP builds the server; Serve runs it.
func NewTFTP(files *Files, lim TFTPLimits, log *slog.Logger) (*TFTP, error) {
	if files == nil {
		return nil, errors.New("netboot: TFTP needs the iPXE builds (nil Files)")
	}
	if log == nil {
		log = slog.Default()
	}
	lim.defaults()
	return &TFTP{
		files: files, log: log, lim: lim,
		sources:  peerlimit.NewKeyed(lim.RequestRate, lim.RequestBurst, lim.Sources),
		refusals: peerlimit.NewRefusals(log, "tftp", slog.LevelWarn, 0),
		nameLog:  peerlimit.NewBucket(1, 5),
		pending:  map[netip.AddrPort]*transfer{}, order: list.New(), live: map[*transfer]struct{}{},
		perIP: map[netip.Addr]int{}, done: make(chan struct{}),
	}, nil
}

// Serve answers requests on conn (an IPv4 UDP socket, port 69) until
// Shutdown.
func (t *TFTP) Serve(pc net.PacketConn) error {
	conn, ok := pc.(*net.UDPConn)
	la, _ := pc.LocalAddr().(*net.UDPAddr)
	if !ok || la == nil || la.IP.To4() == nil && !la.IP.IsUnspecified() {
		return fmt.Errorf("tftp: %v is not an IPv4 UDP socket", pc.LocalAddr())
	}
	main := ipv4.NewPacketConn(conn)
	var local net.IP
	if la.IP.IsUnspecified() {
		// The request's destination becomes the transfer's address: a
		// listener on 0.0.0.0 then answers from the address the client
		// asked, as clients check.
		if err := main.SetControlMessage(ipv4.FlagDst, true); err != nil {
			t.log.Warn("tftp: transfers' source address left to the kernel", "err", err)
		}
	} else {
		local = la.IP
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		conn.Close()
		return nil
	}
	t.conn, t.main, t.local = conn, main, local
	t.wg.Add(1)
	t.mu.Unlock()
	t.log.Info("TFTP serving iPXE builds", "listen", la, "files", t.files.Names())
	go t.flushRefusals()
	return t.readRequests()
}

// Shutdown stops serving: requests and transfers in flight end (a client
// retries its request against the next coordinator).
func (t *TFTP) Shutdown() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	close(t.done)
	if t.conn != nil {
		t.conn.Close()
	}
	for x := range t.live {
		x.conn.Close()
	}
	t.mu.Unlock()
	t.wg.Wait()
	t.refusals.Flush()
}

// Stats returns the counters.
func (t *TFTP) Stats() TFTPStats {
	return TFTPStats{Requests: t.requests.Load(), OverBudget: t.overBudget.Load(), Refused: t.refused.Load(),
		Unacknowledged: t.unacked.Load(), Evicted: t.evicted.Load(), Sent: t.sent.Load(), Failed: t.failed.Load()}
}

// Active is the number of acknowledged transfers, the ones holding a slot.
func (t *TFTP) Active() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.active
}

// Pending is the number of requests waiting for their first acknowledgement.
func (t *TFTP) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}

// String names the server for logs.
func (t *TFTP) String() string { return fmt.Sprintf("tftp(%v)", t.files.Names()) }

// Reasons of refusals, summarised in the log by peerlimit.Refusals.
const (
	refusedUnknownName = "unknown-name"
	refusedWrite       = "write-request"
	refusedMode        = "mode"
	refusedBusy        = "busy"
	refusedBudget      = "over-budget"
	refusedMalformed   = "malformed"
	refusedUnacked     = "first-packet-unacknowledged"
	refusedEvicted     = "evicted-for-newer-requests"
	refusedNoSocket    = "no-socket"
)

func (t *TFTP) readRequests() error {
	buf := make([]byte, 2048)
	for {
		n, cm, src, err := t.main.ReadFrom(buf)
		if err != nil {
			select {
			case <-t.done:
				return nil
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("tftp: read: %w", err)
		}
		ua, ok := src.(*net.UDPAddr)
		if !ok {
			continue
		}
		var dst net.IP
		if cm != nil && cm.Dst.To4() != nil && !cm.Dst.Equal(net.IPv4bcast) && !cm.Dst.IsMulticast() {
			dst = cm.Dst
		}
		t.request(buf[:n], ua, dst)
	}
}

// request handles one packet to the listening port. Every request is
// charged to its source address first: a source that spends its budget is
// dropped without an answer, so a forged flood can neither make the server
// send much to one address nor make it log much.
func (t *TFTP) request(b []byte, from *net.UDPAddr, dst net.IP) {
	peer := from.AddrPort()
	peer = netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port())
	ip := peer.Addr()
	if !ip.Is4() || peer.Port() == 0 {
		return
	}
	t.requests.Add(1)
	if t.Standby != nil && t.Standby() {
		return // another instance holds the front door's lease
	}
	if !t.sources.Allow(ip.String()) {
		t.overBudget.Add(1)
		t.refusals.Note(refusedBudget, ip.String())
		return
	}
	req, err := parseTFTPRequest(b)
	if err != nil {
		t.refusals.Note(refusedMalformed, ip.String())
		t.log.Debug("tftp: malformed request", "peer", ip, "err", err)
		return
	}
	to := net.UDPAddrFromAddrPort(peer)
	if req.write {
		t.refuse(t.conn, to, dst, refusedWrite, tftpErrAccess, "read-only server: write requests are refused")
		return
	}
	if req.mode != "octet" {
		t.refuse(t.conn, to, dst, refusedMode, tftpErrIllegalOp, "only octet mode: the iPXE builds are binary")
		return
	}
	name, data, ok := t.files.Lookup(req.filename)
	if !ok {
		// The name asked for tells a misconfigured site what is wrong: a
		// few lines a second name it, the summary counts the rest.
		level := slog.LevelDebug
		if t.nameLog.Allow() {
			level = slog.LevelWarn
		}
		t.log.Log(context.Background(), level, "tftp: refused: not an iPXE build served here", "file", printable(req.filename), "peer", ip, "served", t.files.Names())
		t.refuse(t.conn, to, dst, refusedUnknownName, tftpErrNotFound, "file not found")
		return
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	if old := t.pending[peer]; old != nil {
		// The client repeated its request (our first packet was lost):
		// repeat the first packet.
		t.mu.Unlock()
		t.sendFirst(old)
		return
	}
	if t.active >= t.lim.Transfers || t.perIP[ip] >= t.lim.TransfersPerIP {
		t.mu.Unlock()
		t.refuse(t.conn, to, dst, refusedBusy, tftpErrUndefined, "busy: too many transfers, retry")
		return
	}
	var evicted *transfer
	if len(t.pending) >= t.lim.Pending {
		evicted = t.order.Remove(t.order.Front()).(*transfer)
		delete(t.pending, evicted.peer)
	}
	t.mu.Unlock()
	if evicted != nil {
		evicted.conn.Close() // its goroutine ends
		t.evicted.Add(1)
		t.refusals.Note(refusedEvicted, evicted.peer.Addr().String())
	}
	bind := t.local
	if bind == nil {
		bind = dst
	}
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: bind})
	if err != nil {
		t.refusals.Note(refusedNoSocket, ip.String())
		t.log.Debug("tftp: no socket for a transfer", "peer", ip, "err", err)
		return
	}
	plan := planTFTPRead(req, len(data), t.lim.BlockSize)
	x := &transfer{peer: peer, to: to, conn: conn, name: name, data: data, blksize: plan.blksize, oack: plan.oack, created: time.Now()}
	if x.oack == nil {
		x.firstAck = 1
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		conn.Close()
		return
	}
	x.elem = t.order.PushBack(x)
	t.pending[peer] = x
	t.live[x] = struct{}{}
	t.wg.Add(1)
	t.mu.Unlock()
	t.sendFirst(x)
	go t.run(x)
}

// refuse answers a request with an ERROR.
func (t *TFTP) refuse(conn *net.UDPConn, to *net.UDPAddr, src net.IP, reason string, code uint16, msg string) {
	t.refused.Add(1)
	t.refusals.Note(reason, to.IP.String())
	t.send(conn, tftpError(code, msg), to, src)
}

func (t *TFTP) send(conn *net.UDPConn, b []byte, to *net.UDPAddr, src net.IP) {
	if err := sendNoWait(conn, b, to, src); err != nil {
		t.log.Debug("tftp: send failed", "peer", to, "err", err)
	}
}

// sendFirst sends a pending transfer's first packet (DATA 1 is built
// again each time rather than held by every waiting request).
func (t *TFTP) sendFirst(x *transfer) {
	if x.oack != nil {
		t.send(x.conn, x.oack, x.to, nil)
		return
	}
	t.send(x.conn, tftpData(make([]byte, 0, 4+x.blksize), x.data, 1, x.blksize), x.to, nil)
}

// run is a transfer's life: its first packet acknowledged, a slot, the
// blocks.
func (t *TFTP) run(x *transfer) {
	defer t.wg.Done()
	defer func() {
		x.conn.Close()
		t.mu.Lock()
		delete(t.live, x)
		t.mu.Unlock()
	}()
	acked := t.firstAcknowledged(x)
	t.mu.Lock()
	if t.pending[x.peer] == x {
		t.order.Remove(x.elem)
		delete(t.pending, x.peer)
	}
	if !acked {
		t.mu.Unlock()
		return
	}
	ip := x.peer.Addr()
	if t.closed || t.active >= t.lim.Transfers || t.perIP[ip] >= t.lim.TransfersPerIP {
		t.mu.Unlock()
		t.refuse(x.conn, x.to, nil, refusedBusy, tftpErrUndefined, "busy: too many transfers, retry")
		return
	}
	t.active++
	t.perIP[ip]++
	t.mu.Unlock()
	defer t.release(ip)
	t.sendBlocks(x)
}

// firstAcknowledged waits for the acknowledgement of the first packet
// (sent by request) until FirstBlock, sending it once more halfway.
func (t *TFTP) firstAcknowledged(x *transfer) bool {
	resent := false
	buf := make([]byte, 1024)
	for {
		deadline := x.created.Add(t.lim.FirstBlock)
		if !resent {
			deadline = x.created.Add(t.lim.FirstBlock / 2)
		}
		x.conn.SetReadDeadline(deadline)
		p, err := t.readFrom(x, buf)
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			if !resent { // even when late: every request gets its second chance
				resent = true
				t.sendFirst(x)
				continue
			}
			t.unacked.Add(1)
			t.refusals.Note(refusedUnacked, x.peer.Addr().String())
			return false
		case err != nil: // closed: evicted, or shutting down
			return false
		case p.op == opERROR:
			// Firmware asks for tsize, then ends the transfer on purpose.
			t.log.Debug("tftp: transfer ended by the client before it began", "file", x.name, "peer", x.peer.Addr(), "code", p.code)
			return false
		case p.block == x.firstAck:
			return true
		}
	}
}

// readFrom reads the next ACK or ERROR of x's client on x's port; packets
// from anyone else, or of any other kind, are skipped.
func (t *TFTP) readFrom(x *transfer, buf []byte) (tftpClientPacket, error) {
	for {
		n, from, err := x.conn.ReadFromUDP(buf)
		if err != nil {
			return tftpClientPacket{}, err
		}
		ap := from.AddrPort()
		if netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()) != x.peer {
			continue
		}
		if p, err := parseTFTPClientPacket(buf[:n]); err == nil {
			return p, nil
		}
	}
}

// sendBlocks runs an acknowledged transfer to its end.
func (t *TFTP) sendBlocks(x *transfer) {
	blocks := tftpBlocks(len(x.data), x.blksize)
	pkt := make([]byte, 0, 4+x.blksize)
	buf := make([]byte, 1024)
	for n := int(x.firstAck) + 1; n <= blocks; n++ {
		if err := t.sendBlock(x, tftpData(pkt, x.data, n, x.blksize), uint16(n), buf); err != nil {
			t.failed.Add(1)
			t.log.Debug("tftp: transfer ended early", "file", x.name, "peer", x.peer.Addr(), "block", n, "blocks", blocks, "err", err)
			return
		}
	}
	t.sent.Add(1)
	t.log.Info("tftp: sent", "file", x.name, "peer", x.peer.Addr(), "bytes", len(x.data), "duration", time.Since(x.created).Round(time.Millisecond))
}

// sendBlock sends one DATA packet until it is acknowledged, at most
// Retries more times. A duplicate ACK of the previous block is not a
// reason to resend (RFC 1350's Sorcerer's Apprentice bug): only a timeout is.
func (t *TFTP) sendBlock(x *transfer, pkt []byte, block uint16, buf []byte) error {
	for try := 0; try <= t.lim.Retries; try++ {
		t.send(x.conn, pkt, x.to, nil)
		x.conn.SetReadDeadline(time.Now().Add(t.lim.Timeout))
		for {
			p, err := t.readFrom(x, buf)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			if err != nil {
				return err
			}
			if p.op == opERROR {
				return fmt.Errorf("client sent error %d", p.code)
			}
			if p.block == block {
				return nil
			}
		}
	}
	return fmt.Errorf("block %d not acknowledged after %d tries of %s", block, t.lim.Retries+1, t.lim.Timeout)
}

func (t *TFTP) release(ip netip.Addr) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.active--
	if t.perIP[ip]--; t.perIP[ip] <= 0 {
		delete(t.perIP, ip)
	}
}

// flushRefusals writes the refusal summary of a flood that has stopped.
func (t *TFTP) flushRefusals() {
	defer t.wg.Done()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-t.done:
			return
		case <-tick.C:
			t.refusals.Flush()
		}
	}
}
