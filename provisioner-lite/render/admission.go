package render

import (
	"cmp"
	"fmt"
	"io"
	"text/tabwriter"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
)

// PrintAdmission writes a node's standing with its SKU's admission
// policy: the decision, then one row per requirement with its state, the
// run its evidence comes from, and what was required and found.
func PrintAdmission(w io.Writer, a *curev1.NodeAdmissionResponse) {
	fmt.Fprintf(w, "node %s (SKU %s): pool %s\n", a.GetNodeId(), cmp.Or(a.GetSku(), "-"), PoolName(a.GetPool().GetState()))
	if a.GetPool().GetReason() != "" {
		fmt.Fprintf(w, "  %s\n", textsafe.Line(a.GetPool().GetReason()))
	}
	if !a.GetPolicy() {
		fmt.Fprintln(w, "no spec.admission on its SKU: a node is in service once its provision succeeds (no acceptance suite, attestation or fleet band required)")
		return
	}
	fmt.Fprintf(w, "admission: %s\n", admissionWord(a.GetDecision()))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REQUIREMENT\tSTATE\tRUN\tDETAIL")
	for _, q := range a.GetRequirements() {
		detail := textsafe.Line(q.GetDetail())
		if q.GetEvidence() != "" {
			detail += " [" + textsafe.Line(q.GetEvidence()) + "]"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", clip(q.GetName(), 16), clip(q.GetState(), 8), cmp.Or(q.GetRunId(), "-"), clip(detail, 200))
	}
	tw.Flush()
}

func admissionWord(d string) string {
	switch d {
	case "admit":
		return "admit (every requirement met)"
	case "wait":
		return "wait (accepting until the pending requirements are shown)"
	case "refuse":
		return "refuse (quarantined: a requirement failed or could not be judged)"
	}
	return d
}
