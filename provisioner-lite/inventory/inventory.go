// Package inventory keeps the hardware inventory a runner sends in its Hello
// as the coordinator stores it: hostile input (the node's firmware, or
// whatever booted in its place, wrote it), so every string is cleaned of
// control characters and bounded, every list and map is bounded, and the
// whole record is bounded in bytes before it reaches the store. It walks the
// message by reflection, so fields added to cure.v1.Inventory later are
// kept and bounded without a change here.
package inventory

import (
	"fmt"
	"sort"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Bounds of a stored inventory. A real 8-GPU server (32 DIMMs, 10 NICs,
// 8 NVMe, its disks) is about 20 KB of protojson; the bounds leave an
// order of magnitude to spare and no more.
const (
	MaxString = 256       // bytes per string, after cleaning
	MaxList   = 512       // entries per list (halved until MaxJSON holds)
	MaxMap    = 64        // entries per map
	MaxJSON   = 256 << 10 // bytes of protojson stored per boot
	maxDepth  = 8         // nesting; the schema has no recursion, this is a guard
)

// Marshal returns the bounded protojson of inv (inv itself is not changed)
// and whether anything had to be cut to fit. nil is an empty inventory.
func Marshal(inv *curev1.Inventory) ([]byte, bool, error) {
	if inv == nil {
		inv = &curev1.Inventory{}
	}
	for limit := MaxList; ; limit /= 2 {
		c := proto.Clone(inv).(*curev1.Inventory)
		cut := bound(c.ProtoReflect(), limit, 0)
		js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(c)
		if err != nil {
			return nil, false, fmt.Errorf("inventory: %w", err)
		}
		if len(js) <= MaxJSON {
			return js, cut || limit < MaxList, nil
		}
		if limit <= 1 {
			// Only a schema with very many large fields gets here: keep
			// nothing rather than more than the bound.
			return []byte("{}"), true, nil
		}
	}
}

// Unmarshal reads a stored inventory. Fields this binary does not know (a
// newer coordinator stored them) are skipped.
func Unmarshal(js []byte) (*curev1.Inventory, error) {
	inv := &curev1.Inventory{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(js, inv); err != nil {
		return nil, fmt.Errorf("stored inventory: %w", err)
	}
	return inv, nil
}

// Bound cleans and bounds m in place (strings, lists, maps, unknown fields)
// and reports whether anything was cut. Marshal applies it to a copy.
func Bound(m proto.Message) bool {
	if m == nil {
		return false
	}
	return bound(m.ProtoReflect(), MaxList, 0)
}

func bound(m protoreflect.Message, maxList, depth int) (cut bool) {
	if len(m.GetUnknown()) > 0 {
		m.SetUnknown(nil) // unknown fields are never shown; do not keep them
		cut = true
	}
	if depth >= maxDepth {
		m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
			m.Clear(fd)
			cut = true
			return true
		})
		return cut
	}
	var clear []protoreflect.FieldDescriptor
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			if l.Len() > maxList {
				l.Truncate(maxList)
				cut = true
			}
			for i := 0; i < l.Len(); i++ {
				switch {
				case fd.Kind() == protoreflect.StringKind:
					s := clean(l.Get(i).String())
					cut = cut || s != l.Get(i).String()
					l.Set(i, protoreflect.ValueOfString(s))
				case fd.Kind() == protoreflect.BytesKind:
					if b := l.Get(i).Bytes(); len(b) > MaxString {
						l.Set(i, protoreflect.ValueOfBytes(b[:MaxString]))
						cut = true
					}
				case fd.Message() != nil:
					cut = bound(l.Get(i).Message(), maxList, depth+1) || cut
				}
			}
		case fd.IsMap():
			cut = boundMap(v.Map(), fd, maxList, depth) || cut
		case fd.Kind() == protoreflect.StringKind:
			if s := clean(v.String()); s != v.String() {
				if s == "" {
					clear = append(clear, fd)
				} else {
					m.Set(fd, protoreflect.ValueOfString(s))
				}
				cut = true
			}
		case fd.Kind() == protoreflect.BytesKind:
			if b := v.Bytes(); len(b) > MaxString {
				m.Set(fd, protoreflect.ValueOfBytes(b[:MaxString]))
				cut = true
			}
		case fd.Message() != nil:
			cut = bound(v.Message(), maxList, depth+1) || cut
		}
		return true
	})
	for _, fd := range clear {
		m.Clear(fd)
	}
	return cut
}

func boundMap(mp protoreflect.Map, fd protoreflect.FieldDescriptor, maxList, depth int) (cut bool) {
	type entry struct {
		k protoreflect.MapKey
		v protoreflect.Value
	}
	var all []entry
	mp.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		all = append(all, entry{k, v})
		return true
	})
	for _, e := range all {
		mp.Clear(e.k)
	}
	// Keep a deterministic subset: the smallest keys.
	sort.Slice(all, func(i, j int) bool { return fmt.Sprint(all[i].k.Interface()) < fmt.Sprint(all[j].k.Interface()) })
	if len(all) > MaxMap {
		all, cut = all[:MaxMap], true
	}
	for _, e := range all {
		k, v := e.k, e.v
		if fd.MapKey().Kind() == protoreflect.StringKind {
			s := clean(k.String())
			cut = cut || s != k.String()
			k = protoreflect.ValueOfString(s).MapKey()
		}
		switch {
		case fd.MapValue().Kind() == protoreflect.StringKind:
			s := clean(v.String())
			cut = cut || s != v.String()
			v = protoreflect.ValueOfString(s)
		case fd.MapValue().Message() != nil:
			cut = bound(v.Message(), maxList, depth+1) || cut
		}
		mp.Set(k, v)
	}
	return cut
}

func clean(s string) string { return textsafe.BoundedLine(s, MaxString) }
