package vbmc

import (
	"net/http"
	"strings"
)

// routeOOB serves the live out-of-band resources: UpdateService and its
// inventory, tasks, the Manager and the BIOS. It reports false for paths
// it does not own.
func (b *BMC) routeOOB(w http.ResponseWriter, r *http.Request, p string) bool {
	get := r.Method == http.MethodGet || r.Method == http.MethodHead
	post := r.Method == http.MethodPost
	only := func(ok bool, allow string, serve func()) bool {
		if !ok {
			methodNotAllowed(w, allow)
		} else {
			serve()
		}
		return true
	}
	switch {
	case p == updateServiceURL:
		return only(get, "GET, HEAD", func() { b.serveUpdateService(w) })
	case p == simpleUpdateInfo:
		return only(get, "GET, HEAD", func() { b.serveSimpleUpdateInfo(w) })
	case p == simpleUpdateURL:
		return only(post, "POST", func() { b.postSimpleUpdate(w, r) })
	case p == multipartURL && !b.cfg.NoMultipart:
		return only(post, "POST", func() { b.postMultipart(w, r) })
	case p == inventoryURL:
		return only(get, "GET, HEAD", func() { b.serveInventory(w, "", !b.cfg.NoExpand && expandsOneLevel(r.URL.RawQuery)) })
	case strings.HasPrefix(p, inventoryURL+"/"):
		return only(get, "GET, HEAD", func() { b.serveInventory(w, strings.TrimPrefix(p, inventoryURL+"/"), false) })
	case p == tasksURL:
		return only(get, "GET, HEAD", func() { b.serveTasks(w, "") })
	case strings.HasPrefix(p, tasksURL+"/"):
		return only(get, "GET, HEAD", func() { b.serveTasks(w, strings.TrimPrefix(p, tasksURL+"/")) })
	case strings.HasPrefix(p, monitorsURL+"/"):
		return only(get, "GET, HEAD", func() { b.serveMonitor(w, strings.TrimPrefix(p, monitorsURL+"/")) })
	case p == managerURL:
		return only(get, "GET, HEAD", func() { b.serveManager(w) })
	case p == managerURL+"/Actions/Manager.Reset":
		return only(post, "POST", func() { b.postManagerReset(w, r) })
	case p == b.biosURL() && b.cfg.NoBiosSettings && r.Method == http.MethodPatch:
		b.patchSettings(w, r)
		return true
	case p == b.biosURL():
		return only(get, "GET, HEAD", func() { b.serveBios(w) })
	case p == b.settingsURL() && !b.cfg.NoBiosSettings:
		b.serveSettings(w, r)
		return true
	}
	return false
}
