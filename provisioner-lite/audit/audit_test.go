package audit

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/store"
)

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "cure.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func entrySize(e store.AuditEntry) int {
	n := len(e.Actor) + len(e.Role) + len(e.Peer) + len(e.Action) + len(e.RunID) + len(e.Result) + len(e.Detail)
	for _, id := range e.Nodes {
		n += len(id)
	}
	return n
}

func TestClipBounds(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	ids := make([]string, 5000)
	for i := range ids {
		ids[i] = big[:1000]
	}
	e := Clip(store.AuditEntry{Actor: big, Role: big, Peer: big, Action: "/x/" + big, Nodes: ids, RunID: big, Result: big,
		Detail: "bmc https://admin:Zq7-pw@10.0.0.1 refused " + big}, 16, 1024)
	if n := entrySize(e); n > 16*128+64+6*128+1024 {
		t.Fatalf("clipped entry holds %d bytes", n)
	}
	if len(e.Nodes) != 17 || e.Nodes[16] != "… and 4984 more" {
		t.Fatalf("nodes: %d, last %q", len(e.Nodes), e.Nodes[len(e.Nodes)-1])
	}
	if strings.Contains(e.Detail, "Zq7-pw") || !strings.Contains(e.Detail, "https://REDACTED@10.0.0.1") || !strings.Contains(e.Detail, "bytes]") {
		t.Fatalf("detail %q", e.Detail[:200])
	}
	if c := Clip(store.AuditEntry{Actor: "ada", Nodes: []string{"a", "b"}, Detail: "ok"}, 16, 1024); c.Actor != "ada" || len(c.Nodes) != 2 || c.Detail != "ok" {
		t.Fatalf("a small entry changed: %+v", c)
	}
}

// A peer refused thousands of times with oversized ids writes its budget
// of bounded entries, another peer still gets its own, and one summary
// says how many were held, of which kind, from whom.
func TestDeniedBudgetPerPeer(t *testing.T) {
	st := openStore(t)
	var logBuf bytes.Buffer
	rec := New(st, slog.New(slog.NewTextHandler(&logBuf, nil)), 0)
	ctx := context.Background()
	ids := []string{strings.Repeat("n", 100_000), strings.Repeat("m", 100_000)}
	for i := 0; i < 2000; i++ {
		rec.Denied(ctx, store.AuditEntry{Peer: "10.0.0.9", Action: "/cure.v1.OperatorService/Provision", Nodes: ids,
			Result: "Unauthenticated", Detail: strings.Repeat("d", 100_000)})
	}
	rec.Denied(ctx, store.AuditEntry{Peer: "10.0.0.7", Action: "/cure.v1.OperatorService/AddNodes", Result: "PermissionDenied"})
	rec.Flush(ctx)
	all, err := st.AuditLog(ctx, store.AuditFilter{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	var from9, from7, bytes9 int
	var summary *store.AuditEntry
	for i, e := range all {
		switch {
		case e.Action == Held:
			summary = &all[i]
		case e.Peer == "10.0.0.9":
			from9++
			bytes9 += entrySize(e)
		case e.Peer == "10.0.0.7":
			from7++
		}
	}
	if from9 != 10 || from7 != 1 {
		t.Fatalf("entries stored: %d from the flooding peer (want its burst of 10), %d from the other (want 1)", from9, from7)
	}
	if bytes9 > 10*(16*128+6*128+1024+64) {
		t.Fatalf("the flooding peer's entries hold %d bytes", bytes9)
	}
	if summary == nil || summary.Peer != "10.0.0.9" || !strings.Contains(summary.Detail, "1990 refused calls") ||
		!strings.Contains(summary.Detail, OperatorDenied+"×1990") || !strings.Contains(summary.Detail, "10.0.0.9×1990") {
		t.Fatalf("summary: %+v", summary)
	}
	// The log summarises too: far fewer lines than refusals.
	if n := strings.Count(logBuf.String(), "\n"); n > 20 {
		t.Fatalf("%d log lines for 2001 refused calls:\n%s", n, logBuf.String()[:2000])
	}
	rec.Flush(ctx) // nothing held since: no second summary
	if again, _ := st.AuditLog(ctx, store.AuditFilter{Limit: 10000}); len(again) != len(all) {
		t.Fatalf("an empty flush wrote %d entries", len(again)-len(all))
	}
}

// A runner-side peer that varies what it claims to be gets past the
// per-(event, claim, peer) window, not past its budget.
func TestSecurityBudgetPerPeer(t *testing.T) {
	st := openStore(t)
	rec := New(st, slog.New(slog.DiscardHandler), time.Hour)
	ctx := context.Background()
	for i := 0; i < 500; i++ {
		rec.Security(ctx, store.AuditEntry{Actor: fmt.Sprintf("claimed-%d", i), Peer: "10.0.0.9", Action: BootTokenRejected, Result: "refused"})
	}
	rec.Security(ctx, store.AuditEntry{Actor: "n1", Peer: "10.0.0.8", Action: BootWindowContested, Result: "refused"})
	rec.Flush(ctx)
	all, _ := st.AuditLog(ctx, store.AuditFilter{Kind: store.AuditSecurity, Limit: 10000})
	count := map[string]int{}
	for _, e := range all {
		count[e.Action+"/"+e.Peer]++
	}
	if count[BootTokenRejected+"/10.0.0.9"] != 20 || count[BootWindowContested+"/10.0.0.8"] != 1 || count[Held+"/10.0.0.9"] != 1 {
		t.Fatalf("stored: %v", count)
	}
}
