package phases

import (
	"context"
	"fmt"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/siteprog"
)

// siteChecks runs the suite's site checks: each program fetched from the
// coordinator's artifact server (artifact_base_url, unless the suite gives
// a url) and checked against its pin, then run sandboxed (tools/checks/siteprog).
// Its verdicts go out as every check's do, so the coordinator attributes
// them to this session's run.
func (e *Executor) siteChecks(base string, emit agent.Emitter) func(context.Context, siteprog.Program) ([]checks.Verdict, error) {
	r := e.cfg.Site
	r.HTTP, r.Log = e.cfg.HTTP, e.cfg.Log
	return func(ctx context.Context, p siteprog.Program) ([]checks.Verdict, error) {
		url, err := ArtifactURL(manifests.Artifact{URL: p.URL, SHA256: p.Want.SHA256}, base)
		if err != nil {
			return nil, fmt.Errorf("site program: %w", err)
		}
		p.URL = url
		emit.Log("INFO", fmt.Sprintf("site check %s: program %.12s (%d bytes) from %s, time limit %s: %s",
			p.Check, p.Want.SHA256, p.Want.Size, url, p.Limit, p.Description), map[string]string{"check": p.Check})
		return r.Run(ctx, p)
	}
}
