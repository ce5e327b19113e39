package curev1

import "strings"

// Evidence blocks ride at the end of a verdict's message, after its text:
//
//	<message>
//	--- identity ---
//	serial: 1654024085493
//	--- kernel log (last 2 of 5 lines naming nvme0, 0000:01:00.0) ---
//	[   12.345678] nvme nvme0: I/O 12 QID 1 timeout, aborting
//
// The runner writes them (AppendEvidence), the coordinator's report and
// curectl read them back (SplitEvidence) to fill RmaPart and lay the lines
// out; a message without blocks is all text. Messages are bounded where
// the coordinator stores them, so a block's lines must be few and short.
const evidenceMark = "\n--- "

// Evidence block titles the report recognises.
const (
	EvidenceIdentity  = "identity"   // "key: value" lines naming the part (serial, uuid, vbios, board)
	EvidenceKernelLog = "kernel log" // the kernel log lines about the part (a title may go on: "kernel log (...)")
)

// EvidenceBlock is one block: its title and its lines.
type EvidenceBlock struct {
	Title string
	Lines []string
}

// MaxEvidenceLine bounds one evidence line.
const MaxEvidenceLine = 240

// AppendEvidence adds a block to a message. Lines are cut to
// MaxEvidenceLine; newlines inside a line become spaces; empty lines and
// an empty block are dropped.
func AppendEvidence(msg, title string, lines []string) string {
	var kept []string
	for _, l := range lines {
		l = strings.TrimSpace(strings.ReplaceAll(l, "\n", " "))
		if l == "" {
			continue
		}
		if len(l) > MaxEvidenceLine {
			cut := MaxEvidenceLine - 3
			for cut > 0 && l[cut]&0xc0 == 0x80 {
				cut--
			}
			l = l[:cut] + "..."
		}
		kept = append(kept, l)
	}
	if len(kept) == 0 {
		return msg
	}
	title = strings.ReplaceAll(strings.TrimSpace(title), "\n", " ")
	return msg + evidenceMark + title + " ---\n" + strings.Join(kept, "\n")
}

// SplitEvidence separates a message's text from its evidence blocks.
func SplitEvidence(msg string) (string, []EvidenceBlock) {
	i := strings.Index(msg, evidenceMark)
	if i < 0 {
		return msg, nil
	}
	text, rest := msg[:i], msg[i:]
	var blocks []EvidenceBlock
	for _, part := range strings.Split(rest, evidenceMark)[1:] {
		head, body, _ := strings.Cut(part, "\n")
		title, ok := strings.CutSuffix(head, " ---")
		if !ok {
			// Not one of ours (a message that happens to hold the marker,
			// or cut short by a bound): keep it as text of the last block.
			if n := len(blocks); n > 0 {
				blocks[n-1].Lines = append(blocks[n-1].Lines, strings.Split("--- "+part, "\n")...)
			} else {
				text += evidenceMark + part
			}
			continue
		}
		b := EvidenceBlock{Title: title}
		for _, l := range strings.Split(body, "\n") {
			if l != "" {
				b.Lines = append(b.Lines, l)
			}
		}
		blocks = append(blocks, b)
	}
	return text, blocks
}

// Identity reads an identity block's "key: value" lines.
func (b EvidenceBlock) Identity() map[string]string {
	out := map[string]string{}
	for _, l := range b.Lines {
		if k, v, ok := strings.Cut(l, ": "); ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}

// IsKernelLog reports whether the block holds kernel log lines.
func (b EvidenceBlock) IsKernelLog() bool { return strings.HasPrefix(b.Title, EvidenceKernelLog) }
