package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/cure-oss/cure/provisioner-lite/coordinator"
)

// registerMemoryFlags: the Go runtime's memory limit, planned from the
// fleet (coordinator.PlanMemory; docs/OPERATIONS.md, Memory).
func registerMemoryFlags(fs *flag.FlagSet, c *coordinator.Config) {
	fs.IntVar(&c.FleetSize, "fleet-size", c.FleetSize, "nodes the memory limit is planned for: 128 MiB + 160 KiB a node, at most 3/4 of the host's (or cgroup's) memory "+
		"(0: the store's node count, followed as nodes are added and removed)")
	fs.Var((*byteSize)(&c.MemoryLimit), "memory-limit", "the Go runtime's memory limit, a `size` such as 2GiB or 1500MiB (0: planned from --fleet-size; off: none); "+
		"beats GOMEMLIMIT, which otherwise stays the limit")
}

// byteSize is a size in bytes given with an optional unit: B, KiB, MiB,
// GiB, TiB (or KB, MB, GB, TB: powers of 1000); "off" is -1.
type byteSize int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}

func (b *byteSize) Set(s string) error {
	s = strings.TrimSpace(s)
	if s == "off" {
		*b = -1
		return nil
	}
	mult := int64(1)
	for _, u := range byteUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return fmt.Errorf("want a size such as 2GiB, 1500MiB or a number of bytes, or off")
	}
	*b = byteSize(n * mult)
	return nil
}

func (b *byteSize) String() string {
	switch n := int64(*b); {
	case n < 0:
		return "off"
	case n == 0:
		return "0"
	case n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "GiB"
	case n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	default:
		return strconv.FormatInt(n, 10)
	}
}
