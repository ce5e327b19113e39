package server

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/protobuf/proto"
)

// An audit log of entries stored at any size (as a coordinator without
// bounds wrote them) reads in pages under the receive limit, each entry cut
// with a count, and the pages chain through next_before_id to the oldest.
func TestAuditLogPages(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "cure.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	ids := make([]string, 3000)
	for i := range ids {
		ids[i] = fmt.Sprintf("node-%d-", i) + strings.Repeat("x", 300)
	}
	for i := 0; i < 40; i++ {
		if err := st.AppendAudit(ctx, store.AuditEntry{Kind: store.AuditOperator, Action: fmt.Sprintf("call-%02d", i), Nodes: ids,
			Detail: strings.Repeat("d", 1<<20)}); err != nil {
			t.Fatal(err)
		}
	}
	o := &OperatorService{Store: st}
	var seen []string
	req := &curev1.ListAuditLogRequest{Limit: 1000}
	for pages := 0; ; pages++ {
		if pages > 40 {
			t.Fatal("the pages do not end")
		}
		resp, err := o.ListAuditLog(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if size := proto.Size(resp); size > auditPageBytes+64<<10 {
			t.Fatalf("page %d: %d bytes", pages, size)
		}
		for _, e := range resp.GetEntries() {
			if len(e.GetNodeIds()) != auditViewNodes+1 || e.GetNodeIds()[auditViewNodes] != fmt.Sprintf("… and %d more", len(ids)-auditViewNodes) ||
				len(e.GetDetail()) > auditViewDetail || !strings.HasSuffix(e.GetDetail(), "bytes]") {
				t.Fatalf("entry %s: %d ids, detail %d bytes", e.GetAction(), len(e.GetNodeIds()), len(e.GetDetail()))
			}
			seen = append(seen, e.GetAction())
		}
		if resp.GetNextBeforeId() == 0 {
			break
		}
		req.BeforeId = resp.GetNextBeforeId()
	}
	if len(seen) != 40 || seen[0] != "call-39" || seen[39] != "call-00" {
		t.Fatalf("read %d entries: %v", len(seen), seen)
	}
	// A limit ends a page too, and says where the next one starts.
	resp, err := o.ListAuditLog(ctx, &curev1.ListAuditLogRequest{Limit: 3})
	if err != nil || len(resp.GetEntries()) != 3 || resp.GetNextBeforeId() != resp.GetEntries()[2].GetId() {
		t.Fatalf("limit 3: %v, %d entries, next %d", err, len(resp.GetEntries()), resp.GetNextBeforeId())
	}
}
