package vbmc

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// fakeQMP serves QMP on a unix socket: the greeting, then an empty
// return for every command, echoing its id.
func fakeQMP(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "qmp.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprintln(conn, `{"QMP": {"version": {}, "capabilities": []}}`)
		sc := bufio.NewScanner(conn)
		for sc.Scan() {
			var req struct {
				ID uint64 `json:"id"`
			}
			if json.Unmarshal(sc.Bytes(), &req) != nil {
				return
			}
			fmt.Fprintf(conn, "{\"return\": \"\", \"id\": %d}\n", req.ID)
		}
	}()
	return path
}

// TestQMPCommandAfterDeadlinedOne: a command whose context has no deadline
// runs after one whose deadline has passed (the earlier deadline must not
// stay on the connection and fail the write).
func TestQMPCommandAfterDeadlinedOne(t *testing.T) {
	q, err := dialQMP(context.Background(), fakeQMP(t))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	if _, err := q.execute(ctx, "query-status", nil); err != nil {
		t.Fatal(err)
	}
	cancel()
	time.Sleep(300 * time.Millisecond) // that deadline is in the past now
	if _, err := q.execute(context.Background(), "human-monitor-command", map[string]string{"command-line": "info status"}); err != nil {
		t.Errorf("command without a deadline after one with an expired deadline: %v", err)
	}
}
