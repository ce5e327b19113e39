package peerlimit

import (
	"fmt"
	"strings"
)

// Share is one listener's claim on the process's file descriptors.
type Share struct {
	Name string // the listener, as logs name it ("http")
	Flag string // the flag that sets Conns, named in errors ("--http-max-conns")
	// Conns and PerSource as the operator set them (> 0), or 0: derived.
	Conns, PerSource int
	// DefaultConns is the derived cap when descriptors are plentiful,
	// MinConns the least the listener is useful with.
	DefaultConns, MinConns int
	// DefaultPerSource is the derived per-source cap, lowered to a quarter
	// of the listener's cap when that is smaller (one source never holds
	// the whole listener).
	DefaultPerSource int
	// FDsPerConn is what one connection may hold: 1 (its socket), or 2
	// where it serves files (the socket and the file).
	FDsPerConn int
}

// Caps are one listener's connection caps.
type Caps struct{ Conns, PerSource int }

// Budget is how the descriptors were split: the caps of each share (in
// the order given) and the arithmetic, for the log line at start.
type Budget struct {
	Limit, Reserve, Listeners int // Listeners: descriptors the caps add up to
	Caps                      []Caps
}

// SplitFDs caps the listeners so that, all full at once, they hold at
// most limit-reserve descriptors: a flood of one listener then meets its
// own cap long before the process runs out of descriptors, and cannot
// starve the others (nor the store, the BMC connections or the files,
// which the reserve is for). Caps the operator set are kept as given; the
// others get their default, or when that does not fit, their minimum plus
// a share of what is left in proportion to what they lack. An error says
// what does not fit and what to change.
func SplitFDs(limit, reserve int, shares []Share) (Budget, error) {
	b := Budget{Limit: limit, Reserve: reserve, Caps: make([]Caps, len(shares))}
	avail := limit - reserve
	fixed, minSum, extraWant := 0, 0, 0
	var need []string
	for _, s := range shares {
		fd := max(1, s.FDsPerConn)
		if s.Conns > 0 {
			fixed += s.Conns * fd
			need = append(need, fmt.Sprintf("%s %d (%d descriptors)", s.Flag, s.Conns, s.Conns*fd))
			continue
		}
		minSum += s.MinConns * fd
		extraWant += max(0, s.DefaultConns-s.MinConns) * fd
		need = append(need, fmt.Sprintf("the %s listener at least %d (%d descriptors)", s.Name, s.MinConns, s.MinConns*fd))
	}
	if fixed+minSum > avail {
		return b, fmt.Errorf("the file descriptor limit (RLIMIT_NOFILE) is %d; %d are kept for the store, BMC connections and files, "+
			"which leaves %d for the listeners, and they need %d: %s. Raise the limit (ulimit -n, systemd LimitNOFILE=) or lower the caps set",
			limit, reserve, max(0, avail), fixed+minSum, strings.Join(need, ", "))
	}
	rest := avail - fixed - minSum
	for i, s := range shares {
		fd := max(1, s.FDsPerConn)
		c := Caps{Conns: s.Conns, PerSource: s.PerSource}
		if c.Conns <= 0 {
			c.Conns = s.DefaultConns
			if extraWant > rest {
				lack := max(0, s.DefaultConns-s.MinConns) * fd
				c.Conns = s.MinConns + int(int64(rest)*int64(lack)/int64(extraWant))/fd
			}
		}
		if c.PerSource <= 0 {
			c.PerSource = max(1, min(s.DefaultPerSource, c.Conns/4))
		}
		c.PerSource = min(c.PerSource, c.Conns)
		b.Caps[i] = c
		b.Listeners += c.Conns * fd
	}
	return b, nil
}
