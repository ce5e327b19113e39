package cpustress

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// pinThread locks the goroutine to its OS thread and binds that thread to
// cpu, so a computation error is attributed to the package that made it.
// The thread stays locked until the goroutine exits, and then dies with it,
// so the affinity never leaks to other goroutines.
func pinThread(cpu int) error {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	return unix.SchedSetaffinity(0, &set)
}
