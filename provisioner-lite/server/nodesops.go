package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/inventory"
	"github.com/cure-oss/cure/provisioner-lite/nodes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxAddNodes bounds one AddNodes call (a site's whole inventory fits).
const maxAddNodes = 20000

// maxProblems bounds the problems an AddNodes error lists (the count says
// how many there are): a 20,000-node import with errors must not answer,
// log and audit megabytes.
const maxProblems = 50

// AddNodes adds nodes to the inventory (or, with replace, updates existing
// ones) without a restart. Every node is checked as the start-time import
// checks it (nodes.Check, with the SKU looked up in the manifests); nothing
// is written unless every node passes, and the write is all or nothing:
// the nodes in one transaction, and the CA bundles kept in the state dir
// only once every node passed, removed again if the transaction fails.
func (o *OperatorService) AddNodes(ctx context.Context, req *curev1.AddNodesRequest) (*curev1.AddNodesResponse, error) {
	specs := req.GetNodes()
	switch {
	case len(specs) == 0:
		return nil, status.Error(codes.InvalidArgument, "no nodes")
	case len(specs) > maxAddNodes:
		return nil, status.Errorf(codes.InvalidArgument, "%d nodes in one call: at most %d", len(specs), maxAddNodes)
	}
	var problems []string
	ns := make([]store.Node, 0, len(specs))
	var bundles []caBundle
	ids := map[string]int{}
	for i, spec := range specs {
		where := fmt.Sprintf("nodes[%d]", i)
		if id := spec.GetId(); id != "" {
			where = fmt.Sprintf("nodes[%d] (%s)", i, textsafe.BoundedLine(textsafe.RedactURL(id), 64))
			if first, dup := ids[id]; dup {
				problems = append(problems, fmt.Sprintf("%s: id: duplicate id (first at nodes[%d])", where, first))
				continue
			}
			ids[id] = i
		}
		n, ca, err := o.nodeFromSpec(spec)
		if err == nil {
			err = nodes.Check(&n, nodes.WithSKUCheck(o.KnownSKU), nodes.WithCABundleChecked())
		}
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				problems = append(problems, where+": "+line)
			}
			continue
		}
		if ca.pem != nil {
			bundles = append(bundles, ca)
		}
		ns = append(ns, n)
	}
	if len(problems) > 0 {
		return nil, status.Errorf(codes.InvalidArgument, "%d problem(s), nothing was written:\n%s", len(problems),
			textsafe.JoinFirst(problems, maxProblems, 512, "\n"))
	}
	// One import at a time: a rollback removes only the bundles this call
	// created, and no other call may come to rely on one meanwhile.
	o.importMu.Lock()
	defer o.importMu.Unlock()
	undo, err := o.keepBundles(bundles)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "%v (nothing was written)", err)
	}
	added, updated, err := o.Store.PutNodes(ctx, ns, req.GetReplace())
	if err != nil {
		undo()
	}
	switch {
	case errors.Is(err, store.ErrNodeExists):
		return nil, status.Errorf(codes.AlreadyExists, "%v (nothing was written)", err)
	case err != nil && strings.Contains(err.Error(), "already belongs to node"):
		return nil, status.Errorf(codes.FailedPrecondition, "%v (nothing was written)", err)
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "%v (nothing was written)", err)
	}
	for _, n := range ns {
		if n.BMCInsecure {
			o.log().Warn("BMC TLS verification is off for this node, as the operator's inventory says: a peer on the BMC network can read its password",
				"node", n.ID, "bmc", textsafe.RedactURL(n.BMCURL))
		}
	}
	o.wakeRuns(ctx, updated)
	return &curev1.AddNodesResponse{Added: added, Updated: updated}, nil
}

// wakeRuns tells the active runs of the nodes an import updated that their
// node changed (the store's run signal): a run waiting for CURE reads the
// node's MACs again at once, and re-arms the boot if they changed.
func (o *OperatorService) wakeRuns(ctx context.Context, updated []string) {
	if len(updated) == 0 {
		return
	}
	runs, err := o.Store.ActiveRuns(ctx)
	if err != nil {
		o.log().Warn("nodes updated: their active runs not told (a wait for CURE reads the inventory again within 30 s)", "err", err)
		return
	}
	for _, r := range runs {
		if slices.Contains(updated, r.NodeID) {
			o.Store.Signals().Notify(r.ID)
		}
	}
}

// caBundle is a BMC CA bundle an AddNodes call sent, checked, and the file
// it will be kept in.
type caBundle struct {
	path string
	pem  []byte
}

// nodeFromSpec turns an API node into a store node, and its CA bundle (if
// any) into the file it is to be kept in (under BMCCADir, named by its
// content hash, so a failed call never changes the bundle of a node that
// exists); nothing is written here. The API takes literal secrets only: a
// password reference would make the coordinator read its own environment
// or files and send them to a BMC URL the caller chose.
func (o *OperatorService) nodeFromSpec(spec *curev1.NodeSpec) (store.Node, caBundle, error) {
	b := spec.GetBmc()
	n := store.Node{
		ID: spec.GetId(), SKU: spec.GetSku(), Hostname: spec.GetHostname(), SystemSerial: spec.GetSerial(),
		MACs: slices.Clone(spec.GetMacs()), Labels: cloneMap(spec.GetLabels()), PSIDs: cloneMap(spec.GetPsids()), EKSHA256: spec.GetEkSha256(),
		Cabling: nodes.CablingFromProto(spec.GetCabling()),
		BMCURL:  b.GetUrl(), BMCUser: b.GetUsername(), BMCPassword: b.GetPassword(), BMCFingerprint: b.GetFingerprint(), BMCInsecure: b.GetInsecure(),
	}
	if n.EKSHA256 != "" {
		if err := nodes.CheckEKSHA256(n.EKSHA256); err != nil {
			return store.Node{}, caBundle{}, fmt.Errorf("ek_sha256: %w", err)
		}
	}
	pem := b.GetCaPem()
	if len(pem) == 0 {
		return n, caBundle{}, nil
	}
	if o.BMCCADir == "" {
		return store.Node{}, caBundle{}, errors.New("bmc.caFile: this coordinator keeps no CA bundles sent through the API; use fingerprint")
	}
	if _, err := nodes.ParseCABundle("bmc.caFile", pem); err != nil {
		return store.Node{}, caBundle{}, err
	}
	sum := sha256.Sum256(pem)
	n.BMCCAFile = filepath.Join(o.BMCCADir, "sha256-"+hex.EncodeToString(sum[:])+".pem")
	return n, caBundle{path: n.BMCCAFile, pem: pem}, nil
}

// keepBundles writes the bundles that are not in BMCCADir yet; undo
// removes what it created (the files, and the directory if it made it),
// leaving the state dir as it found it. A write that fails is undone at
// once.
func (o *OperatorService) keepBundles(bundles []caBundle) (undo func(), err error) {
	var created []string
	madeDir := false
	undo = func() {
		for _, p := range created {
			if err := os.Remove(p); err != nil {
				o.log().Warn("a CA bundle of a failed node import was not removed", "file", p, "err", err)
			}
		}
		if madeDir {
			_ = os.Remove(o.BMCCADir) // only if empty: another bundle may have landed
		}
	}
	if len(bundles) == 0 {
		return undo, nil
	}
	if _, err := os.Stat(o.BMCCADir); errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir(o.BMCCADir, 0o700); err != nil {
			return nil, fmt.Errorf("bmc.caFile: %w", err)
		}
		madeDir = true
	}
	for _, b := range bundles {
		if _, err := os.Stat(b.path); err == nil {
			continue // the same bundle, kept for another node or an earlier call
		}
		if err := writeFileAtomic(b.path, b.pem); err != nil {
			undo()
			return nil, fmt.Errorf("bmc.caFile: %w", err)
		}
		created = append(created, b.path)
	}
	return undo, nil
}

func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".ca-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func cloneMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

// RemoveNode takes a node out of the inventory; refused while it has an
// active run.
func (o *OperatorService) RemoveNode(ctx context.Context, req *curev1.RemoveNodeRequest) (*curev1.RemoveNodeResponse, error) {
	id := req.GetNodeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "no node id")
	}
	kept, err := o.Store.RemoveNode(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, status.Errorf(codes.NotFound, "unknown node id %q (nothing was removed)", textsafe.BoundedLine(id, maxEchoedID))
	case errors.Is(err, store.ErrActiveRun):
		return nil, status.Errorf(codes.FailedPrecondition, "node %s has an active run (%v): cancel it first (curectl cancel %s); nothing was removed", id, err, id)
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	}
	return &curev1.RemoveNodeResponse{NodeId: id, RunsKept: kept}, nil
}

// LabelNode sets and removes labels.
func (o *OperatorService) LabelNode(ctx context.Context, req *curev1.LabelNodeRequest) (*curev1.NodeDetail, error) {
	id := req.GetNodeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "no node id")
	}
	if len(req.GetSet()) == 0 && len(req.GetRemove()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no label to set or remove")
	}
	var problems []string
	for _, k := range slices.Sorted(maps.Keys(req.GetSet())) {
		if err := nodes.CheckLabel(k, req.GetSet()[k]); err != nil {
			problems = append(problems, err.Error())
		}
	}
	for _, k := range req.GetRemove() {
		if _, both := req.GetSet()[k]; both {
			problems = append(problems, fmt.Sprintf("label %s: both set and removed", k))
		}
	}
	if len(problems) > 0 {
		return nil, status.Errorf(codes.InvalidArgument, "%s (nothing was changed)", strings.Join(problems, "; "))
	}
	if _, err := o.Store.SetLabels(ctx, id, req.GetSet(), req.GetRemove()); errors.Is(err, store.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "unknown node id %q (nothing was changed)", textsafe.BoundedLine(id, maxEchoedID))
	} else if err != nil {
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	}
	return o.ShowNode(ctx, &curev1.ShowNodeRequest{NodeId: id})
}

// ShowNode is one node: its inventory entry without secrets, its latest
// run, and the hardware its runner reported last.
func (o *OperatorService) ShowNode(ctx context.Context, req *curev1.ShowNodeRequest) (*curev1.NodeDetail, error) {
	id := req.GetNodeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "no node id")
	}
	n, err := o.Store.GetNode(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "unknown node id %q", textsafe.BoundedLine(id, maxEchoedID))
	} else if err != nil {
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	}
	d := &curev1.NodeDetail{
		NodeId: n.ID, Sku: n.SKU, Hostname: n.Hostname, Serial: n.SystemSerial, Macs: n.MACs, Labels: n.Labels,
		BmcUrl: n.BMCURL, BmcUsername: n.BMCUser, BmcPassword: passwordSource(n), BmcTls: bmcTLS(n), Psids: uint32(len(n.PSIDs)), State: "idle",
		Cabling: nodes.CablingProto(n.Cabling),
	}
	if r, err := o.Store.LatestRun(ctx, n.ID); err == nil {
		d.LastRunId, d.LastRunStatus, d.LastRunState = r.ID, runstate.RunName(r.Status), r.Status
		if runstate.Active(r.Status) {
			d.State = "in " + nonEmpty(r.Phase, "start")
		}
	}
	if rec, err := o.Store.LatestInventory(ctx, n.ID); err == nil {
		d.Inventory = inventoryRecord(rec)
	}
	if np, err := o.Store.NodePool(ctx, n.ID); err == nil && np.State != "" {
		d.Pool = poolStatus(np)
	}
	if ek, err := o.Store.NodeEK(ctx, n.ID); err == nil {
		d.EkSha256, d.EkSource, d.EkEnrolledUnixMs, d.EkRunId = ek.SHA256, ek.Source, ek.EnrolledAt.UnixMilli(), ek.RunID
	}
	return d, nil
}

func passwordSource(n store.Node) string {
	switch {
	case n.BMCPassword != "":
		return "sealed in the store"
	case n.BMCPasswordRef != "":
		return n.BMCPasswordRef + " (read at every connection)"
	}
	return "none"
}

func bmcTLS(n store.Node) string {
	switch {
	case n.BMCInsecure:
		return "not verified (insecure: true)"
	case n.BMCFingerprint != "":
		return "pinned certificate " + n.BMCFingerprint
	case n.BMCCAFile != "":
		return "verified against " + n.BMCCAFile
	}
	return "verified against --bmc-ca or the system roots"
}

// inventoryRecord is a stored inventory as the API returns it. A record
// this binary cannot read (a newer schema's) comes back without its
// inventory rather than failing the whole answer.
func inventoryRecord(rec store.InventoryRecord) *curev1.InventoryRecord {
	out := &curev1.InventoryRecord{RunId: rec.RunID, BootId: rec.BootID, TimeUnixMs: rec.Time.UnixMilli(), Peer: rec.Peer, Truncated: rec.Truncated}
	if inv, err := inventory.Unmarshal(rec.JSON); err == nil {
		out.Inventory = inv
	}
	return out
}

// runInventory is what a run's report shows: the newest inventory of the
// run, else the node's newest before the run ended (the node as last seen).
func runInventory(ctx context.Context, st *store.Store, r store.Run) *curev1.InventoryRecord {
	if rec, err := st.RunInventory(ctx, r.ID); err == nil {
		return inventoryRecord(rec)
	}
	until := r.EndedAt
	if until.IsZero() {
		until = time.Now()
	}
	if rec, err := st.InventoryBefore(ctx, r.NodeID, until); err == nil {
		return inventoryRecord(rec)
	}
	return nil
}
