package coordinator

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An inherited listening socket is served on the port its owner bound; a
// descriptor that is not a listening TCP socket, or a bad spec, is refused
// with the spec named.
func TestOpenListener(t *testing.T) {
	owner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	f, err := owner.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l, err := openListener(fmt.Sprintf("fd:%d", f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got, want := listenerPort(l), listenerPort(owner); got != want {
		t.Errorf("inherited listener on port %s, the owner bound %s", got, want)
	}
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", owner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := c.Read(buf); err != nil || string(buf) != "hi" {
		t.Errorf("served through the inherited socket: %q, %v", buf, err)
	}
	c.Close()

	reg, err := os.Create(filepath.Join(t.TempDir(), "not-a-socket"))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	for spec, want := range map[string]string{
		fmt.Sprintf("fd:%d", reg.Fd()): "not a listening socket",
		"fd:1":                         "want fd:N with N >= 3",
		"fd:x":                         "want fd:N",
		"8080":                         "missing port",
	} {
		if _, err := openListener(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("openListener(%q) = %v, want an error with %q", spec, err, want)
		}
	}
	l0, err := openListener("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l0.Close()
	if listenerPort(l0) == "0" {
		t.Error(":0 did not report the port bound")
	}
}
