// Package nvmlsource adapts github.com/NVIDIA/go-nvml to gpu.Library.
//
// Everything but this comment is behind the cgo build tag: go-nvml's
// bindings need cgo, and the CURE busybox is built with cgo off. The adapter
// is linked only into the cure-nvml helper (tools/gpu/cmd/cure-nvml), which
// the image carries beside the runner with its shared libraries.
package nvmlsource
