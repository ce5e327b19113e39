package vbmc

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// AcceptThenTimeout makes the next mutating request (POST, PATCH, PUT,
// DELETE other than login/logout) take full effect but withholds the answer
// for d, or until the client gives up: the "was it accepted?" case.
func (b *BMC) AcceptThenTimeout(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.acceptTimeout = d
}

// AcceptThenTimeoutUpdate arms AcceptThenTimeout for the next
// UpdateService action (SimpleUpdate or a multipart push) only, whatever
// other mutations come first: the update is accepted, its answer lost.
func (b *BMC) AcceptThenTimeoutUpdate(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.acceptTimeoutUpdate = d
}

// CutTCP makes the next mutating request take full effect, then closes the
// connection halfway through the response headers.
func (b *BMC) CutTCP() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cutTCP = true
}

// FailNextTask makes the next update task end in Exception with msg,
// flashing nothing.
func (b *BMC) FailNextTask(msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failTask = &msg
}

// SetSlowReturn makes the next BMC reset keep the BMC away for d instead of
// Config.ResetDuration.
func (b *BMC) SetSlowReturn(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.slowReturn = d
}

func (b *BMC) takeTaskFailure() (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failTask == nil {
		return "", false
	}
	msg := *b.failTask
	b.failTask = nil
	return msg, true
}

func isMutation(r *http.Request, p string) bool {
	switch r.Method {
	case http.MethodPost, http.MethodPatch, http.MethodPut, http.MethodDelete:
	default:
		return false
	}
	return !strings.HasPrefix(p, odataRoot+"/SessionService/Sessions")
}

// mutationFault takes an armed response fault, if p is a mutation.
func (b *BMC) mutationFault(r *http.Request, p string) (hold time.Duration, cut bool) {
	if !isMutation(r, p) {
		return 0, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	hold, cut = b.acceptTimeout, b.cutTCP
	b.acceptTimeout, b.cutTCP = 0, false
	if b.acceptTimeoutUpdate > 0 && r.Method == http.MethodPost && strings.HasPrefix(p, odataRoot+"/UpdateService") {
		hold = max(hold, b.acceptTimeoutUpdate)
		b.acceptTimeoutUpdate = 0
	}
	return hold, cut
}

// heldResponse collects a response so a fault can decide what reaches the
// client.
type heldResponse struct {
	h    http.Header
	code int
	body bytes.Buffer
}

func (h *heldResponse) Header() http.Header { return h.h }
func (h *heldResponse) Write(p []byte) (int, error) {
	if h.code == 0 {
		h.code = http.StatusOK
	}
	return h.body.Write(p)
}
func (h *heldResponse) WriteHeader(code int) {
	if h.code == 0 {
		h.code = code
	}
}

// serveFaulty runs serve to completion (the mutation happens), then plays
// the armed fault on the way back.
func (b *BMC) serveFaulty(w http.ResponseWriter, r *http.Request, hold time.Duration, cut bool, serve func(http.ResponseWriter)) {
	held := &heldResponse{h: http.Header{}}
	serve(held)
	if held.code == 0 {
		held.code = http.StatusOK
	}
	if cut {
		b.log.Warn("fault: cutting the connection mid-response", "method", r.Method, "path", r.URL.Path, "status", held.code)
		hj, ok := w.(http.Hijacker)
		if !ok {
			return // a recorder: nothing to cut; the client sees an empty 200
		}
		conn, buf, err := hj.Hijack()
		if err != nil {
			b.log.Error("hijack for CutTCP", "err", err)
			return
		}
		var head bytes.Buffer
		fmt.Fprintf(&head, "HTTP/1.1 %d %s\r\n", held.code, http.StatusText(held.code))
		_ = held.h.Write(&head)
		_, _ = buf.Write(head.Bytes()[:head.Len()/2])
		_ = buf.Flush()
		_ = conn.Close()
		return
	}
	b.log.Warn("fault: accepted, withholding the answer", "method", r.Method, "path", r.URL.Path, "for", hold)
	t := time.NewTimer(hold)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return
	case <-b.done:
		return
	}
	for k, v := range held.h {
		w.Header()[k] = v
	}
	w.WriteHeader(held.code)
	_, _ = w.Write(held.body.Bytes())
}

// Fail503 makes the next n requests (any path, before authentication)
// answer 503 ServiceTemporarilyUnavailable with Retry-After: 1, as a BMC
// does when it sheds load.
func (b *BMC) Fail503(n int) { b.fail503.Store(int64(n)) }

func (b *BMC) take503() bool {
	for {
		n := b.fail503.Load()
		if n <= 0 {
			return false
		}
		if b.fail503.CompareAndSwap(n, n-1) {
			return true
		}
	}
}
