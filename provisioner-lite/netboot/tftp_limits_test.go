package netboot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// rawTFTP is a TFTP client written out by hand, to do what a real client
// would not: stop after the request, stall mid-transfer, flood.
type rawTFTP struct {
	t      *testing.T
	conn   *net.UDPConn
	server *net.UDPAddr
}

func newRawTFTP(t *testing.T, server string) *rawTFTP {
	t.Helper()
	s, err := net.ResolveUDPAddr("udp4", server)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawTFTP{t: t, conn: c, server: s}
}

func rrq(name string, opts ...string) []byte {
	b := binary.BigEndian.AppendUint16(nil, opRRQ)
	for _, f := range append([]string{name, "octet"}, opts...) {
		b = append(append(b, f...), 0)
	}
	return b
}

func (c *rawTFTP) send(to *net.UDPAddr, b []byte) {
	c.t.Helper()
	if _, err := c.conn.WriteToUDP(b, to); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rawTFTP) ack(to *net.UDPAddr, block uint16) {
	c.send(to, binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, opACK), block))
}

// recv reads the next packet; ok is false when none came within wait.
func (c *rawTFTP) recv(wait time.Duration) (op, num uint16, payload []byte, from *net.UDPAddr, ok bool) {
	c.t.Helper()
	buf := make([]byte, 70000)
	c.conn.SetReadDeadline(time.Now().Add(wait))
	n, from, err := c.conn.ReadFromUDP(buf)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return 0, 0, nil, nil, false
		}
		c.t.Fatal(err)
	}
	if n < 4 {
		c.t.Fatalf("%d-byte packet from %v", n, from)
	}
	if op = binary.BigEndian.Uint16(buf); op == opOACK {
		return op, 0, buf[2:n], from, true
	}
	return op, binary.BigEndian.Uint16(buf[2:]), buf[4:n], from, true
}

// waitFor polls cond (it waits for the server to have handled packets
// already sent; it measures nothing).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testFiles(t *testing.T) (*Files, map[string][]byte) {
	t.Helper()
	dir, want := fixtureDir(t)
	files, err := LoadFiles(dir, []string{"snponly.efi", "undionly.kpxe"})
	if err != nil {
		t.Fatal(err)
	}
	return files, want
}

// Requests nobody acknowledges (a spoofed source never sees the answer)
// hold no transfer slot: with one slot and the waiting table full of them,
// a real client still reads its build whole. The table keeps the newest
// requests; the oldest are forgotten.
func TestTFTPRequestsHoldNoSlotUntilAcked(t *testing.T) {
	files, want := testFiles(t)
	srv, addr, _ := startTFTP(t, files, TFTPLimits{Transfers: 1, TransfersPerIP: 1, Pending: 8, FirstBlock: time.Minute, RequestRate: 1000, RequestBurst: 1000})
	var silent []*rawTFTP
	for i := 0; i < 20; i++ {
		c := newRawTFTP(t, addr)
		c.send(c.server, rrq("snponly.efi", "tsize", "0", "blksize", "1468"))
		silent = append(silent, c)
	}
	for i, c := range silent {
		op, _, payload, _, ok := c.recv(10 * time.Second)
		if !ok || op != opOACK || !bytes.Contains(payload, []byte("tsize\x00173792\x00")) {
			t.Fatalf("silent client %d: op %d ok %v payload %q, want the OACK with tsize", i, op, ok, payload)
		}
	}
	waitFor(t, "20 requests handled", func() bool { return srv.Stats().Requests == 20 })
	if p, a, s := srv.Pending(), srv.Active(), srv.Stats(); p != 8 || a != 0 || s.Evicted != 12 {
		t.Fatalf("pending %d, active %d, %+v: want 8 waiting (the table's size), none active, 12 evicted", p, a, s)
	}
	// The one slot is free: a real client reads the whole build.
	got := fetch(t, addr, "snponly.efi", 1468)
	if !bytes.Equal(got, want["snponly.efi"]) {
		t.Fatalf("read %d bytes, want the build's %d", len(got), len(want["snponly.efi"]))
	}
	waitFor(t, "the transfer counted", func() bool { return srv.Stats().Sent == 1 })
	if s := srv.Stats(); s.Refused != 0 || srv.Active() != 0 {
		t.Errorf("%+v, active %d: want none refused, the slot free again", s, srv.Active())
	}
}

// fetch reads name whole with the pin/tftp client (an independent
// implementation).
func fetch(t *testing.T, addr, name string, blksize int) []byte {
	t.Helper()
	c := tftpClient(t, addr)
	c.SetBlockSize(blksize)
	c.RequestTSize(true)
	wt, err := c.Receive(name, "octet")
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var b bytes.Buffer
	if _, err := wt.WriteTo(&b); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b.Bytes()
}

// A request nobody acknowledges gets its first packet twice (once more
// halfway through FirstBlock), then is forgotten and counted.
func TestTFTPUnacknowledgedRequestExpires(t *testing.T) {
	files, _ := testFiles(t)
	srv, addr, logs := startTFTP(t, files, TFTPLimits{FirstBlock: 200 * time.Millisecond})
	c := newRawTFTP(t, addr)
	c.send(c.server, rrq("undionly.kpxe")) // no options: DATA 1 comes first
	waitFor(t, "the request expires", func() bool { return srv.Stats().Unacknowledged == 1 })
	if srv.Pending() != 0 || srv.Active() != 0 {
		t.Fatalf("pending %d active %d after expiry", srv.Pending(), srv.Active())
	}
	var got int
	for {
		op, block, payload, from, ok := c.recv(500 * time.Millisecond)
		if !ok {
			break
		}
		if op != opDATA || block != 1 || len(payload) != 512 || from.Port == c.server.Port {
			t.Errorf("got op %d block %d (%d bytes) from %v, want DATA 1 of 512 bytes from the transfer port", op, block, len(payload), from)
		}
		got++
	}
	if got != 2 {
		t.Errorf("DATA 1 sent %d times, want 2 (first, and once again)", got)
	}
	srv.Shutdown()
	if !strings.Contains(logs.String(), "reason="+refusedUnacked) {
		t.Errorf("the expiry is not in the log:\n%s", logs)
	}
}

// A slot is taken when the client acknowledges the first packet, and only
// then: with one slot held by a stalled transfer, the next client is told
// busy; when the first finishes, the next reads its build.
func TestTFTPSlotTakenOnFirstAck(t *testing.T) {
	files, want := testFiles(t)
	srv, addr, _ := startTFTP(t, files, TFTPLimits{Transfers: 1, FirstBlock: time.Minute, Timeout: 30 * time.Second})
	a := newRawTFTP(t, addr)
	a.send(a.server, rrq("undionly.kpxe", "blksize", "1024"))
	op, _, payload, xfer, ok := a.recv(10 * time.Second)
	if !ok || op != opOACK || string(payload) != "blksize\x001024\x00" {
		t.Fatalf("op %d %q, want OACK blksize 1024", op, payload)
	}
	if srv.Active() != 0 || srv.Pending() != 1 {
		t.Fatalf("before the ACK: active %d pending %d, want 0 and 1", srv.Active(), srv.Pending())
	}
	a.ack(xfer, 0)
	var got []byte
	op, block, payload, _, ok := a.recv(10 * time.Second)
	if !ok || op != opDATA || block != 1 {
		t.Fatalf("after ACK 0: op %d block %d", op, block)
	}
	got = append(got, payload...)
	waitFor(t, "the acknowledged transfer holds the slot", func() bool { return srv.Active() == 1 })
	// The slot is taken: another client is refused at once.
	b := tftpClient(t, addr)
	b.SetRetries(1)
	if _, err := b.Receive("snponly.efi", "octet"); err == nil || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("second client while the slot is held: %v, want busy", err)
	}
	// a finishes: ACK each block, the last is short.
	for {
		a.ack(xfer, block)
		if len(payload) < 1024 {
			break
		}
		if op, block, payload, _, ok = a.recv(10 * time.Second); !ok || op != opDATA {
			t.Fatalf("op %d ok %v after %d bytes", op, ok, len(got))
		}
		got = append(got, payload...)
	}
	if !bytes.Equal(got, want["undionly.kpxe"]) {
		t.Fatalf("hand-read %d bytes, want the build's %d", len(got), len(want["undionly.kpxe"]))
	}
	waitFor(t, "the slot is released", func() bool { return srv.Active() == 0 })
	if got := fetch(t, addr, "snponly.efi", 512); !bytes.Equal(got, want["snponly.efi"]) {
		t.Fatalf("after the release: %d bytes", len(got))
	}
}

// Requests for names not served are charged to their source: past its
// burst nothing more is answered, and the log summarises instead of
// writing a line per request.
func TestTFTPUnknownNamesBudgetedAndSummarised(t *testing.T) {
	files, _ := testFiles(t)
	srv, addr, logs := startTFTP(t, files, TFTPLimits{RequestRate: 0.001, RequestBurst: 5})
	c := newRawTFTP(t, addr)
	for i := 0; i < 300; i++ {
		c.send(c.server, rrq("pxelinux.cfg/01-52-54-00-00-00-"+string(rune('a'+i%26))))
		if i%20 == 19 { // in batches a socket buffer holds
			waitFor(t, "the batch handled", func() bool { return srv.Stats().Requests == uint64(i+1) })
		}
	}
	var answers int
	for {
		op, code, payload, _, ok := c.recv(200 * time.Millisecond)
		if !ok {
			break
		}
		if op != opERROR || code != tftpErrNotFound || !strings.HasPrefix(string(payload), "file not found") {
			t.Errorf("op %d code %d %q, want ERROR file not found", op, code, payload)
		}
		answers++
	}
	if s := srv.Stats(); answers != 5 || s.Refused != 5 || s.OverBudget != 295 {
		t.Errorf("%d answers, %+v: want 5 answered (the burst), 295 over budget", answers, s)
	}
	srv.Shutdown() // writes the pending summary
	out := logs.String()
	// A few lines name the file asked for, the rest is counted.
	if n := strings.Count(out, "not an iPXE build served here"); n == 0 || n > 5 {
		t.Errorf("%d lines name a refused file, want 1 to 5 (a few a second)", n)
	}
	if n := strings.Count(out, "level=WARN"); n > 10 {
		t.Errorf("300 refused requests wrote %d warnings, want a summary:\n%s", n, out)
	}
	for _, want := range []string{"reason=" + refusedUnknownName, "reason=" + refusedBudget + " refused=294", "127.0.0.1×294"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// Large files with small blocks need more than 65535 blocks: the block
// number wraps, as clients expect.
func TestTFTPDataBlockWraps(t *testing.T) {
	data := make([]byte, 70000)
	for i := range data {
		data[i] = byte(i)
	}
	p := tftpData(nil, data, 65537, 1)
	if binary.BigEndian.Uint16(p[2:]) != 1 || len(p) != 5 || p[4] != data[65536] {
		t.Errorf("block 65537 of 1-byte blocks: %v", p)
	}
	if n := tftpBlocks(1024, 512); n != 3 {
		t.Errorf("1024 bytes in 512-byte blocks: %d blocks, want 3 (the last empty)", n)
	}
	if p := tftpData(nil, data[:1024], 3, 512); len(p) != 4 {
		t.Errorf("the last block of an exact multiple: %d bytes, want an empty DATA", len(p))
	}
}

// Shutdown of a server never served does not hang, and Serve afterwards
// returns at once.
func TestTFTPShutdownBeforeServe(t *testing.T) {
	files, _ := testFiles(t)
	srv, err := NewTFTP(files, TFTPLimits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(conn); err != nil {
		t.Errorf("Serve after Shutdown: %v", err)
	}
	if _, err := conn.WriteTo([]byte("x"), conn.LocalAddr()); err == nil || !errors.Is(err, net.ErrClosed) {
		t.Errorf("the socket is still open: %v", err)
	}
}
