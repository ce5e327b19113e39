package redfish

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"github.com/stmcginnis/gofish/schemas"
)

// ErrLoginRefused is what a LoginError matches with errors.Is: the BMC
// refused the credentials. Retrying cannot help and, on a real BMC, counts
// toward locking the account.
var ErrLoginRefused = errors.New("BMC login refused")

// LoginError is a refused login, in one line naming the BMC, the user and
// where the password came from.
type LoginError struct {
	URL, Username string
	Status        int    // 401 or 403
	PasswordFrom  string // Endpoint.PasswordFrom
}

func (e *LoginError) Error() string {
	msg := fmt.Sprintf("BMC %s refused the login of user %q (HTTP %d)", e.URL, e.Username, e.Status)
	if e.PasswordFrom != "" {
		msg += ": the password was " + e.PasswordFrom
	}
	return msg
}

// Is makes errors.Is(err, ErrLoginRefused) true.
func (e *LoginError) Is(target error) bool { return target == ErrLoginRefused }

// maxBMCMessage bounds what of a BMC's error answer reaches an operator.
const maxBMCMessage = 200

// briefError stands for an error whose text quoted a Redfish error answer
// whole (gofish prints the raw JSON body, often a kilobyte): the same text
// with the answer reduced to its status and first message. It unwraps to
// the original, so statuses are still read from it.
type briefError struct {
	msg string
	err error
}

func (b *briefError) Error() string { return b.msg }
func (b *briefError) Unwrap() error { return b.err }

// brief returns err with any Redfish error answer in its text reduced to
// "HTTP 400 Base.1.8.PropertyValueNotInList: the BMC's message", bounded.
func brief(err error) error {
	var se *schemas.Error
	if err == nil || !errors.As(err, &se) {
		return err
	}
	var bl *briefError
	if errors.As(err, &bl) {
		return err // reduced already, further down
	}
	full := err.Error()
	raw := se.Error()
	short := describeAnswer(se)
	msg := full
	if raw != "" && strings.Contains(full, raw) {
		msg = strings.Replace(full, raw, short, 1)
	} else {
		msg = textsafe.BoundedLine(full, 512)
	}
	return &briefError{msg: msg, err: err}
}

// describeAnswer is a Redfish error answer as one bounded line.
func describeAnswer(se *schemas.Error) string {
	id, text := se.Code, se.Message
	for _, x := range se.ExtendedInfos {
		if x.Message != "" {
			id, text = nonEmptyStr(x.MessageID, id), x.Message
			break
		}
	}
	if strings.HasPrefix(strings.TrimSpace(text), "{") || strings.HasPrefix(strings.TrimSpace(text), "<") {
		text = "" // a body gofish could not parse: not for an operator's screen
	}
	out := "HTTP " + fmt.Sprint(se.HTTPReturnedStatusCode)
	if se.HTTPReturnedStatusCode == 0 {
		out = "error answer"
	}
	if id = textsafe.BoundedLine(id, 80); id != "" {
		out += " " + id
	}
	if text = textsafe.BoundedLine(text, maxBMCMessage); text != "" {
		out += ": " + text
	}
	return out
}

func nonEmptyStr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
