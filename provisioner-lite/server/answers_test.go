package server

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/protobuf/proto"
)

// A run whose runner stored thousands of verdicts of the longest text it
// may: the report stays under a client's 4 MiB receive limit, keeps every
// verdict that is not MATCH, and counts what it left out.
func TestReportStaysUnderReceiveLimit(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "cure.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	if _, _, err := st.PutNodes(ctx, []store.Node{{ID: "n1", BMCURL: "https://10.0.0.1", BMCUser: "u", MACs: []string{"52:54:00:00:00:01"}}}, false); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateRun(ctx, store.Run{ID: "r1", NodeID: "n1", Mode: "audit", Status: runstate.RunRunning}); err != nil {
		t.Fatal(err)
	}
	const n = 1500
	long := func(c byte, size int) string { return strings.Repeat(string(c), size) }
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				status := curev1.VerdictStatus_MATCH.String()
				if i%100 == 7 {
					status = curev1.VerdictStatus_DRIFT.String()
				}
				if err := st.PutVerdict(ctx, store.Verdict{RunID: "r1", Component: fmt.Sprintf("gpu%04d", i), Check: long('c', maxName), Status: status,
					Observed: long('o', maxValue), Expected: long('e', maxValue), Message: long('m', maxMessage)}); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	r, err := st.GetRun(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := BuildReport(ctx, st, r)
	if err != nil {
		t.Fatal(err)
	}
	size := proto.Size(rep)
	drift := 0
	for _, v := range rep.GetVerdicts() {
		if v.GetStatus() == curev1.VerdictStatus_DRIFT {
			drift++
		}
	}
	t.Logf("report of %d verdicts: %d kept, %d omitted, %d bytes", n, len(rep.GetVerdicts()), rep.GetVerdictsOmitted(), size)
	if size > 4<<20-64<<10 || len(rep.GetVerdicts())+int(rep.GetVerdictsOmitted()) != n || rep.GetVerdictsOmitted() == 0 || drift != n/100 {
		t.Fatalf("report: %d bytes, %d verdicts kept (%d DRIFT of %d), %d omitted", size, len(rep.GetVerdicts()), drift, n/100, rep.GetVerdictsOmitted())
	}
	// Kept verdicts are in their stored order.
	for i := 1; i < len(rep.GetVerdicts()); i++ {
		if rep.GetVerdicts()[i-1].GetComponent() >= rep.GetVerdicts()[i].GetComponent() {
			t.Fatalf("verdicts out of order at %d: %s, %s", i, rep.GetVerdicts()[i-1].GetComponent(), rep.GetVerdicts()[i].GetComponent())
		}
	}
}

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
