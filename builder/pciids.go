package builder

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
)

// trimPCIIDs keeps, of a pci.ids database, the vendor and device lines of
// the given vendors (all when empty) and the whole class list; comments,
// blank lines and subsystem lines go. Debian's 1.36 MB file trimmed to
// the data centre vendors of initramfs/cure.yaml is ~0.35 MB (~51 KB in
// the zstd image instead of ~258 KB); devices of other vendors are still
// listed, by id.
func trimPCIIDs(data []byte, vendors []string) ([]byte, error) {
	keepV := map[string]bool{}
	for _, v := range vendors {
		keepV[v] = true
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	keep, classes, seen := false, false, map[string]bool{}
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "":
			continue
		case strings.HasPrefix(line, "C "):
			classes = true
		case classes:
		case line[0] != '\t':
			id, _, ok := strings.Cut(line, "  ")
			if !ok || len(id) != 4 {
				return nil, fmt.Errorf("pci.ids:%d: expected \"vvvv  Vendor name\", found %q", n, line)
			}
			seen[id] = true
			keep = len(keepV) == 0 || keepV[id]
		case strings.HasPrefix(line, "\t\t"):
			continue // subsystem: nothing reads it
		}
		if keep || classes {
			out.WriteString(line)
			out.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading pci.ids: %w", err)
	}
	if !classes {
		return nil, fmt.Errorf("pci.ids: no class list (\"C xx\" lines): not a pci.ids file?")
	}
	var missing []string
	for _, v := range vendors {
		if !seen[v] {
			missing = append(missing, v)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("pci.ids: vendors %s not in the database", strings.Join(missing, ", "))
	}
	return out.Bytes(), nil
}

func readPCIIDs(src string, vendors []string) ([]byte, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return nil, err
	}
	return trimPCIIDs(data, vendors)
}
