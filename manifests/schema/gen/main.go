// Command gen writes the manifests' JSON Schema files (schema.Generate)
// into the current directory: `go generate ./manifests/schema`.
package main

import (
	"fmt"
	"os"

	"github.com/cure-oss/cure/manifests/schema"
)

func main() {
	files, err := schema.Generate()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	for name, data := range files {
		if err := os.WriteFile(name, data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
	}
}
