//go:build !cgo

// Command cure-nvml needs cgo (go-nvml); this build says so instead of
// pretending to check anything. Build it with CGO_ENABLED=1.
package main

import (
	"fmt"
	"os"

	"github.com/cure-oss/cure/tools/version"
)

func main() {
	if version.Requested(os.Args[1:]) {
		fmt.Println(version.String("cure-nvml"))
		return
	}
	fmt.Fprintln(os.Stderr, "cure-nvml: built without cgo; NVML is unavailable (rebuild with CGO_ENABLED=1)")
	os.Exit(3)
}
