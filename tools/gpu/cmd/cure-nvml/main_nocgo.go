//go:build !cgo

// Command cure-nvml needs cgo (go-nvml); this build says so instead of
// pretending to check anything. Build it with CGO_ENABLED=1.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "cure-nvml: built without cgo; NVML is unavailable (rebuild with CGO_ENABLED=1)")
	os.Exit(3)
}
