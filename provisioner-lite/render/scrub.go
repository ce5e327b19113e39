package render

import (
	"github.com/cure-oss/cure/api/protowalk"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/protobuf/proto"
)

// Scrub replaces, in place, every string of m (nested messages, lists and
// maps included) by its textsafe.Text form. curectl scrubs every answer of
// the coordinator before showing it: runner-supplied text must not drive
// the operator's terminal (docs/SECURITY.md).
func Scrub(m proto.Message) { protowalk.Strings(m, textsafe.Text) }
