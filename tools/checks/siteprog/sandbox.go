package siteprog

import (
	"sync"

	"github.com/cure-oss/cure/tools/tail"
)

// Where the program and its working directory are inside the sandbox:
// its private /tmp, a tmpfs that goes away with the run.
const (
	WorkDir     = "/tmp/work"
	ProgramPath = "/tmp/site-program"
)

// Nobody is the uid and gid a program runs as unless the Sandbox names
// others: the overflow ids, owning nothing on a CURE node.
const Nobody = 65534

// Defaults of a Sandbox.
const (
	DefaultTmpBytes = 256 << 20
)

// Sandbox is how a program is confined. The zero value is the node's:
// uid and gid Nobody, a 256 MiB private /tmp, /proc/sys for the kernel
// log restriction. A program never runs as root: a zero UID means Nobody.
type Sandbox struct {
	UID, GID uint32
	// TmpBytes sizes the private tmpfs mounted on /tmp (and /dev/shm):
	// the node's memory is its disk, a program may not fill it.
	TmpBytes int64
	// ProcSys is where kernel/dmesg_restrict is ("/proc/sys" when "").
	ProcSys string
	// Network keeps the node's network namespace; false gives the program
	// one of its own (no interface up): it cannot speak on the
	// provisioning network as the node.
	Network bool
}

func (s Sandbox) withDefaults() Sandbox {
	if s.UID == 0 {
		s.UID = Nobody
	}
	if s.GID == 0 {
		s.GID = Nobody
	}
	if s.TmpBytes <= 0 {
		s.TmpBytes = DefaultTmpBytes
	}
	if s.ProcSys == "" {
		s.ProcSys = "/proc/sys"
	}
	return s
}

// capped is a stream of the program's bounded to max bytes: past it, over
// is set, kill is called once and the copy stops. It keeps all of a stream
// (stdout: at most max bytes) or only its tail (stderr).
type capped struct {
	max  int64
	keep bool
	kill func()

	mu   sync.Mutex
	n    int64
	buf  []byte
	tail tail.Buffer
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over {
		return 0, errOver
	}
	c.n += int64(len(p))
	if c.n > c.max {
		c.over = true
		c.kill()
		return 0, errOver
	}
	if c.keep {
		c.buf = append(c.buf, p...)
	} else {
		c.tail.Write(p)
	}
	return len(p), nil
}

func (c *capped) state() (buf []byte, tail string, over bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf, c.tail.String(), c.over
}
