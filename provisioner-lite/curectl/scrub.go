package curectl

import (
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Scrub replaces, in place, every string of m (nested messages, lists and
// maps included) by its textsafe.Text form. curectl scrubs every answer of
// the coordinator before showing it: runner-supplied text must not drive
// the operator's terminal (docs/SECURITY.md), and walking the message by
// reflection covers fields added later too.
func Scrub(m proto.Message) {
	if m == nil {
		return
	}
	scrub(m.ProtoReflect())
}

func scrub(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				if fd.Kind() == protoreflect.StringKind {
					l.Set(i, protoreflect.ValueOfString(textsafe.Text(l.Get(i).String())))
				} else if fd.Message() != nil {
					scrub(l.Get(i).Message())
				}
			}
		case fd.IsMap():
			mp := v.Map()
			type kv struct {
				k protoreflect.MapKey
				v protoreflect.Value
			}
			var redo []kv
			mp.Range(func(k protoreflect.MapKey, val protoreflect.Value) bool {
				if fd.MapValue().Kind() == protoreflect.StringKind {
					val = protoreflect.ValueOfString(textsafe.Text(val.String()))
				} else if fd.MapValue().Message() != nil {
					scrub(val.Message())
				}
				redo = append(redo, kv{k, val})
				return true
			})
			for _, e := range redo {
				mp.Clear(e.k)
				key := e.k
				if fd.MapKey().Kind() == protoreflect.StringKind {
					key = protoreflect.ValueOfString(textsafe.Line(e.k.String())).MapKey()
				}
				mp.Set(key, e.v)
			}
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString(textsafe.Text(v.String())))
		case fd.Message() != nil:
			scrub(v.Message())
		}
		return true
	})
}
