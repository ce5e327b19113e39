//go:build !linux

package siteprog

import (
	"context"
	"errors"
	"time"
)

func (s Sandbox) run(context.Context, []byte, []string, time.Duration, int64, time.Duration) (*result, error) {
	return nil, errors.New("site programs run in a Linux sandbox (namespaces, another uid): not on this system")
}
