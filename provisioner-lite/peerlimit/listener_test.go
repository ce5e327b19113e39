package peerlimit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) { b.mu.Lock(); defer b.mu.Unlock(); return b.b.Write(p) }
func (b *syncBuf) String() string              { b.mu.Lock(); defer b.mu.Unlock(); return b.b.String() }

// echoServer serves l: every accepted connection echoes what it reads.
func echoServer(t *testing.T, cfg ListenerConfig) (*Listener, string) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(inner, cfg)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return l, inner.Addr().String()
}

// dialFrom connects from a chosen loopback address (all of 127/8 is local
// on Linux), so one test plays several sources. A refused connection may
// be reset before the dial returns: nil.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.ECONNRESET) {
			return nil
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// served reports whether c is a served connection: an echo comes back.
// A refused one reads a reset or EOF.
func served(c net.Conn) bool {
	if c == nil {
		return false
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte("x")); err != nil {
		return false
	}
	b := make([]byte, 1)
	_, err := io.ReadFull(c, b)
	return err == nil && b[0] == 'x'
}

func waitOpen(t *testing.T, l *Listener, conns int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, _ := l.Open()
		if n == conns {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open, want %d", n, conns)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// One source gets MaxPerSource connections, another source still gets in,
// the listener never holds more than MaxConns, a closed connection frees
// its slot, and thousands of refusals write a summary, not a line each.
func TestListenerCaps(t *testing.T) {
	logs := &syncBuf{}
	ref := NewRefusals(slog.New(slog.NewTextHandler(logs, nil)), "test", slog.LevelWarn, time.Hour)
	l, addr := echoServer(t, ListenerConfig{MaxConns: 6, MaxPerSource: 3, Refusals: ref})

	var a []net.Conn
	for i := 0; i < 3; i++ {
		c := dialFrom(t, "127.0.0.1", addr)
		if !served(c) {
			t.Fatalf("connection %d of source A refused within its cap", i)
		}
		a = append(a, c)
	}
	if c := dialFrom(t, "127.0.0.1", addr); served(c) {
		t.Fatal("source A's 4th connection served past its cap of 3")
	}
	for i := 0; i < 3; i++ {
		if c := dialFrom(t, fmt.Sprintf("127.0.0.%d", 2+i), addr); !served(c) {
			t.Fatalf("source %d refused while the listener has room", 2+i)
		}
	}
	waitOpen(t, l, 6)
	if c := dialFrom(t, "127.0.0.9", addr); served(c) {
		t.Fatal("a 7th connection served past the listener's cap of 6")
	}
	// A flood of refusals: counted, one line per reason, and nothing held.
	// Each is waited for until the listener refused it, so none is still in
	// the backlog when a slot frees below.
	for i := 0; i < 300; i++ {
		if c := dialFrom(t, fmt.Sprintf("127.0.1.%d", i%200), addr); served(c) {
			t.Fatalf("flood connection %d served past the cap", i)
		} else if c != nil {
			c.Close()
		}
	}
	waitOpen(t, l, 6)
	a[0].Close()
	waitOpen(t, l, 5)
	if c := dialFrom(t, "127.0.0.1", addr); !served(c) {
		t.Fatal("source A refused after one of its connections closed")
	}
	if n := strings.Count(logs.String(), "\n"); n > 2 {
		t.Fatalf("%d log lines for ~300 refusals, want one per reason:\n%s", n, logs.String())
	}
	logs.b.Reset()
	l.Flush()
	if out := logs.String(); !strings.Contains(out, "reason="+ReasonConnCap) || !strings.Contains(out, "listener=test") {
		t.Fatalf("flushed summary lacks the refusals:\n%s", out)
	}
}

// A peer that sends nothing is closed at the Silent deadline and its slot
// is freed; a peer that spoke keeps its connection past it.
func TestListenerClosesSilentPeers(t *testing.T) {
	logs := &syncBuf{}
	ref := NewRefusals(slog.New(slog.NewTextHandler(logs, nil)), "test", slog.LevelWarn, time.Hour)
	l, addr := echoServer(t, ListenerConfig{MaxConns: 4, Silent: 200 * time.Millisecond, Refusals: ref})
	talker := dialFrom(t, "127.0.0.1", addr)
	if !served(talker) {
		t.Fatal("talker refused")
	}
	silent := dialFrom(t, "127.0.0.2", addr)
	silent.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("silent peer: read %v, want the connection closed by the listener", err)
	}
	waitOpen(t, l, 1)
	time.Sleep(400 * time.Millisecond) // twice the deadline: the talker is still served
	if !served(talker) {
		t.Fatal("a peer that spoke was closed at the silence deadline")
	}
	if !strings.Contains(logs.String(), "reason="+ReasonSilent) || !strings.Contains(logs.String(), "source=127.0.0.2") {
		t.Fatalf("silent peer not noted:\n%s", logs.String())
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestSourceKey(t *testing.T) {
	for _, c := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("10.0.0.7"), Port: 1}, "10.0.0.7"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:10.0.0.7"), Port: 1}, "10.0.0.7"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:aaaa::1"), Port: 1}, "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:bbbb::9"), Port: 2}, "2001:db8:1:2::/64"},
		{&net.UDPAddr{IP: net.ParseIP("10.0.0.8"), Port: 67}, "10.0.0.8"},
		{nil, "?"},
	} {
		if got := SourceKey(c.addr); got != c.want {
			t.Errorf("SourceKey(%v) = %q, want %q", c.addr, got, c.want)
		}
	}
}

// The http.Server's handshake noise is counted per source, handshakes the
// Listener cut are not counted twice, other errors are logged but only a
// few.
func TestHTTPErrorLog(t *testing.T) {
	logs := &syncBuf{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	ref := NewRefusals(log, "web", slog.LevelWarn, time.Hour)
	el := HTTPErrorLog(ref, log)
	for i := 0; i < 500; i++ {
		el.Printf("http: TLS handshake error from 10.0.0.%d:%d: EOF", i%5, 40000+i)
		el.Printf("http: TLS handshake error from 10.0.0.9:1234: read tcp 10.0.0.1:8444->10.0.0.9:1234: use of closed network connection")
		el.Printf("http: Accept error: accept tcp [::]:8444: accept4: too many open files; retrying in 5ms")
	}
	ref.Flush()
	out := logs.String()
	if n := strings.Count(out, "\n"); n > 10 {
		t.Fatalf("1500 server errors wrote %d lines:\n%s", n, out)
	}
	for _, want := range []string{"reason=" + ReasonHandshake, "refused=499", "sources=5", "too many open files"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "10.0.0.9") {
		t.Errorf("a handshake the listener cut was counted again:\n%s", out)
	}
}

func TestSplitFDs(t *testing.T) {
	shares := func() []Share {
		return []Share{
			{Name: "http", Flag: "--http-max-conns", DefaultConns: 4096, MinConns: 16, DefaultPerSource: 32, FDsPerConn: 2},
			{Name: "grpc", Flag: "--grpc-max-conns", DefaultConns: 8192, MinConns: 16, DefaultPerSource: 64, FDsPerConn: 1},
			{Name: "web", Flag: "--web-max-conns", DefaultConns: 256, MinConns: 4, DefaultPerSource: 16, FDsPerConn: 1},
			{Name: "metrics", Flag: "--metrics-max-conns", DefaultConns: 64, MinConns: 2, DefaultPerSource: 4, FDsPerConn: 1},
		}
	}
	// Plenty: the defaults.
	b, err := SplitFDs(1<<20, 1<<18, shares())
	if err != nil {
		t.Fatal(err)
	}
	want := []Caps{{4096, 32}, {8192, 64}, {256, 16}, {64, 4}}
	for i, c := range b.Caps {
		if c != want[i] {
			t.Errorf("plentiful: %s caps %+v, want %+v", shares()[i].Name, c, want[i])
		}
	}
	if b.Listeners != 4096*2+8192+256+64 {
		t.Errorf("plentiful: listeners hold %d descriptors", b.Listeners)
	}
	// Tight limits: the sum stays within limit-reserve, every cap at least
	// its minimum, one source never the whole listener.
	for _, limit := range []int{128, 256, 1024, 4096, 20000} {
		reserve := max(limit/4, 64)
		b, err := SplitFDs(limit, reserve, shares())
		if err != nil {
			t.Fatalf("limit %d: %v", limit, err)
		}
		if b.Listeners > limit-reserve {
			t.Errorf("limit %d: the listeners may hold %d descriptors, %d are available", limit, b.Listeners, limit-reserve)
		}
		for i, c := range b.Caps {
			s := shares()[i]
			if c.Conns < s.MinConns || c.Conns > s.DefaultConns || c.PerSource < 1 || c.PerSource > max(1, c.Conns/4) || c.PerSource > s.DefaultPerSource {
				t.Errorf("limit %d: %s caps %+v", limit, s.Name, c)
			}
		}
		t.Logf("limit %d reserve %d: %+v (%d descriptors)", limit, reserve, b.Caps, b.Listeners)
	}
	// Caps the operator set are kept; the others make room.
	sh := shares()
	sh[0].Conns, sh[0].PerSource = 1000, 8
	b, err = SplitFDs(4096, 1024, sh)
	if err != nil || b.Caps[0] != (Caps{1000, 8}) || b.Listeners > 4096-1024 {
		t.Fatalf("explicit http cap: %+v, %v", b, err)
	}
	// Too low: refused, naming the limit and the flag.
	sh[0].Conns = 4096
	if _, err := SplitFDs(4096, 1024, sh); err == nil || !strings.Contains(err.Error(), "RLIMIT_NOFILE) is 4096") ||
		!strings.Contains(err.Error(), "--http-max-conns 4096 (8192 descriptors)") {
		t.Fatalf("caps beyond the limit: %v", err)
	}
	if _, err := SplitFDs(64, 60, shares()); err == nil || !strings.Contains(err.Error(), "the web listener at least 4") {
		t.Fatalf("limit below the minimums: %v", err)
	}
}
