package netboot

import (
	"container/list"
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
	Pending        int           // requests waiting for their first acknowledgement (default 4096); beyond it the oldest is forgotten
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
	def(&l.Pending, 4096)
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
	Requests       uint64 // read and write requests received
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
// OACK, or DATA 1 without options) sent to that address: until then it is
// a small entry in a bounded table, dropped after FirstBlock, or earlier
// when newer requests need the room. Every transfer is answered from one
// transfer port, opened beside the listening one, so waiting requests
// cost no socket.
type TFTP struct {
	files    *Files
	log      *slog.Logger
	lim      TFTPLimits
	sources  *peerlimit.Keyed
	refusals *peerlimit.Refusals

	mu      sync.Mutex
	closed  bool
	main    *ipv4.PacketConn
	mainRaw net.PacketConn
	xfer    *ipv4.PacketConn
	xferRaw *net.UDPConn
	pending map[netip.AddrPort]*transfer
	order   *list.List // pending transfers, oldest first
	active  map[netip.AddrPort]*transfer
	perIP   map[netip.Addr]int
	ready   chan struct{} // closed once Serve has its sockets
	done    chan struct{} // closed by Shutdown
	wg      sync.WaitGroup

	requests, overBudget, refused, unacked, evicted, sent, failed atomic.Uint64
}

// transfer is one read, waiting for its first acknowledgement (pending)
// or under way (active).
type transfer struct {
	peer     netip.AddrPort
	to       *net.UDPAddr
	src      net.IP // reply source address (nil: the kernel's choice)
	name     string
	data     []byte
	blksize  int
	oack     []byte // the first packet when options were accepted; else DATA 1 is
	firstAck uint16 // the block that acknowledges it: 0 after an OACK, 1 after DATA 1
	created  time.Time
	resent   bool
	elem     *list.Element
	acks     chan tftpClientPacket // once active
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
		pending:  map[netip.AddrPort]*transfer{}, order: list.New(),
		active: map[netip.AddrPort]*transfer{}, perIP: map[netip.Addr]int{},
		ready: make(chan struct{}), done: make(chan struct{}),
	}, nil
}

// Serve answers requests on conn (an IPv4 UDP socket, port 69) until
// Shutdown; transfers go out of a port it opens on conn's address.
func (t *TFTP) Serve(conn net.PacketConn) error {
	la, ok := conn.LocalAddr().(*net.UDPAddr)
	if !ok || la.IP.To4() == nil && !la.IP.IsUnspecified() {
		return fmt.Errorf("tftp: %v is not an IPv4 UDP address", conn.LocalAddr())
	}
	xc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: la.IP})
	if err != nil {
		return fmt.Errorf("tftp: transfer port on %s: %w", la.IP, err)
	}
	main, xfer := ipv4.NewPacketConn(conn), ipv4.NewPacketConn(xc)
	// The request's destination becomes the replies' source: a listener on
	// 0.0.0.0 then answers from the address the client asked, as clients
	// check.
	if la.IP.IsUnspecified() {
		if err := main.SetControlMessage(ipv4.FlagDst, true); err != nil {
			t.log.Warn("tftp: replies' source address left to the kernel", "err", err)
		}
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		xc.Close()
		conn.Close()
		return nil
	}
	t.main, t.mainRaw, t.xfer, t.xferRaw = main, conn, xfer, xc
	close(t.ready)
	t.wg.Add(2)
	t.mu.Unlock()
	t.log.Info("TFTP serving iPXE builds", "listen", la, "transfer_port", xc.LocalAddr().(*net.UDPAddr).Port, "files", t.files.Names())
	go t.readTransfers()
	go t.sweep()
	return t.readRequests()
}

// TransferAddr is the port transfers are answered from (after Serve has
// started; nil before).
func (t *TFTP) TransferAddr() *net.UDPAddr {
	select {
	case <-t.ready:
		return t.xferRaw.LocalAddr().(*net.UDPAddr)
	default:
		return nil
	}
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
	started := t.main != nil
	t.mu.Unlock()
	if started {
		t.mainRaw.Close()
		t.xferRaw.Close()
	}
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
	return len(t.active)
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
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return fmt.Errorf("tftp: read: %w", err)
		}
		ua, ok := src.(*net.UDPAddr)
		if !ok {
			continue
		}
		var dst net.IP
		if cm != nil && cm.Dst != nil && cm.Dst.To4() != nil && !cm.Dst.Equal(net.IPv4bcast) && !cm.Dst.IsMulticast() {
			dst = cm.Dst
		}
		t.request(buf[:n], ua, dst)
	}
}

// request handles one packet to the listening port. Every request is
// charged to its source address first: a source that spends its budget is
// dropped without an answer, so a spoofed flood can neither make the server
// send much to one address nor make it log much.
func (t *TFTP) request(b []byte, from *net.UDPAddr, local net.IP) {
	peer := from.AddrPort()
	peer = netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port())
	ip := peer.Addr()
	if !ip.Is4() || peer.Port() == 0 {
		return
	}
	t.requests.Add(1)
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
		t.refuse(to, local, refusedWrite, tftpErrAccess, "read-only server: write requests are refused")
		return
	}
	if req.mode != "octet" {
		t.refuse(to, local, refusedMode, tftpErrIllegalOp, "only octet mode: the iPXE builds are binary")
		return
	}
	name, data, ok := t.files.Lookup(req.filename)
	if !ok {
		t.log.Debug("tftp: refused: not an iPXE build served here", "file", printable(req.filename), "peer", ip, "served", t.files.Names())
		t.refuse(to, local, refusedUnknownName, tftpErrNotFound, "file not found")
		return
	}
	plan := planTFTPRead(req, len(data), t.lim.BlockSize)
	x := &transfer{peer: peer, to: to, src: local, name: name, data: data, blksize: plan.blksize, created: time.Now()}
	if x.oack = plan.oack; x.oack == nil {
		x.firstAck = 1
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
		t.writeFirst(old)
		return
	}
	if t.active[peer] != nil {
		t.mu.Unlock()
		return // a stale duplicate of a request already under way
	}
	if len(t.active) >= t.lim.Transfers || t.perIP[ip] >= t.lim.TransfersPerIP {
		t.mu.Unlock()
		t.refuse(to, local, refusedBusy, tftpErrUndefined, "busy: too many transfers, retry")
		return
	}
	var evicted *transfer
	if len(t.pending) >= t.lim.Pending {
		evicted = t.order.Remove(t.order.Front()).(*transfer)
		delete(t.pending, evicted.peer)
	}
	x.elem = t.order.PushBack(x)
	t.pending[peer] = x
	t.mu.Unlock()
	if evicted != nil {
		t.evicted.Add(1)
		t.refusals.Note(refusedEvicted, evicted.peer.Addr().String())
	}
	t.writeFirst(x)
}

// writeFirst sends a pending transfer's first packet (DATA 1 is built
// again each time rather than held by every waiting request).
func (t *TFTP) writeFirst(x *transfer) {
	if x.oack != nil {
		t.write(x, x.oack)
		return
	}
	t.write(x, tftpData(make([]byte, 0, 4+x.blksize), x.data, 1, x.blksize))
}

// refuse answers a request with an ERROR.
func (t *TFTP) refuse(to *net.UDPAddr, local net.IP, reason string, code uint16, msg string) {
	t.refused.Add(1)
	t.refusals.Note(reason, to.IP.String())
	t.writeTo(tftpError(code, msg), to, local)
}

func (t *TFTP) write(x *transfer, b []byte) { t.writeTo(b, x.to, x.src) }

func (t *TFTP) writeTo(b []byte, to *net.UDPAddr, src net.IP) {
	var cm *ipv4.ControlMessage
	if src != nil {
		cm = &ipv4.ControlMessage{Src: src}
	}
	if _, err := t.xfer.WriteTo(b, cm, to); err != nil {
		t.log.Debug("tftp: send failed", "peer", to, "err", err)
	}
}

// readTransfers reads ACKs and ERRORs on the transfer port: a pending
// request's first acknowledgement makes it a transfer (if a slot is free);
// an active transfer's packets go to its goroutine.
func (t *TFTP) readTransfers() {
	defer t.wg.Done()
	buf := make([]byte, 2048)
	for {
		n, _, src, err := t.xfer.ReadFrom(buf)
		if err != nil {
			select {
			case <-t.done:
				return
			default:
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			t.log.Error("tftp: transfer port read failed", "err", err)
			return
		}
		ua, ok := src.(*net.UDPAddr)
		if !ok {
			continue
		}
		p, err := parseTFTPClientPacket(buf[:n])
		if err != nil {
			continue
		}
		peer := ua.AddrPort()
		t.transferPacket(netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port()), p)
	}
}

func (t *TFTP) transferPacket(peer netip.AddrPort, p tftpClientPacket) {
	t.mu.Lock()
	if x := t.active[peer]; x != nil {
		t.mu.Unlock()
		select {
		case x.acks <- p:
		default: // the transfer is behind: a client resends what matters
		}
		return
	}
	x := t.pending[peer]
	if x == nil || p.op == opACK && p.block != x.firstAck {
		t.mu.Unlock()
		return // not a transfer of ours, or not the acknowledgement we wait for
	}
	t.order.Remove(x.elem)
	delete(t.pending, peer)
	if p.op == opERROR {
		t.mu.Unlock()
		// Firmware asks for tsize, then ends the transfer on purpose.
		t.log.Debug("tftp: transfer ended by the client before it began", "file", x.name, "peer", peer.Addr(), "code", p.code)
		return
	}
	ip := peer.Addr()
	if t.closed || len(t.active) >= t.lim.Transfers || t.perIP[ip] >= t.lim.TransfersPerIP {
		t.mu.Unlock()
		t.refuse(x.to, x.src, refusedBusy, tftpErrUndefined, "busy: too many transfers, retry")
		return
	}
	x.acks = make(chan tftpClientPacket, 8)
	t.active[peer] = x
	t.perIP[ip]++
	t.wg.Add(1)
	t.mu.Unlock()
	go t.send(x)
}

// send runs an acknowledged transfer to its end, block by block.
func (t *TFTP) send(x *transfer) {
	defer t.wg.Done()
	defer t.release(x)
	blocks := tftpBlocks(len(x.data), x.blksize)
	buf := make([]byte, 0, 4+x.blksize)
	for n := int(x.firstAck) + 1; n <= blocks; n++ {
		if err := t.sendBlock(x, tftpData(buf, x.data, n, x.blksize), uint16(n)); err != nil {
			t.failed.Add(1)
			t.log.Debug("tftp: transfer ended early", "file", x.name, "peer", x.peer.Addr(), "block", n, "blocks", blocks, "err", err)
			return
		}
	}
	t.sent.Add(1)
	t.log.Info("tftp: sent", "file", x.name, "peer", x.peer.Addr(), "bytes", len(x.data), "duration", time.Since(x.created).Round(time.Millisecond))
}

var errShutdown = errors.New("server shutting down")

// sendBlock sends one DATA packet until it is acknowledged, at most
// Retries more times. A duplicate ACK of the previous block is not a
// reason to resend (RFC 1350's Sorcerer's Apprentice bug): only a timeout is.
func (t *TFTP) sendBlock(x *transfer, pkt []byte, block uint16) error {
	timer := time.NewTimer(t.lim.Timeout)
	defer timer.Stop()
	for try := 0; try <= t.lim.Retries; try++ {
		t.write(x, pkt)
		timer.Reset(t.lim.Timeout)
	wait:
		for {
			select {
			case p := <-x.acks:
				if p.op == opERROR {
					return fmt.Errorf("client sent error %d", p.code)
				}
				if p.block == block {
					return nil
				}
			case <-timer.C:
				break wait
			case <-t.done:
				return errShutdown
			}
		}
	}
	return fmt.Errorf("block %d not acknowledged after %d tries of %s", block, t.lim.Retries+1, t.lim.Timeout)
}

func (t *TFTP) release(x *transfer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.active, x.peer)
	ip := x.peer.Addr()
	if t.perIP[ip]--; t.perIP[ip] <= 0 {
		delete(t.perIP, ip)
	}
}

// sweep resends a pending request's first packet once, halfway through
// FirstBlock, and forgets it at FirstBlock (a tick later if the resend was
// late); it also writes the refusal
// summary of a flood that has stopped.
func (t *TFTP) sweep() {
	defer t.wg.Done()
	tick := time.NewTicker(max(t.lim.FirstBlock/8, 10*time.Millisecond))
	defer tick.Stop()
	lastFlush := time.Now()
	for {
		select {
		case <-t.done:
			return
		case now := <-tick.C:
			t.sweepPending(now)
			if now.Sub(lastFlush) >= 10*time.Second {
				t.refusals.Flush()
				lastFlush = now
			}
		}
	}
}

func (t *TFTP) sweepPending(now time.Time) {
	var resend []*transfer
	var expired []netip.Addr
	t.mu.Lock()
	for e := t.order.Front(); e != nil; {
		x := e.Value.(*transfer)
		age := now.Sub(x.created)
		if age < t.lim.FirstBlock/2 {
			break // the rest are younger
		}
		next := e.Next()
		switch {
		case !x.resent: // even when late: every request gets its second chance
			x.resent = true
			resend = append(resend, x)
		case age >= t.lim.FirstBlock:
			t.order.Remove(e)
			delete(t.pending, x.peer)
			expired = append(expired, x.peer.Addr())
		}
		e = next
	}
	t.mu.Unlock()
	for _, x := range resend {
		t.writeFirst(x)
	}
	for _, ip := range expired {
		t.unacked.Add(1)
		t.refusals.Note(refusedUnacked, ip.String())
	}
}
