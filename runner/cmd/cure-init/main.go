// Command cure-init is PID 1 of the CURE image. It mounts the pseudo
// filesystems, then starts the runner (/bbin/cure-runner, in the busybox)
// and stays to reap orphans and to start the runner again should it ever
// end, with a debug shell in between when the kernel command line has
// cure.debug=1. It is built on its own, outside the busybox: u-root's init
// in the busybox paid the busybox's start (every package's initialisation:
// gRPC, protobuf, TLS) once more before the runner's, about 0.6 s of a
// boot under emulation.
//
// It must never exit: the kernel panics when PID 1 does.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/cure-oss/cure/runner/pid1"
	"github.com/cure-oss/cure/tools/version"
)

const (
	runnerPath = "/bbin/cure-runner"
	shellPath  = "/bbin/gosh"
)

func main() {
	// Never as PID 1: exiting there panics the kernel, and the kernel hands
	// init the command line's stray words.
	if os.Getpid() != 1 && version.Requested(os.Args[1:]) {
		fmt.Println(version.String("cure-init"))
		return
	}
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	pid1.HoldSignals(logf)
	if os.Getpid() != 1 {
		logf("cure-init: not PID 1 (pid %d): the runner is started by the image's init", os.Getpid())
		os.Exit(2)
	}
	if err := pid1.MountPseudoFS(); err != nil {
		logf("cure-init: %v", err)
	}
	if err := pid1.QuietConsole(); err != nil {
		logf("cure-init: %v", err)
	}
	programs := []pid1.Program{{Path: runnerPath, Args: []string{"cure-runner"}}}
	if pid1.DebugShell(pid1.ReadCmdline()) {
		programs = append(programs, pid1.Program{Path: shellPath, Args: []string{"gosh"}, Ctty: true})
	}
	s := &pid1.Supervisor{
		Programs: programs,
		Env:      pid1.Env(),
		Files:    []uintptr{0, 1, 2},
		Restart:  5 * time.Second,
		Logf:     logf,
	}
	for {
		// Run returns only when bounded; this one is not.
		if err := s.Run(); err != nil {
			logf("cure-init: %v", err)
		}
		time.Sleep(5 * time.Second)
	}
}
