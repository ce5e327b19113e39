package bootserver

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
)

// Architectures of CURE images (GOARCH names, as cure-build --arch and
// the SKU's spec.arch say them). ImageDir is amd64's; Config.ImageDirs
// holds the others.
const (
	ArchAMD64 = "amd64"
	ArchARM64 = "arm64"
)

// ipxeArches maps iPXE's ${buildarch} to the image architecture: an x86
// machine may run the i386 build (BIOS undionly.kpxe) and still boots the
// x86-64 image.
var ipxeArches = map[string]string{"x86_64": ArchAMD64, "i386": ArchAMD64, "arm64": ArchARM64}

// consoles are each architecture's serial console (PL011 on Arm servers
// and QEMU's virt machine).
var consoles = map[string]string{ArchAMD64: "console=ttyS0", ArchARM64: "console=ttyAMA0"}

// bootArch is the architecture whose image mac gets: its SKU's spec.arch
// (Config.NodeArch) when the node is known, else the architecture of the
// iPXE that asks (?arch=${buildarch}, the generic script's), else amd64.
// A known node whose iPXE is of another architecture than its SKU is
// refused: the SKU or the inventory is wrong, and the image would not run.
func (s *Server) bootArch(ctx context.Context, r *http.Request, mac string) (string, error) {
	seen, asked := "", r.URL.Query().Get("arch")
	if asked != "" {
		var ok bool
		if seen, ok = ipxeArches[asked]; !ok {
			return "", fmt.Errorf("iPXE of architecture %q: CURE has images for x86_64 and arm64 only", ipxeText(asked))
		}
	}
	if s.cfg.NodeArch != nil {
		want, err := s.cfg.NodeArch(ctx, mac)
		if err != nil {
			return "", fmt.Errorf("architecture of %s: %w", mac, err)
		}
		if want != "" {
			if seen != "" && seen != want {
				return "", fmt.Errorf("the SKU of %s says spec.arch %s, but it booted a %s iPXE", mac, want, ipxeText(asked))
			}
			return want, nil
		}
	}
	if seen != "" {
		return seen, nil
	}
	return ArchAMD64, nil
}

// archImage is where arch's image lives: its directory, the URL prefix
// of its files and its serial console.
func (s *Server) archImage(arch string) (dir, prefix, console string, err error) {
	if arch == ArchAMD64 || arch == "" {
		return s.cfg.ImageDir, s.base + "/image/", consoles[ArchAMD64], nil
	}
	dir = s.cfg.ImageDirs[arch]
	if dir == "" {
		return "", "", "", fmt.Errorf("no %s CURE image on this coordinator (--image-dir-%s, make image-%s)", arch, arch, arch)
	}
	return dir, s.base + "/image/" + arch + "/", consoles[arch], nil
}

// archFile serves GET /image/{arch}/{name}: another architecture's image.
func (s *Server) archFile(w http.ResponseWriter, r *http.Request) {
	arch := r.PathValue("arch")
	dir := s.cfg.ImageDirs[arch]
	if arch == ArchAMD64 || dir == "" {
		http.Error(w, fmt.Sprintf("no image of architecture %q here (have %s)", ipxeText(arch), s.archList()), http.StatusNotFound)
		return
	}
	s.serveImage(w, r, dir, r.PathValue("name"))
}

func (s *Server) archList() string {
	l := []string{ArchAMD64}
	for a := range s.cfg.ImageDirs {
		l = append(l, a)
	}
	slices.Sort(l[1:])
	return fmt.Sprint(l)
}

// initramfsIn is initramfsName for dir.
func initramfsIn(dir string) (string, error) {
	return (&Server{cfg: Config{ImageDir: filepath.Clean(dir)}}).initramfsName()
}
