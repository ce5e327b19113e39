package curev1

import (
	"reflect"
	"strings"
	"testing"
)

func TestEvidenceRoundTrip(t *testing.T) {
	msg := AppendEvidence("link 2.5 GT/s x1; SKU wants gen4 x4", EvidenceIdentity, []string{"serial: S1", "model: QEMU NVMe Ctrl"})
	msg = AppendEvidence(msg, "kernel log (last 2 of 5 lines naming nvme0)", []string{
		"[    1.000000] nvme nvme0: pci function 0000:01:00.0", "", "[    2.000000] a\nb " + strings.Repeat("x", 300)})
	msg = AppendEvidence(msg, "empty", nil)
	text, blocks := SplitEvidence(msg)
	if text != "link 2.5 GT/s x1; SKU wants gen4 x4" || len(blocks) != 2 {
		t.Fatalf("text %q blocks %+v", text, blocks)
	}
	if id := blocks[0].Identity(); !reflect.DeepEqual(id, map[string]string{"serial": "S1", "model": "QEMU NVMe Ctrl"}) || blocks[0].IsKernelLog() {
		t.Errorf("identity %v", id)
	}
	k := blocks[1]
	if !k.IsKernelLog() || len(k.Lines) != 2 || !strings.HasPrefix(k.Lines[1], "[    2.000000] a b xxx") || len(k.Lines[1]) != MaxEvidenceLine {
		t.Errorf("kernel block %+v", k)
	}
	if text, blocks := SplitEvidence("plain"); text != "plain" || blocks != nil {
		t.Errorf("plain: %q %v", text, blocks)
	}
	// A message cut by the coordinator's bound in the middle of a title.
	text, blocks = SplitEvidence("x\n--- kernel lo…[+40 bytes]")
	if text != "x\n--- kernel lo…[+40 bytes]" || len(blocks) != 0 {
		t.Errorf("cut: %q %v", text, blocks)
	}
}

// FuzzSplitEvidence: verdict messages come from runners (peers); the
// coordinator splits every one of them. Nothing is lost or invented: the
// text and the blocks together hold no more lines than the message.
func FuzzSplitEvidence(f *testing.F) {
	f.Add(AppendEvidence("m", EvidenceIdentity, []string{"serial: 1"}))
	f.Add("x\n--- kernel log ---\na\n--- \n--- y")
	f.Add("\n--- ---\n\n--- a ---")
	f.Fuzz(func(t *testing.T, msg string) {
		text, blocks := SplitEvidence(msg)
		n := strings.Count(text, "\n")
		for _, b := range blocks {
			n += len(b.Lines) + 1
			_ = b.Identity()
			if strings.Contains(b.Title, "\n") {
				t.Fatalf("title %q spans lines", b.Title)
			}
		}
		if n > strings.Count(msg, "\n")+1 {
			t.Fatalf("%d lines out of %d", n, strings.Count(msg, "\n")+1)
		}
		if !strings.HasPrefix(msg, text) {
			t.Fatalf("text %q is not the message's start", text)
		}
	})
}
