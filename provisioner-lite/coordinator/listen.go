package coordinator

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// openListener opens a TCP listen address, or takes over a listening
// socket inherited as a file descriptor ("fd:3"): a supervisor (systemd
// socket activation, or a test harness that must not race another process
// for a port) binds it and the coordinator serves it.
func openListener(spec string) (net.Listener, error) {
	if rest, ok := strings.CutPrefix(spec, "fd:"); ok {
		n, err := strconv.Atoi(rest)
		if err != nil || n < 3 {
			return nil, fmt.Errorf("%q: want fd:N with N >= 3 (0-2 are stdio)", spec)
		}
		f := os.NewFile(uintptr(n), "listener-fd-"+rest)
		if f == nil {
			return nil, fmt.Errorf("%q: no such file descriptor", spec)
		}
		defer f.Close() // FileListener dups it
		l, err := net.FileListener(f)
		if err != nil {
			return nil, fmt.Errorf("%q: not a listening socket: %w", spec, err)
		}
		if _, ok := l.Addr().(*net.TCPAddr); !ok {
			l.Close()
			return nil, fmt.Errorf("%q: not a TCP socket (%s)", spec, l.Addr().Network())
		}
		return l, nil
	}
	if _, _, err := net.SplitHostPort(spec); err != nil {
		return nil, err
	}
	return net.Listen("tcp", spec)
}

// listenerPort is the TCP port l is bound to, as a string for URLs.
func listenerPort(l net.Listener) string {
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}
