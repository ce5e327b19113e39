package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// bootOSClient answers BootInstalledOS: busy for node "busy", done otherwise.
type bootOSClient struct {
	curev1.OperatorServiceClient
	asked []string
}

func (c *bootOSClient) BootInstalledOS(_ context.Context, req *curev1.BootInstalledOSRequest, _ ...grpc.CallOption) (*curev1.BootInstalledOSResponse, error) {
	c.asked = append(c.asked, req.GetNodeId())
	if req.GetNodeId() == "busy" {
		return nil, status.Error(codes.FailedPrecondition, "node busy: run r1 is running in validate; cancel it first (nothing was done)")
	}
	return &curev1.BootInstalledOSResponse{NodeId: req.GetNodeId(), Message: "boot override Hdd, Continuous; node was On: ForceRestart"}, nil
}

// nodes boot-os asks the coordinator for that node, prints what the BMC
// was asked (or the BootInstalledOSResponse with -o json), and exits 1
// with the coordinator's refusal of a node with an active run.
func TestNodesBootOS(t *testing.T) {
	c := &bootOSClient{}
	var out bytes.Buffer
	if rc := nodesBootOS(context.Background(), c, "node7", outTable, &out); rc != 0 ||
		out.String() != "node node7 sent to its installed OS: boot override Hdd, Continuous; node was On: ForceRestart\n" {
		t.Errorf("rc %d, out %q", rc, out.String())
	}
	out.Reset()
	if rc := nodesBootOS(context.Background(), c, "node7", outJSON, &out); rc != 0 {
		t.Errorf("-o json: rc %d", rc)
	}
	var resp map[string]any
	if err := json.Unmarshal(out.Bytes(), &resp); err != nil || resp["nodeId"] != "node7" || !strings.Contains(resp["message"].(string), "Hdd") {
		t.Errorf("-o json: %v %s", err, out.String())
	}
	out.Reset()
	errOut := captureStderr(t)
	if rc := nodesBootOS(context.Background(), c, "busy", outTable, &out); rc != 1 || out.Len() != 0 {
		t.Errorf("busy node: rc %d, out %q", rc, out.String())
	}
	if e := errOut(); !strings.Contains(e, "cancel it first") {
		t.Errorf("busy node: stderr %q", e)
	}
	if strings.Join(c.asked, ",") != "node7,node7,busy" {
		t.Errorf("asked for %v", c.asked)
	}
	rc, help, _ := runCaptured(t, "nodes", "boot-os", "--help")
	if rc != 0 || !strings.Contains(help, "curectl nodes boot-os NODE") || !strings.Contains(help, "Exit codes:") {
		t.Errorf("nodes boot-os --help: rc %d\n%s", rc, help)
	}
}
