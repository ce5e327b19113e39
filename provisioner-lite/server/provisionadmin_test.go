package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/pool"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A provision erases the node's disks (sed_revert, os_install): on a node
// in the day-2 pool it takes the node from its tenant, so it needs the
// admin role and the node confirmed by id, like a wipe; a node outside the
// pool is provisioned by an operator as before.
func TestProvisionInServiceNeedsAdmin(t *testing.T) {
	h := newHostile(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	op, admin := h.operatorClient("olga", pki.RoleOperator), h.operatorClient("ada", pki.RoleAdmin)
	for _, s := range []pool.State{pool.InService, pool.Accepting} {
		t.Run(string(s), func(t *testing.T) {
			if _, err := h.st.SetNodePool(ctx, store.NodePool{NodeID: nodeA.id, State: string(s), Actor: "test"}); err != nil {
				t.Fatal(err)
			}
			before := h.starts.n()
			prov := &curev1.ProvisionRequest{NodeIds: []string{nodeA.id}, Mode: curev1.Mode_MODE_PROVISION}
			_, err := op.Provision(ctx, prov)
			if st := status.Convert(err); st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), "needs admin") ||
				!strings.Contains(st.Message(), nodeA.id+" ("+string(s)+")") {
				t.Fatalf("operator provision of a %s node: %v, want PermissionDenied naming the node, its state and the admin role", s, err)
			}
			// Confirmation does not stand in for the role.
			confirmed := &curev1.ProvisionRequest{NodeIds: []string{nodeA.id}, Mode: curev1.Mode_MODE_PROVISION, ConfirmNodeIds: []string{nodeA.id}}
			if _, err := op.Provision(ctx, confirmed); status.Code(err) != codes.PermissionDenied {
				t.Fatalf("operator provision, confirmed: %v, want PermissionDenied", err)
			}
			// Neither does a wipe by an operator, nor a selector.
			if _, err := op.Provision(ctx, &curev1.ProvisionRequest{Selector: map[string]string{"sku": ""}, Mode: curev1.Mode_MODE_PROVISION}); status.Code(err) != codes.PermissionDenied {
				t.Fatalf("operator provision by selector: %v, want PermissionDenied", err)
			}
			_, err = admin.Provision(ctx, prov)
			if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "not confirmed: "+nodeA.id) {
				t.Fatalf("admin provision without confirmation: %v, want FailedPrecondition naming the node", err)
			}
			// Confirming another node confirms nothing about this one.
			other := &curev1.ProvisionRequest{NodeIds: []string{nodeA.id}, Mode: curev1.Mode_MODE_PROVISION, ConfirmNodeIds: []string{nodeB.id}}
			if _, err := admin.Provision(ctx, other); status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("admin provision confirming another node: %v, want FailedPrecondition", err)
			}
			if _, err := admin.Provision(ctx, &curev1.ProvisionRequest{NodeIds: []string{nodeA.id}, Mode: curev1.Mode_MODE_WIPE}); status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("admin wipe of a %s node without confirmation: %v, want FailedPrecondition", s, err)
			}
			if n := h.starts.n(); n != before {
				t.Fatalf("%d runs started by refused calls", n-before)
			}
			if _, err := admin.Provision(ctx, confirmed); err != nil {
				t.Fatalf("admin provision, confirmed: %v", err)
			}
			if got := h.starts.calls; len(got) != before+1 || got[before] != nodeA.id+":provision" {
				t.Fatalf("runs started: %v", got)
			}
		})
	}
	// Node B is not in the pool: an operator provisions it, unconfirmed.
	if _, err := op.Provision(ctx, &curev1.ProvisionRequest{NodeIds: []string{nodeB.id}, Mode: curev1.Mode_MODE_PROVISION}); err != nil {
		t.Fatalf("operator provision of a node outside the pool: %v", err)
	}
	// A run that does not erase (diagnostic) is the pool's to admit, not
	// this rule's: an accepting node takes it from an operator.
	if _, err := op.Provision(ctx, &curev1.ProvisionRequest{NodeIds: []string{nodeA.id}, Mode: curev1.Mode_MODE_DIAGNOSTIC, Manifest: "rma-quick"}); err != nil {
		t.Fatalf("operator diagnostic of an accepting node: %v", err)
	}
}
