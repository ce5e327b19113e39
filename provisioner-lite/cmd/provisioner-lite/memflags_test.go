package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// --memory-limit takes sizes with units and off; --fleet-size and it come
// from the file and CURE_* like every flag, a bad size named with its
// file and line.
func TestMemoryFlags(t *testing.T) {
	defer func(d string) { defaultConfigFile = d }(defaultConfigFile)
	defaultConfigFile = filepath.Join(t.TempDir(), "absent.yaml")
	for in, want := range map[string]int64{"0": 0, "2GiB": 2 << 30, "1500MiB": 1500 << 20, "512 KiB": 512 << 10, "3GB": 3e9, "4096": 4096, "10B": 10, "off": -1} {
		var b byteSize
		if err := b.Set(in); err != nil || int64(b) != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "2XB", "GiB", "1.5GiB", "99999999999TiB"} {
		var b byteSize
		if err := b.Set(bad); err == nil {
			t.Errorf("Set(%q) = %d, want an error", bad, b)
		}
	}
	for _, n := range []int64{-1, 0, 2 << 30, 1500 << 20, 4097} {
		b := byteSize(n)
		var back byteSize
		if err := back.Set(b.String()); err != nil || back != b {
			t.Errorf("%d prints %q, which reads back as %d (%v)", n, b.String(), back, err)
		}
	}
	c, src, err := resolveArgs(t, "fleet-size: 5000\nmemory-limit: 1GiB\n", map[string]string{"CURE_MEMORY_LIMIT": "3GiB"})
	if err != nil || c.FleetSize != 5000 || c.MemoryLimit != 3<<30 || src["fleet-size"] == "" || src["memory-limit"] != "env CURE_MEMORY_LIMIT" {
		t.Fatalf("file and env: fleet %d, limit %d, sources %v, %v", c.FleetSize, c.MemoryLimit, src, err)
	}
	_, _, err = resolveArgs(t, "memory-limit: lots\n", nil)
	if err == nil || !strings.Contains(err.Error(), "provisioner-lite.yaml:1: memory-limit") {
		t.Fatalf("a bad size in the file: %v, want it named with the file and line", err)
	}
}
