package store

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Run.Data is the pipeline's scratch state. Its keys are defined here once
// and read and written only through the typed accessors below, so a value is
// parsed in one place and a malformed one is an error naming the run, the key
// and the value, never a silent zero. The keys and encodings are the ones
// earlier coordinators stored (decimal integers, RFC 3339 times with
// nanoseconds), so existing databases need no migration.
const (
	dataRunnerAddr        = "runner_addr"         // runner addresses of the driving instance, itself first
	dataBoot              = "boot"                // BootTarget
	dataCUREWindow        = "cure_window"         // id of the open CURE boot window
	dataHostTokens        = "host_token_sha256"   // space-separated digests, newest last
	dataHostRebootedAt    = "host_rebooted_at"    // when the node was rebooted out of CURE
	dataHostWaitFrom      = "host_wait_from"      // event id the host OS wait reads from
	dataHostRebootAttempt = "host_reboot_attempt" // wait_for_host_os attempt that rebooted
	dataAttemptsPrefix    = "attempts/"           // + phase: attempts started
	dataStartedPrefix     = "started/"            // + phase: start of the latest attempt
	dataBMCResetAt        = "bmc_reset_at"        // when this run asked the BMC to reset, until seen back
	dataBMCResets         = "bmc_resets"          // BMC resets this run caused
	dataBootRequestedAt   = "boot_requested_at"   // when the coordinator last (re)booted the node
	dataAssignCursor      = "assign_cursor"       // event id an assignment was sent at
	dataFreshCURE         = "fresh_cure"          // why the next runner batch needs a fresh CURE boot
	dataOOBPrefix         = "oob/"                // + firmware name: out-of-band submission record
	dataDeadlinePrefix    = "deadline/"           // + phase: when the coordinator gives up on an in-band phase
)

// MaxHostTokens bounds the host callback token digests a run keeps: a run
// reassigns os_install a handful of times.
const MaxHostTokens = 8

// BootTarget is what the node should boot next.
type BootTarget string

const (
	BootUnset BootTarget = ""     // nothing armed: the boot server sends the node to its disk
	BootCURE  BootTarget = "cure" // a CURE boot window is open
	BootDisk  BootTarget = "disk" // the installed OS
)

// ValidateData parses every typed value of r.Data, so a run whose stored
// state is malformed is refused before it is driven rather than misread.
func (r Run) ValidateData() error {
	for k := range r.Data {
		var err error
		switch {
		case strings.HasPrefix(k, dataAttemptsPrefix):
			_, err = r.Attempts(strings.TrimPrefix(k, dataAttemptsPrefix))
		case strings.HasPrefix(k, dataStartedPrefix):
			_, err = r.PhaseStartedAt(strings.TrimPrefix(k, dataStartedPrefix))
		case strings.HasPrefix(k, dataDeadlinePrefix):
			_, err = r.PhaseDeadline(strings.TrimPrefix(k, dataDeadlinePrefix))
		case k == dataHostRebootedAt:
			_, err = r.HostRebootedAt()
		case k == dataHostWaitFrom:
			_, err = r.HostWaitFrom()
		case k == dataHostRebootAttempt:
			_, err = r.HostRebootAttempt()
		case k == dataBMCResetAt:
			_, err = r.BMCResetAt()
		case k == dataBMCResets:
			_, err = r.BMCResets()
		case k == dataBootRequestedAt:
			_, err = r.BootRequestedAt()
		case k == dataAssignCursor:
			_, _, err = r.AssignCursor()
		case k == dataBoot:
			switch b := r.Boot(); b {
			case BootUnset, BootCURE, BootDisk:
			default:
				err = r.malformed(k, string(b), "a boot target (cure, disk or empty)")
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (r Run) malformed(key, val, want string) error {
	return fmt.Errorf("run %s: data %s = %q is not %s", r.ID, key, val, want)
}

func (r *Run) set(key, val string) {
	if r.Data == nil {
		r.Data = map[string]string{}
	}
	if val == "" {
		delete(r.Data, key)
		return
	}
	r.Data[key] = val
}

// getInt reads a decimal integer; absent is 0.
func (r Run) getInt(key string) (int64, error) {
	v, ok := r.Data[key]
	if !ok || v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, r.malformed(key, v, "a decimal integer")
	}
	return n, nil
}

// getTime reads an RFC 3339 time; absent is the zero time.
func (r Run) getTime(key string) (time.Time, error) {
	v, ok := r.Data[key]
	if !ok || v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, r.malformed(key, v, "an RFC 3339 time")
	}
	return t, nil
}

// setTime stores t; the zero time removes the key.
func (r *Run) setTime(key string, t time.Time) {
	if t.IsZero() {
		r.set(key, "")
		return
	}
	r.set(key, t.UTC().Format(time.RFC3339Nano))
}

// RunnerAddr is the runner address list of the instance driving the run.
func (r Run) RunnerAddr() string      { return r.Data[dataRunnerAddr] }
func (r *Run) SetRunnerAddr(a string) { r.set(dataRunnerAddr, a) }

// Boot is what the node should boot next.
func (r Run) Boot() BootTarget { return BootTarget(r.Data[dataBoot]) }

// SetBoot records what the node should boot next. BootUnset is stored as
// an empty value, as earlier coordinators did.
func (r *Run) SetBoot(b BootTarget) {
	if r.Data == nil {
		r.Data = map[string]string{}
	}
	r.Data[dataBoot] = string(b)
}

// CUREWindow is the id of the run's latest CURE boot window, "" if none.
func (r Run) CUREWindow() string      { return r.Data[dataCUREWindow] }
func (r *Run) SetCUREWindow(w string) { r.set(dataCUREWindow, w) }

// HostTokens are the digests of the host callback tokens the run's
// assignments carried, oldest first.
func (r Run) HostTokens() []string { return strings.Fields(r.Data[dataHostTokens]) }

// AddHostToken appends a digest, keeping the newest MaxHostTokens. Every
// token of the run stays good for its one callback: a runner busy with an
// os_install ignores a re-sent assignment (and its new token), so only the
// node knows which one its disk carries. All of them went only to this run's
// authenticated CURE sessions.
func (r *Run) AddHostToken(digest string) {
	ds := append(r.HostTokens(), digest)
	if len(ds) > MaxHostTokens {
		ds = ds[len(ds)-MaxHostTokens:]
	}
	r.set(dataHostTokens, strings.Join(ds, " "))
}

// ClearHostTokens forgets every host token digest (the run ended).
func (r *Run) ClearHostTokens() { r.set(dataHostTokens, "") }

// HostRebootedAt is when the node was rebooted out of CURE for the current
// wait_for_host_os attempt; zero if not yet.
func (r Run) HostRebootedAt() (time.Time, error) { return r.getTime(dataHostRebootedAt) }
func (r *Run) SetHostRebootedAt(t time.Time)     { r.setTime(dataHostRebootedAt, t) }

// HostWaitFrom is the event id the wait for the host OS reads from.
func (r Run) HostWaitFrom() (int64, error) { return r.getInt(dataHostWaitFrom) }
func (r *Run) SetHostWaitFrom(id int64)    { r.set(dataHostWaitFrom, strconv.FormatInt(id, 10)) }

// HostRebootAttempt is the wait_for_host_os attempt that rebooted the node
// out of CURE; 0 if none did.
func (r Run) HostRebootAttempt() (int, error) {
	n, err := r.getInt(dataHostRebootAttempt)
	return int(n), err
}
func (r *Run) SetHostRebootAttempt(n int) { r.set(dataHostRebootAttempt, strconv.Itoa(n)) }

// Attempts is how many attempts of phase have started.
func (r Run) Attempts(phase string) (int, error) {
	n, err := r.getInt(dataAttemptsPrefix + phase)
	if err == nil && n < 0 {
		err = r.malformed(dataAttemptsPrefix+phase, r.Data[dataAttemptsPrefix+phase], "a count (>= 0)")
	}
	return int(n), err
}
func (r *Run) SetAttempts(phase string, n int) { r.set(dataAttemptsPrefix+phase, strconv.Itoa(n)) }

// PhaseStartedAt is when the latest attempt of phase started, by the
// coordinator's clock; zero if none did.
func (r Run) PhaseStartedAt(phase string) (time.Time, error) {
	return r.getTime(dataStartedPrefix + phase)
}
func (r *Run) SetPhaseStartedAt(phase string, t time.Time) { r.setTime(dataStartedPrefix+phase, t) }

// PhaseDeadline is when the coordinator gives up on the latest attempt of an
// in-band phase that sent no end (zero: none set). Kept in the run so a
// restarted coordinator holds the same deadline.
func (r Run) PhaseDeadline(phase string) (time.Time, error) {
	return r.getTime(dataDeadlinePrefix + phase)
}
func (r *Run) SetPhaseDeadline(phase string, t time.Time) { r.setTime(dataDeadlinePrefix+phase, t) }

// BMCResetAt is when the run asked the BMC to reset and has not seen it
// back since; zero if no reset is pending.
func (r Run) BMCResetAt() (time.Time, error) { return r.getTime(dataBMCResetAt) }
func (r *Run) SetBMCResetAt(t time.Time)     { r.setTime(dataBMCResetAt, t) }

// BMCResets is how many BMC resets the run caused.
func (r Run) BMCResets() (int, error) {
	n, err := r.getInt(dataBMCResets)
	return int(n), err
}
func (r *Run) SetBMCResets(n int) { r.set(dataBMCResets, strconv.Itoa(n)) }

// BootRequestedAt is when the coordinator last powered on or rebooted the node.
func (r Run) BootRequestedAt() (time.Time, error) { return r.getTime(dataBootRequestedAt) }
func (r *Run) SetBootRequestedAt(t time.Time)     { r.setTime(dataBootRequestedAt, t) }

// AssignCursor is the event id at which the run's last assignment was sent;
// ok is false when no assignment is outstanding.
func (r Run) AssignCursor() (id int64, ok bool, err error) {
	if _, ok = r.Data[dataAssignCursor]; !ok {
		return 0, false, nil
	}
	id, err = r.getInt(dataAssignCursor)
	return id, err == nil, err
}
func (r *Run) SetAssignCursor(id int64) { r.set(dataAssignCursor, strconv.FormatInt(id, 10)) }
func (r *Run) ClearAssignCursor()       { r.set(dataAssignCursor, "") }

// FreshCURE is why the next runner batch must boot a fresh CURE ("" if it
// need not); "" clears it.
func (r Run) FreshCURE() string        { return r.Data[dataFreshCURE] }
func (r *Run) SetFreshCURE(why string) { r.set(dataFreshCURE, why) }

// OOBSubmission is the record of an out-of-band update of the named firmware
// ("" if none was submitted).
func (r Run) OOBSubmission(firmware string) string { return r.Data[dataOOBPrefix+firmware] }
func (r *Run) SetOOBSubmission(firmware, rec string) {
	r.set(dataOOBPrefix+firmware, rec)
}
