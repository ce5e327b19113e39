package render

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// PrintAudit writes a direct audit's MATCH/DRIFT table per node and returns
// the exit code: 0 all match, 1 drift, 2 a node could not be audited.
func PrintAudit(w io.Writer, nodes []*curev1.NodeAudit) int {
	code := 0
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tCOMPONENT\tCHECK\tVERDICT\tOBSERVED\tEXPECTED\tDETAIL")
	for _, n := range nodes {
		if n.GetError() != "" {
			fmt.Fprintf(tw, "%s\t-\t-\tERROR\t\t\t%s\n", n.GetNodeId(), clip(n.GetError(), 80))
			code = 2
			continue
		}
		for _, v := range n.GetVerdicts() {
			if v.GetStatus() != curev1.VerdictStatus_MATCH && code == 0 {
				code = 1
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.GetNodeId(), v.GetComponent(), v.GetCheck(), v.GetStatus(),
				clip(v.GetObserved(), 30), clip(v.GetExpected(), 30), clip(v.GetMessage(), 60))
		}
	}
	tw.Flush()
	for _, n := range nodes {
		fmt.Fprintf(w, "%s audited in %s\n", n.GetNodeId(), (time.Duration(n.GetDurationMs()) * time.Millisecond).String())
	}
	return code
}
