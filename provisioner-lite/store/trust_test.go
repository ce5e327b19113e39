package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
)

func issue(t *testing.T, s *Store, token, run, window, peer string, expires time.Time) {
	t.Helper()
	if err := s.IssueBootToken(ctxT(t), BootToken{Hash: TokenHash(token), NodeID: "n1", RunID: run, Window: window, Peer: peer, Expires: expires}, 0); err != nil {
		t.Fatal(err)
	}
}

func bind(s *Store, token, boot, secret, peer string) (string, BootToken, error) {
	return s.BindBootToken(context.Background(), BindRequest{Hash: TokenHash(token), BootID: boot, SessionHash: TokenHash(secret), Peer: peer, RequirePeer: true})
}

// runningRun starts run id on n1, or on a node of its own when n1 already
// has an active run (a node has one active run at a time).
func runningRun(t *testing.T, s *Store, id string) {
	t.Helper()
	err := s.CreateRun(ctxT(t), Run{ID: id, NodeID: "n1", Status: curev1.RunStatus_RUN_RUNNING})
	if errors.Is(err, ErrActiveRun) {
		runs, _ := s.ActiveRuns(ctxT(t))
		mustNode(t, s, testNode("n-"+id, fmt.Sprintf("52:54:00:ee:00:%02x", len(runs))))
		err = s.CreateRun(ctxT(t), Run{ID: id, NodeID: "n-" + id, Status: curev1.RunStatus_RUN_RUNNING})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// A token is consumed by the first Hello and bound to that boot: the same boot
// resumes with its secret, anybody else is refused, and a second boot in the
// same window is a contest, not a silent merge.
func TestBootTokenBinding(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	runningRun(t, s, "r1")
	hour := time.Now().Add(time.Hour)
	issue(t, s, "a", "r1", "w1", "10.0.0.5", hour)
	issue(t, s, "b", "r1", "w1", "10.0.0.5", hour) // an iPXE retry in the same window
	issue(t, s, "expired", "r1", "w1", "10.0.0.5", time.Now().Add(-time.Second))

	if _, _, err := bind(s, "expired", "boot1", "secret1", "10.0.0.5"); !errors.Is(err, ErrExpired) {
		t.Fatalf("bind of an expired token: %v, want ErrExpired", err)
	}
	if _, _, err := bind(s, "nope", "boot1", "secret1", "10.0.0.5"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bind of an unknown token: %v, want ErrNotFound", err)
	}
	out, tok, err := bind(s, "a", "boot1", "secret1", "10.0.0.5")
	if err != nil || out != Bound || tok.RunID != "r1" || tok.BootID != "boot1" {
		t.Fatalf("first Hello: %q %+v %v", out, tok, err)
	}
	// The same boot reconnecting, even from elsewhere (NAT rebinding), resumes.
	if out, _, err := bind(s, "a", "boot1", "secret1", "10.0.0.6"); err != nil || out != Resumed {
		t.Fatalf("reconnect of the same boot: %q %v", out, err)
	}
	ws, err := s.BootWindow(ctx, "r1", "w1")
	if err != nil || ws.Issued != 3 || ws.Bound == nil || ws.Bound.BootID != "boot1" {
		t.Fatalf("window state: %+v %v", ws, err)
	}
	// A window a boot registered in mints nothing more; a full one neither.
	if err := s.IssueBootToken(ctx, BootToken{Hash: TokenHash("d"), NodeID: "n1", RunID: "r1", Window: "w1", Expires: hour}, 0); !errors.Is(err, ErrWindowFull) {
		t.Fatalf("token for a registered window: %v, want ErrWindowFull", err)
	}
	if err := s.IssueBootToken(ctx, BootToken{Hash: TokenHash("e"), NodeID: "n1", RunID: "r1", Window: "w9", Expires: hour}, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.IssueBootToken(ctx, BootToken{Hash: TokenHash("f"), NodeID: "n1", RunID: "r1", Window: "w9", Expires: hour}, 1); !errors.Is(err, ErrWindowFull) {
		t.Fatalf("token past the window's max: %v, want ErrWindowFull", err)
	}

	// A new window (reboot into CURE) supersedes the old binding.
	issue(t, s, "c", "r1", "w2", "10.0.0.5", hour)
	if out, _, err := bind(s, "c", "boot3", "secret3", "10.0.0.5"); err != nil || out != Bound {
		t.Fatalf("bind in the next window: %q %v", out, err)
	}
	if _, _, err := bind(s, "a", "boot1", "secret1", "10.0.0.5"); !errors.Is(err, ErrStale) {
		t.Fatalf("old boot after a newer one registered: %v, want ErrStale", err)
	}

	// A second boot in a window a boot registered in is a contest, each
	// way it can present itself; the contest revokes the whole window, the
	// registered boot's binding included.
	var ce *ContestedError
	contests := []struct {
		name, token, boot, secret string
	}{
		{"token reused with another secret", "x", "boot1", "guessed"},
		{"token reused by another boot", "x", "boot2", "secret2"},
		{"the window's other token, revoked when a boot registered", "x2", "boot2", "secret2"},
	}
	for i, c := range contests {
		w := fmt.Sprintf("wc%d", i)
		issue(t, s, "x"+w, "r1", w, "10.0.0.5", hour)
		issue(t, s, "x2"+w, "r1", w, "10.0.0.5", hour)
		if out, _, err := bind(s, "x"+w, "boot1", "secret1", "10.0.0.5"); err != nil || out != Bound {
			t.Fatalf("%s: first Hello: %q %v", c.name, out, err)
		}
		if _, _, err := bind(s, c.token+w, c.boot, c.secret, "10.0.0.5"); !errors.As(err, &ce) || ce.Bound.BootID != "boot1" || ce.Token.Hash != TokenHash(c.token+w) {
			t.Fatalf("%s: %v, want ContestedError naming boot1", c.name, err)
		}
		if _, _, err := bind(s, "x"+w, "boot1", "secret1", "10.0.0.5"); !errors.Is(err, ErrWindowContested) {
			t.Fatalf("%s: the registered boot after the contest: %v, want ErrWindowContested", c.name, err)
		}
	}

	// The run ends: nothing of it can attach any more.
	if err := s.DeleteRunBootTokens(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := bind(s, "c", "boot3", "secret3", "10.0.0.5"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("token of an ended run: %v, want ErrNotFound", err)
	}
	var n int
	if err := s.r.db.QueryRow(`SELECT count(*) FROM boot_tokens`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("tokens left: %d %v", n, err)
	}
}

// A boot window has one claimant, the address its first token went to:
// the same address asking again is a retry; another address asking for a
// token, or presenting one, before or after a boot registered, contests
// the window, and then none of its tokens opens anything and it mints no
// more (TestBootTokenRaceContested is the attack end to end).
func TestBootWindowClaimants(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	runningRun(t, s, "r1")
	hour := time.Now().Add(time.Hour)
	claim := func(token, window, peer string) error {
		return s.ClaimBootToken(ctx, BootToken{Hash: TokenHash(token), NodeID: "n1", RunID: "r1", Window: window, Peer: peer, Expires: hour}, 0)
	}
	var ce *ContestedError

	// Before any Hello: a second address asking for a token.
	if err := claim("a1", "w1", "10.0.0.66"); err != nil {
		t.Fatal(err)
	}
	if err := claim("a2", "w1", "10.0.0.66"); err != nil {
		t.Fatalf("a retry by the claimant: %v", err)
	}
	if err := s.ClaimBootWindow(ctx, "r1", "w1", "10.0.0.66"); err != nil {
		t.Fatalf("the claimant's claim: %v", err)
	}
	if err := claim("n1", "w1", "10.0.0.5"); !errors.As(err, &ce) || ce.First != "10.0.0.66" || ce.Second != "10.0.0.5" {
		t.Fatalf("a token for a second address: %v, want ContestedError naming both", err)
	}
	ws, err := s.BootWindow(ctx, "r1", "w1")
	if err != nil || !ws.Contested || ws.Issued != 2 || !slices.Equal(ws.Claimants, []string{"10.0.0.66"}) {
		t.Fatalf("window after the contest: %+v %v", ws, err)
	}
	for _, who := range []string{"10.0.0.66", "10.0.0.5"} {
		if err := claim("late-"+who, "w1", who); !errors.Is(err, ErrWindowContested) {
			t.Fatalf("a token for %s after the contest: %v, want ErrWindowContested", who, err)
		}
		if err := s.ClaimBootWindow(ctx, "r1", "w1", who); !errors.Is(err, ErrWindowContested) {
			t.Fatalf("a claim from %s after the contest: %v, want ErrWindowContested", who, err)
		}
	}
	if _, _, err := bind(s, "a1", "boot1", "secret1", "10.0.0.66"); !errors.Is(err, ErrWindowContested) {
		t.Fatalf("the first claimant's Hello after the contest: %v, want ErrWindowContested", err)
	}

	// A Hello presenting the token from another address than its claimant.
	if err := claim("b1", "w2", "10.0.0.5"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := bind(s, "b1", "boot1", "secret1", "10.0.0.9"); !errors.As(err, &ce) || ce.First != "10.0.0.5" || ce.Second != "10.0.0.9" {
		t.Fatalf("bind from another address: %v, want ContestedError naming both", err)
	}
	if _, _, err := bind(s, "b1", "boot1", "secret1", "10.0.0.5"); !errors.Is(err, ErrWindowContested) {
		t.Fatalf("the claimant's own Hello after a contest: %v, want ErrWindowContested", err)
	}

	// After a Hello registered: the bound boot resumes from anywhere with
	// its secret; another address asking for a token is a contest, and
	// the registered boot is cut off too.
	if err := claim("c1", "w3", "10.0.0.66"); err != nil {
		t.Fatal(err)
	}
	if out, _, err := bind(s, "c1", "boot3", "secret3", "10.0.0.66"); err != nil || out != Bound {
		t.Fatalf("first Hello: %q %v", out, err)
	}
	if out, _, err := bind(s, "c1", "boot3", "secret3", "10.0.0.67"); err != nil || out != Resumed {
		t.Fatalf("the bound boot resuming from elsewhere: %q %v", out, err)
	}
	if err := claim("c2", "w3", "10.0.0.66"); !errors.Is(err, ErrWindowFull) {
		t.Fatalf("the registered claimant asking again: %v, want ErrWindowFull (a retry, not a contest)", err)
	}
	if err := s.ClaimBootWindow(ctx, "r1", "w3", "10.0.0.5"); !errors.As(err, &ce) || ce.First != "10.0.0.66" || ce.Second != "10.0.0.5" || ce.Bound.BootID != "boot3" {
		t.Fatalf("a second address after the Hello: %v, want ContestedError naming both and boot3", err)
	}
	if _, _, err := bind(s, "c1", "boot3", "secret3", "10.0.0.66"); !errors.Is(err, ErrWindowContested) {
		t.Fatalf("the registered boot after the contest: %v, want ErrWindowContested", err)
	}

	// Without the rule (--bind-boot-ip=false) addresses are not claimants.
	if err := s.IssueBootToken(ctx, BootToken{Hash: TokenHash("d1"), NodeID: "n1", RunID: "r1", Window: "w4", Peer: "10.0.0.66", Expires: hour}, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.IssueBootToken(ctx, BootToken{Hash: TokenHash("d2"), NodeID: "n1", RunID: "r1", Window: "w4", Peer: "10.0.0.5", Expires: hour}, 0); err != nil {
		t.Fatalf("a second address without the rule: %v", err)
	}
}

func TestEndBootWindowAndPrune(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	runningRun(t, s, "r1")
	if err := s.CreateRun(ctx, Run{ID: "done", NodeID: "n1", Status: curev1.RunStatus_RUN_SUCCEEDED}); err != nil {
		t.Fatal(err)
	}
	issue(t, s, "late", "r1", "w1", "", time.Now().Add(time.Hour))
	issue(t, s, "old", "r1", "w1", "", time.Now().Add(-2*time.Hour))
	issue(t, s, "ofdone", "done", "w1", "", time.Now().Add(time.Hour))
	if err := s.EndBootWindow(ctx, "r1", "w1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := bind(s, "late", "b", "s", ""); !errors.Is(err, ErrStale) {
		t.Fatalf("token of an ended window: %v, want ErrStale", err)
	}
	if n, err := s.PruneBootTokens(ctx, time.Now().Add(-time.Hour)); err != nil || n != 2 {
		t.Fatalf("PruneBootTokens = %d %v; want the expired one and the finished run's", n, err)
	}
	if _, err := s.LookupBootToken(ctx, TokenHash("late")); err != nil {
		t.Fatalf("recently revoked token pruned too early: %v", err)
	}
}

// The database holds no literal secret: passwords and PSIDs are sealed under
// a key that is not in it, and tokens are only hashes.
func TestSecretsSealedAtRest(t *testing.T) {
	s, path := openTest(t)
	ctx := ctxT(t)
	n := testNode("n1", "52:54:00:00:00:01")
	n.BMCPassword = "hunter2-bmc-password"
	mustNode(t, s, n)
	ref := testNode("n2", "52:54:00:00:00:02")
	ref.BMCPassword, ref.BMCPasswordRef = "", "env:BMC_PW"
	mustNode(t, s, ref)
	runningRun(t, s, "r1")
	issue(t, s, "live-boot-token-value", "r1", "w", "", time.Now().Add(time.Hour))
	got, err := s.GetNode(ctx, "n1")
	if err != nil || got.BMCPassword != n.BMCPassword || got.PSIDs["S3EVNX0K"] != n.PSIDs["S3EVNX0K"] {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if got, _ := s.GetNode(ctx, "n2"); got.BMCPasswordRef != "env:BMC_PW" || got.BMCPassword != "" {
		t.Fatalf("password reference round trip: %+v", got)
	}
	// Read while open (the WAL holds the recent writes) and after close
	// (checkpointed into the main file).
	files := map[string][]byte{}
	for _, f := range []string{path, path + "-wal"} {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		files[f+" (open)"] = raw
	}
	s.Close()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	files[path+" (closed)"] = raw
	for f, raw := range files {
		for _, secret := range []string{"hunter2-bmc-password", n.PSIDs["S3EVNX0K"], "live-boot-token-value"} {
			if bytes.Contains(raw, []byte(secret)) {
				t.Errorf("%s holds %q in clear", filepath.Base(f), secret)
			}
		}
	}
	// Another key (another state dir's) opens nothing; no key opens nothing.
	other, err := Open(path, WithStateKey([]byte("ffffffffffffffffffffffffffffffff")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.GetNode(ctx, "n1"); err == nil || !strings.Contains(err.Error(), "does not open") {
		t.Errorf("GetNode with another key: %v", err)
	}
	other.Close()
	nokey, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer nokey.Close()
	if _, err := nokey.GetNode(ctx, "n1"); !errors.Is(err, ErrNoStateKey) {
		t.Errorf("GetNode without a key: %v, want ErrNoStateKey", err)
	}
	if err := nokey.UpsertNode(ctx, testNode("n3", "52:54:00:00:00:03")); !errors.Is(err, ErrNoStateKey) {
		t.Errorf("UpsertNode of a literal secret without a key: %v, want ErrNoStateKey", err)
	}
}

// A database written by the previous schema, with clear passwords, PSIDs and
// host tokens, is sealed on the first open with a key.
func TestUpgradeSealsOldClearSecrets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cure.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if err := migrateTo(ctx, db, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO nodes (id, bmc_password, psids, updated_at) VALUES ('n1', 'clear-pw', '{"SER":"ABCDEFGHIJKLMNOPQRSTUVWXYZ012345"}', 0);
INSERT INTO runs (id, node_id, status, data, created_at) VALUES ('r1', 'n1', 'succeeded', '{"host_token":"clear-host-token","k":"v"}', 0)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := Open(path, WithStateKey(testKey))
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.GetNode(ctx, "n1")
	if err != nil || n.BMCPassword != "clear-pw" || n.PSIDs["SER"] == "" {
		t.Fatalf("node after upgrade: %+v %v", n, err)
	}
	r, err := s.GetRun(ctx, "r1")
	if err != nil {
		t.Fatalf("run after upgrade: %v", err)
	}
	var data string
	if err := s.r.db.QueryRow(`SELECT data FROM runs WHERE id = 'r1'`).Scan(&data); err != nil || strings.Contains(data, "clear-host-token") {
		t.Fatalf("run data after upgrade: %q %v: the clear host token is still there", data, err)
	}
	if r.Pipeline.Malformed != "" || len(r.Pipeline.HostTokens) != 0 {
		t.Errorf("pipeline state from unknown keys: %+v", r.Pipeline)
	}
	var pw, psids string
	if err := s.r.db.QueryRow(`SELECT bmc_password, psids FROM nodes WHERE id = 'n1'`).Scan(&pw, &psids); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(pw, sealedPrefix) || !strings.HasPrefix(psids, sealedPrefix) {
		t.Fatalf("after upgrade the columns are %q / %q, want sealed", pw, psids)
	}
	s.Close()
}

// The database and its WAL and SHM files are 0600 whatever the umask, and a
// wider file left by an older coordinator is narrowed.
func TestDatabaseFilesPrivate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cure.db")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, WithStateKey(testKey))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s is %v, want 0600", filepath.Base(f), st.Mode().Perm())
		}
	}
}

func TestRunnerEventCaps(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	runningRun(t, s, "r1")
	lim := EventLimits{MaxEvents: 5, MaxBytes: 1000, HardEvents: 8, MaxVerdicts: 2}
	ev := func(seq uint64, kind runstate.EventKind, msg string) Event {
		return Event{RunID: "r1", NodeID: "n1", BootID: "b", Seq: seq, Kind: kind, Message: msg}
	}
	seq := uint64(0)
	next := func() uint64 { seq++; return seq }
	for i := 0; i < 5; i++ {
		if res, err := s.AppendRunnerEvent(ctx, ev(next(), "metric", "m=1"), nil, lim); err != nil || !res.Inserted {
			t.Fatalf("metric %d: %+v %v", i, res, err)
		}
	}
	// Over the soft cap: metrics and logs are acked but dropped.
	res, err := s.AppendRunnerEvent(ctx, ev(next(), "log", "chatty"), nil, lim)
	if err != nil || res.Inserted || !res.Dropped {
		t.Fatalf("log over the cap: %+v %v, want dropped", res, err)
	}
	// Phase events and verdicts still land, up to the hard cap.
	if res, err := s.AppendRunnerEvent(ctx, ev(next(), "phase_end", "ok"), nil, lim); err != nil || !res.Inserted {
		t.Fatalf("phase_end over the soft cap: %+v %v", res, err)
	}
	v := func(c string) *Verdict {
		return &Verdict{RunID: "r1", Component: c, Check: "wipe", Status: curev1.VerdictStatus_PASS}
	}
	if _, err := s.AppendRunnerEvent(ctx, ev(next(), "verdict", "disk/a"), v("disk/a"), lim); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendRunnerEvent(ctx, ev(next(), "verdict", "disk/b"), v("disk/b"), lim); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendRunnerEvent(ctx, ev(next(), "verdict", "disk/c"), v("disk/c"), lim); !errors.Is(err, ErrRunCap) {
		t.Fatalf("third distinct verdict: %v, want ErrRunCap", err)
	}
	if _, err := s.AppendRunnerEvent(ctx, ev(next(), "phase_start", ""), nil, lim); !errors.Is(err, ErrRunCap) {
		t.Fatalf("event past the hard cap: %v, want ErrRunCap", err)
	}
	// A replay of a stored event is still acknowledged.
	if res, err := s.AppendRunnerEvent(ctx, ev(1, "metric", "m=1"), nil, lim); err != nil || res.Inserted || res.Dropped || res.ID == 0 {
		t.Fatalf("replay: %+v %v", res, err)
	}
	u, err := s.Usage(ctx, "r1")
	if err != nil || u.Events != 8 || u.Dropped != 1 || u.Verdicts != 2 {
		t.Fatalf("usage: %+v %v", u, err)
	}
	// Bytes: one oversized log is dropped, it does not fill the disk.
	runningRun(t, s, "r2")
	if res, err := s.AppendRunnerEvent(ctx, Event{RunID: "r2", BootID: "b", Seq: 1, Kind: "log", Message: strings.Repeat("x", 2000)}, nil, lim); err != nil || !res.Dropped {
		t.Fatalf("oversized log: %+v %v", res, err)
	}
	// A finished run takes nothing more.
	r, _ := s.GetRun(ctx, "r1")
	r.Status = curev1.RunStatus_RUN_SUCCEEDED
	if err := s.UpdateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendRunnerEvent(ctx, ev(next(), "verdict", "disk/a"), v("disk/a"), lim); !errors.Is(err, ErrRunInactive) {
		t.Fatalf("event for a finished run: %v, want ErrRunInactive", err)
	}
}

func TestRetention(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	runningRun(t, s, "old")
	runningRun(t, s, "live")
	for _, run := range []string{"old", "live"} {
		for i, kind := range []runstate.EventKind{"metric", "log", "phase_end", "verdict"} {
			var v *Verdict
			if kind == "verdict" {
				v = &Verdict{RunID: run, Component: "gpu/0", Check: "ecc", Status: curev1.VerdictStatus_PASS}
			}
			if _, err := s.AppendRunnerEvent(ctx, Event{RunID: run, BootID: "b", Seq: uint64(i + 1), Kind: kind}, v, DefaultEventLimits); err != nil {
				t.Fatal(err)
			}
		}
	}
	r, _ := s.GetRun(ctx, "old")
	r.Status, r.EndedAt = curev1.RunStatus_RUN_SUCCEEDED, time.Now().Add(-40*24*time.Hour)
	if err := s.UpdateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendAudit(ctx, AuditEntry{Kind: AuditOperator, Actor: "alice", Action: "x", Time: time.Now().Add(-400 * 24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	s.prune(ctx, time.Now(), DefaultRetention, slog.New(slog.DiscardHandler))
	kinds := func(run string) string {
		evs, _ := s.Events(ctx, run, 0, 0)
		var k []string
		for _, e := range evs {
			k = append(k, string(e.Kind))
		}
		return strings.Join(k, ",")
	}
	if got := kinds("old"); got != "phase_end,verdict" {
		t.Errorf("finished run after retention: %s, want phase_end,verdict", got)
	}
	if got := kinds("live"); got != "metric,log,phase_end,verdict" {
		t.Errorf("active run after retention: %s", got)
	}
	if vs, _ := s.Verdicts(ctx, "old"); len(vs) != 1 {
		t.Errorf("verdicts of the finished run: %+v", vs)
	}
	if a, _ := s.AuditLog(ctx, AuditFilter{}); len(a) != 0 {
		t.Errorf("audit entries past retention: %+v", a)
	}
}

func TestAuditLog(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	for i, a := range []AuditEntry{
		{Kind: AuditOperator, Actor: "alice", Role: "admin", Action: "/cure.v1.OperatorService/Provision", Nodes: []string{"n1", "n2"}, Result: "OK"},
		{Kind: AuditSecurity, Actor: "n2", Peer: "10.0.0.9", Action: "boot_token_reused", Result: "refused"},
		{Kind: AuditOperator, Actor: "bob", Role: "viewer", Action: "/cure.v1.OperatorService/Provision", Nodes: []string{"n3"}, Result: "PermissionDenied"},
	} {
		a.Time = time.Now().Add(time.Duration(i) * time.Second)
		if err := s.AppendAudit(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.AuditLog(ctx, AuditFilter{})
	if err != nil || len(all) != 3 || all[0].Actor != "bob" {
		t.Fatalf("newest first: %+v %v", all, err)
	}
	if sec, _ := s.AuditLog(ctx, AuditFilter{Kind: AuditSecurity}); len(sec) != 1 || sec[0].Peer != "10.0.0.9" {
		t.Fatalf("security entries: %+v", sec)
	}
	if n2, _ := s.AuditLog(ctx, AuditFilter{Node: "n2"}); len(n2) != 2 {
		t.Fatalf("entries naming n2: %+v", n2)
	}
	if page, _ := s.AuditLog(ctx, AuditFilter{BeforeID: all[0].ID, Limit: 1}); len(page) != 1 || page[0].ID != all[1].ID {
		t.Fatalf("paging: %+v", page)
	}
	if err := s.AppendAudit(ctx, AuditEntry{Kind: "other"}); err == nil {
		t.Fatal("unknown kind accepted")
	}
}
