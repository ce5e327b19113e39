package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// auditSize is what the store holds of audit entries: rows and bytes of
// text in them.
func auditSize(t *testing.T, st *store.Store) (rows, bytes int) {
	t.Helper()
	all, err := st.AuditLog(context.Background(), store.AuditFilter{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		bytes += entryBytes(e)
	}
	return len(all), bytes
}

func entryBytes(e store.AuditEntry) int {
	n := len(e.Actor) + len(e.Role) + len(e.Peer) + len(e.Action) + len(e.RunID) + len(e.Result) + len(e.Detail)
	for _, id := range e.Nodes {
		n += len(id)
	}
	return n
}

func ids(n, size int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d-", prefix, i) + strings.Repeat("x", size)
	}
	return out
}

func codeOf(err error) codes.Code { return status.Code(err) }

// TestUnauthenticatedAuditBounded: peers without a certificate, and a
// viewer calling admin methods, send hundreds of calls carrying ~800 KB of
// node ids each (and method names of 64 KiB); the audit log grows by a
// bounded amount, the log summarises, a summary entry counts what was not
// stored one by one, and `curectl audit-log` reads the log, even one that
// holds entries of megabytes stored before these bounds existed.
func TestUnauthenticatedAuditBounded(t *testing.T) {
	s := newSite(t)
	c := s.start()
	st := s.openStore()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rows0, bytes0 := auditSize(t, st)

	anonConn := s.conn(c, nil)
	anon := curev1.NewOperatorServiceClient(anonConn)
	viewerConn := s.conn(c, &s.viewer)
	viewer := curev1.NewOperatorServiceClient(viewerConn)
	big := ids(400, 2000, "node")
	specs := make([]*curev1.NodeSpec, len(big))
	for i, id := range big {
		specs[i] = &curev1.NodeSpec{Id: id, Bmc: &curev1.BMCSpec{Url: "https://10.0.0.1", Username: "u", Password: "p"}}
	}
	sent := 0
	expect := func(what string, err error, want codes.Code) {
		t.Helper()
		sent++
		if codeOf(err) != want {
			t.Fatalf("%s: %v, want %s", what, err, want)
		}
		if m := status.Convert(err).Message(); len(m) > 4096 {
			t.Fatalf("%s: the refusal is %d bytes", what, len(m))
		}
	}
	unknown := "/cure.v1.OperatorService/" + strings.Repeat("Q", 64<<10)
	for i := 0; i < 30; i++ {
		_, err := anon.Provision(ctx, &curev1.ProvisionRequest{NodeIds: big})
		expect("Provision without a certificate", err, codes.Unauthenticated)
		_, err = anon.AddNodes(ctx, &curev1.AddNodesRequest{Nodes: specs, Source: strings.Repeat("s", 100_000)})
		expect("AddNodes without a certificate", err, codes.Unauthenticated)
		_, err = anon.Cancel(ctx, &curev1.CancelRequest{RunIds: big})
		expect("Cancel without a certificate", err, codes.Unauthenticated)
		_, err = anon.ListAuditLog(ctx, &curev1.ListAuditLogRequest{NodeId: big[0] + strings.Repeat("y", 500_000)})
		expect("ListAuditLog without a certificate", err, codes.Unauthenticated)
		err = anonConn.Invoke(ctx, unknown, &curev1.ProvisionRequest{NodeIds: big}, &curev1.ProvisionResponse{})
		expect("an unknown method without a certificate", err, codes.PermissionDenied)
		_, err = viewer.AddNodes(ctx, &curev1.AddNodesRequest{Nodes: specs})
		expect("AddNodes as a viewer", err, codes.PermissionDenied)
		_, err = viewer.Provision(ctx, &curev1.ProvisionRequest{NodeIds: big})
		expect("Provision as a viewer", err, codes.PermissionDenied)
		err = viewerConn.Invoke(ctx, unknown, &curev1.ProvisionRequest{NodeIds: big}, &curev1.ProvisionResponse{})
		expect("an unknown method as a viewer", err, codes.PermissionDenied)
	}
	rows1, bytes1 := auditSize(t, st)
	t.Logf("%d refused calls (%d MB of ids): the audit log grew by %d entries, %d bytes", sent, sent*len(big)*2000>>20, rows1-rows0, bytes1-bytes0)
	// One peer: its burst of refused calls, each bounded (16 ids of 128
	// bytes, 1 KiB of detail, short fields).
	if rows1-rows0 > 12 || bytes1-bytes0 > 12*4096 {
		t.Fatalf("%d refused calls grew the audit log by %d entries, %d bytes", sent, rows1-rows0, bytes1-bytes0)
	}

	// Entries of megabytes, as a coordinator without these bounds stored
	// them: the answer still fits, page by page, each entry cut with a count.
	for i := 0; i < 12; i++ {
		if err := st.AppendAudit(ctx, store.AuditEntry{Kind: store.AuditOperator, Peer: "10.9.9.9", Action: "/cure.v1.OperatorService/Provision",
			Nodes: ids(2000, 1000, "legacy"), Result: "Unauthenticated", Detail: strings.Repeat("d", 1<<20)}); err != nil {
			t.Fatal(err)
		}
	}
	rows2, bytes2 := auditSize(t, st)
	t.Logf("stored before: %d entries, %d MB", rows2, bytes2>>20)
	rc, out, errOut := s.curectl(c, s.admin, "", "audit-log", "--limit", "1000", "-o", "json")
	if rc != 0 {
		t.Fatalf("curectl audit-log -o json: rc %d\n%s", rc, errOut)
	}
	var got curev1.ListAuditLogResponse
	if err := protojson.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("curectl audit-log -o json: %v", err)
	}
	if len(got.GetEntries()) != rows2 {
		t.Fatalf("curectl audit-log read %d entries of %d", len(got.GetEntries()), rows2)
	}
	var legacy, refused int
	for _, e := range got.GetEntries() {
		if e.GetPeer() == "10.9.9.9" {
			legacy++
			if n := len(e.GetNodeIds()); n != 257 || e.GetNodeIds()[256] != "… and 1744 more" || !strings.HasSuffix(e.GetDetail(), "bytes]") {
				t.Fatalf("a legacy entry: %d ids (last %q), detail ends %q", n, e.GetNodeIds()[n-1], e.GetDetail()[len(e.GetDetail())-20:])
			}
		}
		if e.GetResult() == codes.Unauthenticated.String() || e.GetResult() == codes.PermissionDenied.String() {
			refused++
		}
	}
	if legacy != 12 || refused < 10 {
		t.Fatalf("curectl audit-log: %d legacy entries, %d refused calls", legacy, refused)
	}
	rc, out, errOut = s.curectl(c, s.viewer, "", "audit-log")
	if rc != 0 || !strings.Contains(out, "Unauthenticated") || !strings.Contains(out, "PermissionDenied") {
		t.Fatalf("curectl audit-log as a viewer: rc %d\n%s\n%s", rc, out, errOut)
	}

	// Stopped, the coordinator writes what its budgets held back: one
	// summary naming the count and the peer.
	c.stop(t)
	held, err := st.AuditLog(ctx, store.AuditFilter{Kind: store.AuditSecurity, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	heldCount := 0
	var summaries []string
	for _, e := range held {
		if e.Action != "entries_held" {
			continue
		}
		summaries = append(summaries, e.Detail)
		if _, rest, ok := strings.Cut(e.Detail, "operator_denied×"); ok && strings.Contains(rest, "127.0.0.1×") {
			var n int
			fmt.Sscanf(rest, "%d", &n)
			heldCount += n
		}
	}
	if stored := rows1 - rows0; heldCount != sent-stored {
		t.Fatalf("summaries count %d refused calls from 127.0.0.1, want the %d not stored one by one: %q", heldCount, sent-stored, summaries)
	}
	// The log summarises as well: a line per stored entry and per
	// interval, not per refused call.
	logText := s.coordinatorLog()
	if n := strings.Count(logText, "\n"); n > 60 {
		t.Fatalf("the coordinator logged %d lines for %d refused calls", n, sent)
	}
	if len(logText) > 256<<10 {
		t.Fatalf("the coordinator logged %d bytes", len(logText))
	}
	if !strings.Contains(logText, `msg="refused (summary)" listener=audit reason=operator_denied`) {
		t.Fatalf("no refusal summary in the log:\n%s", logText)
	}
}

// TestNoSecretInURLs: a BMC URL with user:password@ is refused by every way
// a node comes in (the nodes file at start, YAML and CSV; curectl nodes add
// and import; the AddNodes API, with any role or none), naming file, line
// and field; the password then appears in no log line, audit entry or API
// answer.
func TestNoSecretInURLs(t *testing.T) {
	rb := make([]byte, 6)
	rand.Read(rb)
	pw := "Zq7pw" + hex.EncodeToString(rb)
	urls := []string{
		"https://admin:" + pw + "@10.0.0.2",
		"https://admin:" + pw + "@10.0.0.2:443/redfish/v1",
		"https//admin:" + pw + "@10.0.0.2",
		"admin:" + pw + "@10.0.0.2",
		"https://admin:" + pw + "/x@10.0.0.2",
		"https://" + pw + "@10.0.0.2",
	}
	s := newSite(t)
	write := func(name, text string) string {
		p := filepath.Join(s.root, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noSecret := func(what, text string) {
		t.Helper()
		if strings.Contains(text, pw) {
			t.Errorf("%s shows the password:\n%s", what, text)
		}
	}

	// The nodes file of a coordinator's start: refused before anything runs.
	yamlFile := write("bad.yaml", "nodes:\n  - id: n2\n    macs: [52:54:00:00:00:02]\n    bmc:\n      url: "+urls[0]+"\n      username: admin\n      password: p\n")
	csvFile := write("bad.csv", "id,bmc_url,bmc_username,bmc_password,macs,sku,hostname,serial\nn2,"+urls[2]+",admin,p,52:54:00:00:00:02,,,\n")
	for file, where := range map[string]string{yamlFile: yamlFile + ":5:12: nodes[0].bmc.url: ", csvFile: csvFile + ":2:4: bmc_url: "} {
		rc, out := runMain(t, s.root, s.args("--nodes", file)...)
		if rc != 1 || !strings.Contains(out, where) || !strings.Contains(out, "credentials in the URL") {
			t.Errorf("coordinator with %s: rc %d, want 1 naming %q:\n%s", file, rc, where, out)
		}
		noSecret("the refused coordinator's log", out)
	}

	good := write("nodes.yaml", "nodes:\n  - id: n1\n    macs: [52:54:00:00:00:01]\n    sku: qemu-nvme\n    bmc: {url: https://10.0.0.1, username: admin, password: p1, insecure: true}\n")
	c := s.start("--nodes", good)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// curectl: from flags, a snippet, a nodes file of each format.
	snippet := write("snippet.yaml", "id: n2\nmacs: [52:54:00:00:00:02]\nbmc: {url: \""+urls[4]+"\", username: admin, password: p}\n")
	for _, args := range [][]string{
		{"nodes", "add", "--id", "n2", "--bmc-url", urls[1], "--bmc-user", "admin", "--bmc-password-stdin", "--mac", "52:54:00:00:00:02"},
		{"nodes", "add", "-f", snippet},
		{"nodes", "import", yamlFile},
		{"nodes", "import", csvFile},
	} {
		rc, out, errOut := s.curectl(c, s.admin, "p\n", args...)
		if rc != 2 || !strings.Contains(errOut, "credentials in the URL") || !strings.Contains(errOut, "url") {
			t.Errorf("curectl %q: rc %d, want 2 naming the URL field:\n%s%s", args, rc, out, errOut)
		}
		noSecret(fmt.Sprintf("curectl %q", args), out+errOut)
	}

	// The API itself, past curectl: refused with the node and field named.
	specs := make([]*curev1.NodeSpec, len(urls))
	for i, u := range urls {
		specs[i] = &curev1.NodeSpec{Id: fmt.Sprintf("n%d", i+2), Macs: []string{fmt.Sprintf("52:54:00:00:01:%02x", i)},
			Bmc: &curev1.BMCSpec{Url: u, Username: "admin", Password: "p", Insecure: true}}
	}
	var answers []string
	answer := func(what string, m proto.Message, err error) {
		t.Helper()
		if err != nil {
			answers = append(answers, what+": "+status.Convert(err).Message())
		} else {
			answers = append(answers, what+": "+protojson.Format(m))
		}
	}
	for _, who := range []*pki.OperatorCert{&s.admin, &s.viewer, nil} {
		resp, err := s.client(c, who).AddNodes(ctx, &curev1.AddNodesRequest{Nodes: specs, Source: "api"})
		answer("AddNodes", resp, err)
		if who == &s.admin {
			msg := status.Convert(err).Message()
			if codeOf(err) != codes.InvalidArgument || !strings.Contains(msg, "nodes[0] (n2): bmc.url: ") || !strings.Contains(msg, fmt.Sprintf("%d problem(s)", len(urls))) {
				t.Errorf("AddNodes with userinfo URLs: %v", err)
			}
		} else if err == nil {
			t.Error("AddNodes without the admin role was accepted")
		}
	}
	// Every answer an operator can read.
	admin := s.client(c, &s.admin)
	ln, err := admin.ListNodes(ctx, &curev1.ListNodesRequest{})
	answer("ListNodes", ln, err)
	if len(ln.GetNodes()) != 1 {
		t.Fatalf("nodes after the refused imports: %v", ln.GetNodes())
	}
	sn, err := admin.ShowNode(ctx, &curev1.ShowNodeRequest{NodeId: "n1"})
	answer("ShowNode", sn, err)
	fl, err := admin.Fleet(ctx, &curev1.FleetRequest{})
	answer("Fleet", fl, err)
	al, err := admin.ListAuditLog(ctx, &curev1.ListAuditLogRequest{Limit: 1000})
	answer("ListAuditLog", al, err)
	tb, err := admin.TimeBuckets(ctx, &curev1.TimeBucketsRequest{})
	answer("TimeBuckets", tb, err)
	for _, args := range [][]string{{"audit-log", "--limit", "1000", "-o", "wide"}, {"audit-log", "-o", "json"}, {"nodes", "-o", "json"}, {"nodes", "show", "n1"}} {
		rc, out, errOut := s.curectl(c, s.viewer, "", args...)
		if rc != 0 {
			t.Errorf("curectl %q: rc %d\n%s", args, rc, errOut)
		}
		answers = append(answers, out+errOut)
	}
	for _, a := range answers {
		noSecret("an answer", a)
	}
	// The audit log as stored, and the coordinator's log.
	c.stop(t)
	all, err := s.openStore().AuditLog(ctx, store.AuditFilter{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	addNodes := 0
	for _, e := range all {
		noSecret("audit entry", fmt.Sprintf("%+v", e))
		if e.Action == curev1.OperatorService_AddNodes_FullMethodName {
			addNodes++
		}
	}
	if addNodes < 3 {
		t.Errorf("%d AddNodes calls in the audit log, want the 3 refused ones", addNodes)
	}
	noSecret("the coordinator log", s.coordinatorLog())
}

// stateFiles lists the state dir, each file with its content hash, without
// the database (its pages change with every audit entry; what it holds is
// compared through the API).
func stateFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if strings.HasPrefix(d.Name(), "cure.db") {
			return nil
		}
		if d.Name() == "state.lock" { // the holder's pid
			out = append(out, rel)
			return nil
		}
		if d.IsDir() {
			out = append(out, rel+"/")
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out = append(out, rel+" "+hex.EncodeToString(sum[:8]))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// inventoryView is the inventory as the API shows it.
func inventoryView(t *testing.T, ctx context.Context, c curev1.OperatorServiceClient) string {
	t.Helper()
	ln, err := c.ListNodes(ctx, &curev1.ListNodesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	view := protojson.Format(ln)
	for _, n := range ln.GetNodes() {
		d, err := c.ShowNode(ctx, &curev1.ShowNodeRequest{NodeId: n.GetNodeId()})
		if err != nil {
			t.Fatal(err)
		}
		view += protojson.Format(d)
	}
	return view
}

// TestImportAllOrNothing: node imports that fail, early or late (the
// store refusing after the CA bundles were kept), through the API or
// curectl, at run time or at the coordinator's start, leave the inventory
// and the state dir as they were; their error lists and audit entries are
// bounded however many nodes fail.
func TestImportAllOrNothing(t *testing.T) {
	s := newSite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const mac1 = "52:54:00:00:00:01"
	nodesFile := filepath.Join(s.root, "nodes.yaml")
	os.WriteFile(nodesFile, []byte("nodes:\n  - id: n1\n    macs: ["+mac1+"]\n    sku: qemu-nvme\n    bmc: {url: https://10.0.0.1, username: admin, password: p1, insecure: true}\n"), 0o600)
	c := s.start("--nodes", nodesFile)
	admin := s.client(c, &s.admin)
	otherCA, err := pki.EnsureCA(filepath.Join(s.root, "bmc-pki"))
	if err != nil {
		t.Fatal(err)
	}
	files0, inv0 := stateFiles(t, s.state), inventoryView(t, ctx, admin)
	unchanged := func(what string) {
		t.Helper()
		if files := stateFiles(t, s.state); !slices.Equal(files, files0) {
			t.Errorf("%s changed the state dir:\nbefore %q\nafter  %q", what, files0, files)
		}
		if inv := inventoryView(t, ctx, admin); inv != inv0 {
			t.Errorf("%s changed the inventory:\nbefore %s\nafter  %s", what, inv0, inv)
		}
	}
	withCA := &curev1.NodeSpec{Id: "n2", Macs: []string{"52:54:00:00:00:02"}, Sku: "qemu-nvme",
		Bmc: &curev1.BMCSpec{Url: "https://10.0.0.2", Username: "admin", Password: "p2", CaPem: otherCA}}

	// A problem found after a node with a CA bundle passed its checks.
	_, err = admin.AddNodes(ctx, &curev1.AddNodesRequest{Nodes: []*curev1.NodeSpec{withCA,
		{Id: "n3", Macs: []string{"not-a-mac"}, Bmc: &curev1.BMCSpec{Url: "https://10.0.0.3", Username: "admin", Password: "p3", Insecure: true}}}})
	if codeOf(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "nodes[1] (n3): macs[0]") {
		t.Fatalf("import with a bad MAC: %v", err)
	}
	unchanged("an import refused by its checks")

	// Every check passes; the store refuses (n3 takes n1's MAC) after the
	// CA bundle was written: it goes again, with bmc-ca/ that it made.
	conflict := &curev1.NodeSpec{Id: "n3", Macs: []string{mac1}, Bmc: &curev1.BMCSpec{Url: "https://10.0.0.3", Username: "admin", Password: "p3", Insecure: true}}
	_, err = admin.AddNodes(ctx, &curev1.AddNodesRequest{Nodes: []*curev1.NodeSpec{withCA, conflict}, Replace: true})
	if codeOf(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "already belongs to node n1") {
		t.Fatalf("import that the store refuses: %v", err)
	}
	unchanged("an import refused by the store")

	// The same through curectl nodes import, with the bundle as a caFile.
	caFile := filepath.Join(s.root, "bmc-pki", pki.CACertFile)
	importFile := filepath.Join(s.root, "import.yaml")
	os.WriteFile(importFile, []byte("nodes:\n"+
		"  - {id: n2, macs: [52:54:00:00:00:02], sku: qemu-nvme, bmc: {url: https://10.0.0.2, username: admin, password: p2, caFile: "+caFile+"}}\n"+
		"  - {id: n3, macs: ["+mac1+"], bmc: {url: https://10.0.0.3, username: admin, password: p3, insecure: true}}\n"), 0o600)
	rc, out, errOut := s.curectl(c, s.admin, "", "nodes", "import", importFile)
	if rc != 1 || !strings.Contains(errOut, "already belongs to node n1") || !strings.Contains(errOut, "nothing was written") {
		t.Fatalf("curectl nodes import refused by the store: rc %d\n%s%s", rc, out, errOut)
	}
	unchanged("curectl nodes import refused by the store")

	// 10,000 nodes, each with a problem: the error counts them all and lists
	// 50; the audit entry of the call is bounded too.
	many := make([]*curev1.NodeSpec, 10000)
	for i := range many {
		many[i] = &curev1.NodeSpec{Id: fmt.Sprintf("bulk-%05d", i), Macs: []string{"bad"}, Bmc: &curev1.BMCSpec{Url: "https://10.0.1.1", Username: "u", Password: "p", Insecure: true}}
	}
	_, err = admin.AddNodes(ctx, &curev1.AddNodesRequest{Nodes: many, Source: "bulk.yaml"})
	msg := status.Convert(err).Message()
	if codeOf(err) != codes.InvalidArgument || !strings.Contains(msg, "10000 problem(s), nothing was written") || !strings.Contains(msg, "… and 9950 more") || len(msg) > 32<<10 {
		t.Fatalf("import of 10,000 bad nodes: %d bytes, %.300s", len(msg), msg)
	}
	unchanged("an import of 10,000 bad nodes")
	bulkFile := filepath.Join(s.root, "bulk.csv")
	var csv strings.Builder
	csv.WriteString("id,bmc_url,bmc_username,bmc_password,macs,sku,hostname,serial\n")
	for i := 0; i < 10000; i++ {
		fmt.Fprintf(&csv, "bulk-%05d,https://10.0.1.1,u,p,bad,,,\n", i)
	}
	os.WriteFile(bulkFile, []byte(csv.String()), 0o600)
	rc, _, errOut = s.curectl(c, s.admin, "", "nodes", "import", bulkFile)
	if rc != 2 || !strings.Contains(errOut, "10000 problem(s)") || !strings.Contains(errOut, "lists them all") || len(errOut) > 32<<10 {
		t.Fatalf("curectl nodes import of 10,000 bad lines: rc %d, %d bytes: %.300s", rc, len(errOut), errOut)
	}

	// The control: the same node with its bundle goes in, and the bundle
	// is kept in the state dir.
	if _, err := admin.AddNodes(ctx, &curev1.AddNodesRequest{Nodes: []*curev1.NodeSpec{withCA}}); err != nil {
		t.Fatalf("import of n2: %v", err)
	}
	kept, _ := filepath.Glob(filepath.Join(s.state, "bmc-ca", "sha256-*.pem"))
	if len(kept) != 1 {
		t.Fatalf("CA bundles kept after a good import: %v", kept)
	}
	c.stop(t)

	st := s.openStore()
	entries, err := st.AuditLog(ctx, store.AuditFilter{Kind: store.AuditOperator, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Action == curev1.OperatorService_AddNodes_FullMethodName && strings.Contains(e.Detail, "nodes=10000") {
			if n := entryBytes(e); n > 160<<10 || len(e.Nodes) != 1025 || e.Nodes[1024] != "… and 8976 more" {
				t.Fatalf("the audit entry of the 10,000-node import: %d bytes, %d ids (last %q)", n, len(e.Nodes), e.Nodes[len(e.Nodes)-1])
			}
		}
	}
	st.Close()

	// At the coordinator's start: a nodes file whose import the store
	// refuses (n4 takes n2's MAC) leaves everything as it was.
	files0 = stateFiles(t, s.state)
	os.WriteFile(nodesFile, []byte("nodes:\n  - {id: n1, macs: ["+mac1+"], sku: qemu-nvme, bmc: {url: https://10.0.0.9, username: admin, password: p9, insecure: true}}\n"+
		"  - {id: n4, macs: [52:54:00:00:00:02], bmc: {url: https://10.0.0.4, username: admin, password: p4, insecure: true}}\n"), 0o600)
	rc, startOut := runMain(t, s.root, s.args("--nodes", nodesFile)...)
	if rc != 1 || !strings.Contains(startOut, "already belongs to node n2") {
		t.Fatalf("coordinator start with a conflicting nodes file: rc %d\n%s", rc, startOut)
	}
	if files := stateFiles(t, s.state); !slices.Equal(files, files0) {
		t.Errorf("the refused start changed the state dir:\nbefore %q\nafter  %q", files0, files)
	}
	c = s.start()
	admin = s.client(c, &s.admin)
	inv := inventoryView(t, ctx, admin)
	if !strings.Contains(inv, "https://10.0.0.1") || strings.Contains(inv, "10.0.0.9") || strings.Contains(inv, `"n4"`) {
		t.Fatalf("the refused start's import changed the inventory:\n%s", inv)
	}
}
