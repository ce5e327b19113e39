package vbmc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// qmpEvent is an asynchronous QMP event, e.g. SHUTDOWN {guest, reason}.
type qmpEvent struct {
	Event     string          `json:"event"`
	Data      json.RawMessage `json:"data"`
	Timestamp struct {
		Seconds      int64 `json:"seconds"`
		Microseconds int64 `json:"microseconds"`
	} `json:"timestamp"`
}

type qmpMessage struct {
	QMP    json.RawMessage `json:"QMP"`
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string `json:"event"`
	ID    uint64 `json:"id"`
}

// qmpConn is a QMP client: greeting, capabilities negotiation, then
// commands (one at a time, matched by id) and a stream of events.
type qmpConn struct {
	conn    net.Conn
	cmdMu   sync.Mutex // one command in flight: QMP answers in order
	nextID  uint64
	replies chan qmpMessage
	events  chan qmpEvent
	closed  chan struct{}
	err     error // why the read loop ended; valid after closed
}

// dialQMP connects to QEMU's QMP socket, retrying until QEMU has created it
// and greets, or ctx ends, and negotiates capabilities. A socket that
// answers without the greeting (seen right after a restart of QEMU on the
// same path) is closed and dialled again.
func dialQMP(ctx context.Context, path string) (*qmpConn, error) {
	var d net.Dialer
	var lastErr error
	for {
		conn, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			var dec *json.Decoder
			if dec, err = readGreeting(ctx, conn); err == nil {
				q := &qmpConn{
					conn:    conn,
					replies: make(chan qmpMessage, 1),
					events:  make(chan qmpEvent, 64),
					closed:  make(chan struct{}),
				}
				go q.readLoop(dec)
				if _, err := q.execute(ctx, "qmp_capabilities", nil); err != nil {
					q.Close()
					return nil, fmt.Errorf("qmp: capabilities negotiation: %w", err)
				}
				return q, nil
			}
			conn.Close()
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("qmp: connect %s: %w (last error: %v)", path, ctx.Err(), lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// readGreeting waits (at most 5 s, within ctx) for QEMU's QMP greeting.
func readGreeting(ctx context.Context, conn net.Conn) (*json.Decoder, error) {
	dl := time.Now().Add(5 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = conn.SetReadDeadline(dl)
	dec := json.NewDecoder(conn)
	var greet qmpMessage
	if err := dec.Decode(&greet); err != nil {
		return nil, fmt.Errorf("qmp: expected greeting: %w", err)
	}
	if greet.QMP == nil {
		return nil, fmt.Errorf("qmp: expected greeting, got another message first")
	}
	_ = conn.SetReadDeadline(time.Time{})
	return dec, nil
}

func (q *qmpConn) readLoop(dec *json.Decoder) {
	defer close(q.closed)
	defer close(q.events)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			q.err = err
			return
		}
		var m qmpMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			q.err = fmt.Errorf("qmp: bad message %q: %w", raw, err)
			return
		}
		if m.Event != "" {
			var ev qmpEvent
			if err := json.Unmarshal(raw, &ev); err == nil {
				q.events <- ev
			}
			continue
		}
		select {
		case q.replies <- m:
		default: // a reply nobody waits for (caller gave up): drop it
		}
	}
}

// execute runs one QMP command and returns its "return" value.
func (q *qmpConn) execute(ctx context.Context, cmd string, args any) (json.RawMessage, error) {
	q.cmdMu.Lock()
	defer q.cmdMu.Unlock()
	q.nextID++
	id := q.nextID
	req := map[string]any{"execute": cmd, "id": id}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("qmp %s: encode: %w", cmd, err)
	}
	// A context without a deadline clears the previous command's: a
	// stale one in the past fails this write at once.
	dl, _ := ctx.Deadline()
	_ = q.conn.SetWriteDeadline(dl)
	if _, err := q.conn.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("qmp %s: write: %w", cmd, err)
	}
	for {
		select {
		case m := <-q.replies:
			if m.ID != id {
				continue // stale reply to an abandoned command
			}
			if m.Error != nil {
				return nil, fmt.Errorf("qmp %s: %s: %s", cmd, m.Error.Class, m.Error.Desc)
			}
			return m.Return, nil
		case <-q.closed:
			return nil, fmt.Errorf("qmp %s: connection closed: %w", cmd, errOr(q.err, errors.New("eof")))
		case <-ctx.Done():
			return nil, fmt.Errorf("qmp %s: %w", cmd, ctx.Err())
		}
	}
}

// Events is closed when the connection ends (QEMU exited).
func (q *qmpConn) Events() <-chan qmpEvent { return q.events }

func (q *qmpConn) Close() error { return q.conn.Close() }

func errOr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}
