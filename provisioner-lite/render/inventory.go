package render

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/inventory"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// InventorySection is one part of a node's hardware inventory as curectl
// shows it: label/value pairs (the system, the totals) or a table (one row
// per GPU, NIC, disk...).
type InventorySection struct {
	Title   string
	Pairs   [][2]string
	Columns []string
	Rows    [][]string
}

// InventorySections lays out an inventory for people. It walks the message
// by reflection, in the contract's field order: scalar fields of the
// inventory become the "summary" pairs, each message field a section of
// pairs, each list of messages a table whose columns are the fields any
// row has. Fields added to the contract later show up without a change
// here.
func InventorySections(inv *curev1.Inventory) []InventorySection {
	if inv == nil {
		return nil
	}
	out := Sections(inv)
	if s, ok := neighbourSection(inv); ok {
		out = append(out, s)
	}
	return out
}

// Sections is InventorySections for any message.
func Sections(msg proto.Message) []InventorySection {
	m := msg.ProtoReflect()
	summary := InventorySection{Title: "summary"}
	var out []InventorySection
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if !m.Has(fd) {
			continue
		}
		v := m.Get(fd)
		switch {
		case fd.IsList() && fd.Message() != nil:
			out = append(out, table(fd, v.List()))
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			out = append(out, InventorySection{Title: label(fd.Name()), Pairs: pairs(v.Message(), "")})
		default:
			summary.Pairs = append(summary.Pairs, [2]string{label(fd.Name()), value(fd, v)})
		}
	}
	if len(summary.Pairs) > 0 {
		out = append([]InventorySection{summary}, out...)
	}
	return out
}

// pairs lists the set fields of m; nested messages are flattened with
// their field's label as a prefix.
func pairs(m protoreflect.Message, prefix string) [][2]string {
	var out [][2]string
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if !m.Has(fd) {
			continue
		}
		name := strings.TrimSpace(prefix + " " + label(fd.Name()))
		v := m.Get(fd)
		if !fd.IsList() && !fd.IsMap() && fd.Message() != nil {
			out = append(out, pairs(v.Message(), name)...)
			continue
		}
		out = append(out, [2]string{name, value(fd, v)})
	}
	return out
}

// table lays out a list of messages: one column per field any row sets.
func table(fd protoreflect.FieldDescriptor, l protoreflect.List) InventorySection {
	s := InventorySection{Title: fmt.Sprintf("%s (%d)", label(fd.Name()), l.Len())}
	fields := fd.Message().Fields()
	var cols []protoreflect.FieldDescriptor
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		if inOwnSection[f.FullName()] {
			continue
		}
		for j := 0; j < l.Len(); j++ {
			if l.Get(j).Message().Has(f) {
				cols = append(cols, f)
				break
			}
		}
	}
	for _, f := range cols {
		s.Columns = append(s.Columns, label(f.Name()))
	}
	for j := 0; j < l.Len(); j++ {
		row := l.Get(j).Message()
		cells := make([]string, len(cols))
		for k, f := range cols {
			// proto3 does not tell zero from unset: in a column some
			// row has, a number or flag shows its zero (GPU 0, link down).
			if row.Has(f) || !f.IsList() && !f.IsMap() && f.Kind() != protoreflect.StringKind && f.Kind() != protoreflect.BytesKind && f.Message() == nil {
				cells[k] = value(f, row.Get(f))
			}
		}
		s.Rows = append(s.Rows, cells)
	}
	return s
}

// value formats one field for a cell. Integer fields named *_bytes are
// sizes, *_mbps link speeds.
func value(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch {
	case fd.IsMap():
		kv := map[string]string{}
		v.Map().Range(func(k protoreflect.MapKey, x protoreflect.Value) bool {
			kv[k.String()] = scalar(fd.MapValue(), x)
			return true
		})
		parts := make([]string, 0, len(kv))
		for _, k := range slices.Sorted(maps.Keys(kv)) {
			parts = append(parts, k+"="+kv[k])
		}
		return strings.Join(parts, ", ")
	case fd.IsList():
		l := v.List()
		parts := make([]string, l.Len())
		for i := range parts {
			parts[i] = scalar(fd, l.Get(i))
		}
		return strings.Join(parts, ", ")
	}
	return scalar(fd, v)
}

func scalar(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	name := string(fd.Name())
	switch fd.Kind() {
	case protoreflect.BoolKind:
		if v.Bool() {
			return "yes"
		}
		return "no"
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return strconv.Itoa(int(v.Enum()))
	case protoreflect.StringKind:
		return textsafe.Line(v.String())
	case protoreflect.BytesKind:
		return fmt.Sprintf("%x", v.Bytes())
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		var parts []string
		for _, p := range pairs(v.Message(), "") {
			parts = append(parts, p[0]+"="+p[1])
		}
		return strings.Join(parts, " ")
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
		return unit(name, v.Uint())
	}
	if n := v.Int(); n >= 0 {
		return unit(name, uint64(n))
	}
	return strconv.FormatInt(v.Int(), 10)
}

func unit(name string, n uint64) string {
	switch {
	case strings.HasSuffix(name, "vendor_id") || strings.HasSuffix(name, "device_id"):
		return fmt.Sprintf("%04x", n) // PCI ids are read in hex (1af4:1000), as lspci and pci.ids write them
	case name == "class":
		return fmt.Sprintf("0x%06x", n)
	case name == "status" || name == "address":
		return fmt.Sprintf("0x%x", n) // machine-check registers
	case strings.HasSuffix(name, "_bytes"):
		return humanBytes(n)
	case strings.HasSuffix(name, "_mbps") && n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%d Gb/s", n/1000)
	case strings.HasSuffix(name, "_mbps"):
		return fmt.Sprintf("%d Mb/s", n)
	}
	return strconv.FormatUint(n, 10)
}

func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// words people write in capitals; anything else is shown as the field name
// with spaces.
var acronyms = map[string]string{
	"nvme": "NVMe", "gpu": "GPU", "gpus": "GPUs", "nic": "NIC", "nics": "NICs", "cpu": "CPU", "cpus": "CPUs",
	"bios": "BIOS", "bmc": "BMC", "pci": "PCI", "uuid": "UUID", "mac": "MAC", "vbios": "VBIOS", "dimm": "DIMM",
	"dimms": "DIMMs", "id": "ID", "numa": "NUMA", "nvswitch": "NVSwitch", "nvswitches": "NVSwitches", "mbps": "Mb/s",
	"pcie": "PCIe", "gts": "GT/s", "edac": "EDAC", "ce": "CE", "ue": "UE",
}

func label(name protoreflect.Name) string {
	ws := strings.Split(string(name), "_")
	for i, w := range ws {
		if a, ok := acronyms[w]; ok {
			ws[i] = a
		}
	}
	return strings.Join(ws, " ")
}

// InventoryHeading says where an inventory came from.
func InventoryHeading(rec *curev1.InventoryRecord, runID string) string {
	if rec == nil {
		return ""
	}
	s := fmt.Sprintf("hardware reported at boot %s", rec.GetBootId())
	if rec.GetRunId() != runID {
		s += " of run " + rec.GetRunId()
	}
	if ms := rec.GetTimeUnixMs(); ms > 0 {
		s += " on " + time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05 UTC")
	}
	if rec.GetPeer() != "" {
		s += " from " + rec.GetPeer()
	}
	if rec.GetTruncated() {
		s += " (cleaned or cut to the coordinator's bounds)"
	}
	return textsafe.Line(s)
}

// PrintInventory writes an inventory record's sections: pairs on a line
// each, tables as tables.
func PrintInventory(w io.Writer, rec *curev1.InventoryRecord, runID string) {
	if rec == nil {
		fmt.Fprintln(w, "\nno hardware reported yet (the runner reports it when the node boots into CURE)")
		return
	}
	fmt.Fprintf(w, "\n%s\n", InventoryHeading(rec, runID))
	for _, s := range InventorySections(rec.GetInventory()) {
		if len(s.Pairs) > 0 {
			parts := make([]string, len(s.Pairs))
			for i, p := range s.Pairs {
				parts[i] = p[0] + ": " + clip(p[1], 80)
			}
			fmt.Fprintf(w, "  %-8s %s\n", s.Title, strings.Join(parts, "  "))
			continue
		}
		fmt.Fprintf(w, "  %s\n", s.Title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "    %s\n", strings.ToUpper(strings.Join(s.Columns, "\t")))
		for _, r := range s.Rows {
			cells := make([]string, len(r))
			for i, c := range r {
				cells[i] = clip(c, 48)
			}
			fmt.Fprintf(tw, "    %s\n", strings.Join(cells, "\t"))
		}
		tw.Flush()
	}
}

// PrintNode writes one node: its inventory entry (secrets appear only as
// where they come from), its latest run, and its hardware.
func PrintNode(w io.Writer, d *curev1.NodeDetail) {
	fmt.Fprintf(w, "node %s  sku %s  state %s", d.GetNodeId(), orDash(d.GetSku()), d.GetState())
	if d.GetLastRunId() != "" {
		fmt.Fprintf(w, "  last run %s (%s)", d.GetLastRunId(), d.GetLastRunStatus())
	}
	fmt.Fprintln(w)
	if p := d.GetPool(); p != nil {
		fmt.Fprintf(w, "  pool %s since %s by %s: %s", PoolName(p.GetState()), time.UnixMilli(p.GetSinceUnixMs()).UTC().Format("2006-01-02 15:04:05 MST"),
			orDash(p.GetActor()), orDash(p.GetReason()))
		if p.GetRunId() != "" {
			fmt.Fprintf(w, " (run %s)", p.GetRunId())
		}
		if p.GetAutoReturn() {
			fmt.Fprint(w, " (returns on pass)")
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintln(w, "  pool -")
	}
	fmt.Fprintf(w, "  hostname %s  serial %s  MACs %s\n", orDash(d.GetHostname()), orDash(d.GetSerial()), strings.Join(d.GetMacs(), ", "))
	if nics := inventory.UnlistedNICs(d.GetMacs(), d.GetInventory().GetInventory()); nics != nil {
		fmt.Fprintf(w, "  WARNING: none of these MACs is a NIC the node reported at boot %s (%s): it will not be recognised when it network-boots; fix its macs (curectl nodes add -f, nodes import)\n",
			orDash(d.GetInventory().GetBootId()), textsafe.Line(strings.Join(nics, ", ")))
	}
	var labels []string
	for _, k := range slices.Sorted(maps.Keys(d.GetLabels())) {
		labels = append(labels, k+"="+d.GetLabels()[k])
	}
	fmt.Fprintf(w, "  labels %s\n", orDash(strings.Join(labels, ", ")))
	printCabling(w, d.GetCabling())
	fmt.Fprintf(w, "  BMC %s  user %s  password %s\n", d.GetBmcUrl(), d.GetBmcUsername(), d.GetBmcPassword())
	fmt.Fprintf(w, "  BMC TLS %s  PSIDs stored %d\n", d.GetBmcTls(), d.GetPsids())
	switch ek := d.GetEkSha256(); {
	case ek == "":
		fmt.Fprintf(w, "  TPM EK none enrolled (the next attested boot enrolls its EK on first use)\n")
	case d.GetEkSource() == "tofu":
		fmt.Fprintf(w, "  TPM EK sha256 %s (trusted on first use by run %s at %s): every boot must attest with it\n", textsafe.Line(ek),
			orDash(d.GetEkRunId()), time.UnixMilli(d.GetEkEnrolledUnixMs()).UTC().Format(time.RFC3339))
	default:
		fmt.Fprintf(w, "  TPM EK sha256 %s (%s in the nodes file): every boot must attest with it\n", textsafe.Line(ek), textsafe.Line(d.GetEkSource()))
	}
	PrintInventory(w, d.GetInventory(), "")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return textsafe.Line(s)
}
