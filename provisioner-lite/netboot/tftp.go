package netboot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/pin/tftp/v3"
)

// TFTPLimits are what a TFTP client meets; zero fields take the defaults.
type TFTPLimits struct {
	Transfers      int           // at once, all clients (default 64)
	TransfersPerIP int           // at once, one client address (default 4)
	Timeout        time.Duration // per block round trip (default 2s)
	Retries        int           // per block (default 5)
	BlockSize      int           // largest blksize granted (default 1468: one Ethernet frame)
}

func (l *TFTPLimits) defaults() {
	if l.Transfers <= 0 {
		l.Transfers = 64
	}
	if l.TransfersPerIP <= 0 {
		l.TransfersPerIP = 4
	}
	if l.Timeout <= 0 {
		l.Timeout = 2 * time.Second
	}
	if l.Retries <= 0 {
		l.Retries = 5
	}
	if l.BlockSize <= 0 {
		l.BlockSize = 1468
	}
}

// TFTP serves Files read-only over TFTP (RFC 1350, with the blksize and
// tsize options of RFC 2348/2349): write requests are refused, and only
// the loaded files exist.
type TFTP struct {
	files *Files
	log   *slog.Logger
	lim   TFTPLimits
	srv   *tftp.Server

	mu     sync.Mutex
	active int
	perIP  map[string]int
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
	t := &TFTP{files: files, log: log, lim: lim, perIP: map[string]int{}}
	// A nil write handler makes the library refuse every write request.
	t.srv = tftp.NewServer(t.read, nil)
	t.srv.SetTimeout(lim.Timeout)
	t.srv.SetRetries(lim.Retries)
	t.srv.SetBlockSize(lim.BlockSize)
	t.srv.SetHook(t)
	return t, nil
}

// Serve answers on conn until Shutdown.
func (t *TFTP) Serve(conn net.PacketConn) error { return t.srv.Serve(conn) }

// Shutdown stops accepting requests and waits for transfers in flight
// (each bounded by Timeout × Retries per block).
func (t *TFTP) Shutdown() { t.srv.Shutdown() }

// errBusy and errNotFound are what a refused client reads in the TFTP ERROR.
var (
	errBusy     = errors.New("busy: too many transfers, retry")
	errNotFound = errors.New("file not found")
)

func (t *TFTP) read(filename string, rf io.ReaderFrom) error {
	ot, _ := rf.(tftp.OutgoingTransfer)
	peer := ""
	if ot != nil {
		a := ot.RemoteAddr()
		peer = a.IP.String()
	}
	name, b, ok := t.files.Lookup(filename)
	if !ok {
		t.log.Warn("tftp: refused: not an iPXE build served here", "file", printable(filename), "peer", peer, "served", t.files.Names())
		return errNotFound
	}
	if !t.acquire(peer) {
		t.log.Warn("tftp: refused: too many transfers", "file", name, "peer", peer, "limit", t.lim.Transfers, "per_ip", t.lim.TransfersPerIP)
		return errBusy
	}
	defer t.release(peer)
	start := time.Now()
	// bytes.Reader seeks, so the library answers tsize with the real size.
	n, err := rf.ReadFrom(bytes.NewReader(b))
	if err != nil {
		// Firmware often asks for tsize and aborts on purpose, then asks again.
		t.log.Debug("tftp: transfer ended early", "file", name, "peer", peer, "bytes", n, "err", err)
		return nil
	}
	t.log.Info("tftp: sent", "file", name, "peer", peer, "bytes", n, "duration", time.Since(start).Round(time.Millisecond))
	return nil
}

func (t *TFTP) acquire(peer string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.active >= t.lim.Transfers || t.perIP[peer] >= t.lim.TransfersPerIP {
		return false
	}
	t.active++
	t.perIP[peer]++
	return true
}

func (t *TFTP) release(peer string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.active--
	if t.perIP[peer]--; t.perIP[peer] <= 0 {
		delete(t.perIP, peer)
	}
}

// OnSuccess is the library's hook (logged in read).
func (t *TFTP) OnSuccess(tftp.TransferStats) {}

// OnFailure is the library's hook: malformed or refused requests.
func (t *TFTP) OnFailure(st tftp.TransferStats, err error) {
	t.log.Debug("tftp: request failed", "peer", st.RemoteAddr, "file", printable(st.Filename), "err", err)
}

// Active is the number of transfers in flight.
func (t *TFTP) Active() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.active
}

// String names the server for logs.
func (t *TFTP) String() string { return fmt.Sprintf("tftp(%v)", t.files.Names()) }
