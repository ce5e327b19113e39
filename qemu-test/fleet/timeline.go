package fleet

import (
	"context"
	"fmt"
	"io"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// phaseEndProblems: every node's run timeline, read back through the
// operator API, holds the runner's end of every in-band phase (a run taken
// over by another instance included).
func phaseEndProblems(ctx context.Context, c curev1.OperatorServiceClient, nodes []*Node) ([]string, error) {
	var problems []string
	for _, n := range nodes {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		stream, err := c.Watch(wctx, &curev1.WatchRequest{NodeId: n.ID})
		if err != nil {
			cancel()
			return nil, err
		}
		ended := map[string]bool{}
		for {
			e, err := stream.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				cancel()
				return nil, err
			}
			if e.GetKind() == "phase_end" && e.GetSource() == "runner" {
				ended[e.GetPhase()] = true
			}
		}
		cancel()
		for _, ph := range []string{"nic", "dpu", "nvme", "sed_revert", "os_install"} {
			if !ended[ph] {
				problems = append(problems, fmt.Sprintf("%s: no runner phase_end for %s in the timeline (%v)", n.ID, ph, ended))
			}
		}
	}
	return problems, nil
}
