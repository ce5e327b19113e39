// Command bench-install measures the image writer against the shell
// baseline `curl URL | zstd -dc | dd of=TARGET bs=4M oflag=direct` (and
// the gzip equivalent) on the same images, the same target and in the same
// run, for an incompressible image and a mostly-zero one. The writer runs
// as a child process so its peak RSS (rusage maxrss) is its own.
//
// With -cpus N the writer, the baseline pipeline and the ceiling's dd all
// run under `taskset -c 0-(N-1)` (the Go runtime then sizes GOMAXPROCS to
// N); the benchmark itself, which is also the HTTP server, moves to the
// other cores, standing in for the remote artifact server a node
// downloads from.
//
//	go run ./tools/diskimage/cmd/bench-install -size 2GiB
package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/cure-oss/cure/tools/chunklist"
	"github.com/cure-oss/cure/tools/diskimage"
	"github.com/cure-oss/cure/tools/version"
)

const block = 4 << 20

// rssLimit is the aim for the writer's peak RSS, whatever the image size.
const rssLimit = 256 << 20

var (
	cpuProfileDir, onlyCodec string
	runs                     int
	reuse                    bool
	fsSource                 string
	decoders                 []string
	profileRuns              = map[string]int{} // writer runs per artifact so far, for -cpuprofile
	cpus                     int                // cores the contenders may use
	pin                      string             // "taskset -c 0-N " or "" when they may use all
	verifies                 []string           // "whole" or "chunked-ALG", one writer row each
	connections              int
	writers                  []string // executables run as write-child; "" is this binary
	ddIflag                  string   // "iflag=fullblock " under -fullblock
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "write-child" {
		child(os.Args[2:])
		return
	}
	size := flag.String("size", "2GiB", "size of each generated image")
	zeroPct := flag.Int("zero-percent", 90, "share of all-zero 4 MiB blocks in the mostly-zero image")
	rssSize := flag.String("rss-size", "10GiB", "size of the mostly-zero image used for the peak-RSS check (0 to skip)")
	work := flag.String("work", "", "scratch directory (default: a temp dir under /var/tmp, removed afterwards)")
	useFile := flag.Bool("file-target", false, "write to a regular file even when a loop device is available")
	flag.StringVar(&cpuProfileDir, "cpuprofile", "", "write a CPU profile of each writer run into this directory (ARTIFACT.runN.pprof)")
	flag.StringVar(&onlyCodec, "codec", "", "run only this codec (zst or gz)")
	flag.IntVar(&runs, "runs", 3, "runs of each contender per image, alternating; medians are compared")
	flag.BoolVar(&reuse, "reuse", false, "keep the generated images in -work and reuse them when present")
	flag.StringVar(&fsSource, "fs-source", "/usr/share", "directory copied into the ext4 'filesystem' image, a stand-in for a real OS image (empty: skip that image)")
	flag.IntVar(&cpus, "cpus", 0, "pin the writer, the baseline and the ceiling to cores 0..N-1 with taskset (0: all cores, unpinned)")
	verList := flag.String("verify", "chunked", "comma-separated verifications, each run alternately with the baseline, one row each: whole (the download's sha256 at its end), chunked (the chunk list, "+chunklist.DefaultAlg.String()+"), chunked-sha256, chunked-blake3")
	flag.IntVar(&connections, "connections", 1, "HTTP Range connections of the chunked writer (Options.Connections)")
	writerList := flag.String("writers", "", "comma-separated bench-install binaries (e.g. one built from another commit) whose write-child runs as a contender beside this binary's, alternating in the same run: an A/B of two writers on the same server, target and load; empty: this binary only")
	fullblock := flag.Bool("fullblock", false, "give the baseline's dd iflag=fullblock: without it dd writes each short read from the pipe (64 KiB-1 MiB) as its own O_DIRECT write, as the plain shell pipeline does")
	decList := flag.String("decoders", "", "comma-separated Options.Decoder values (auto, cure-zstd, klauspost-zstd, exec, go) each run alternately with the baseline, one row each (default: auto only)")
	printVersion := version.Flag(flag.CommandLine, "bench-install")
	flag.Parse()
	if printVersion(os.Stdout) {
		os.Exit(0)
	}
	decoders = []string{diskimage.DecoderAuto}
	if *decList != "" {
		decoders = strings.Split(*decList, ",")
		for i, d := range decoders {
			if d == "auto" {
				decoders[i] = diskimage.DecoderAuto
			}
		}
	}
	if *fullblock {
		ddIflag = "iflag=fullblock "
	}
	writers = []string{""}
	if *writerList != "" {
		writers = append(writers, strings.Split(*writerList, ",")...)
	}
	for _, v := range strings.Split(*verList, ",") {
		switch v {
		case "chunked":
			v = "chunked-" + chunklist.DefaultAlg.String()
		case "whole", "chunked-sha256", "chunked-blake3":
		default:
			fmt.Fprintf(os.Stderr, "bench-install: -verify %q: expected whole, chunked, chunked-sha256 or chunked-blake3\n", v)
			os.Exit(2)
		}
		verifies = append(verifies, v)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err := setCPUs(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-install:", err)
		os.Exit(1)
	}
	if err := run(*size, *zeroPct, *rssSize, *work, *useFile); err != nil {
		fmt.Fprintln(os.Stderr, "bench-install:", err)
		os.Exit(1)
	}
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	for suf, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if strings.HasSuffix(s, suf) {
			s, mult = strings.TrimSuffix(s, suf), m
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: expected a byte count with optional KiB/MiB/GiB", s)
	}
	n *= mult
	if n%block != 0 {
		return 0, fmt.Errorf("size %q: expected a multiple of 4 MiB", s)
	}
	return n, nil
}

type image struct {
	name   string
	raw    string // path
	size   int64
	rawSum string
}

func run(sizeFlag string, zeroPct int, rssFlag, work string, useFile bool) error {
	size, err := parseSize(sizeFlag)
	if err != nil {
		return err
	}
	rssSize, err := parseSize(rssFlag)
	if err != nil {
		return err
	}
	fetchCmd, err := baselineTools()
	if err != nil {
		return err
	}
	if work == "" {
		if work, err = os.MkdirTemp("/var/tmp", "bench-install-"); err != nil {
			return err
		}
		defer os.RemoveAll(work)
	}
	imgs, err := prepareImages(work, size, zeroPct)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(work))}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String() + "/"

	target, cleanup, err := makeTarget(work, size, useFile)
	if err != nil {
		return err
	}
	defer cleanup()
	fmt.Printf("target: %s\n\n", target)

	fmt.Printf("mostly-zero = %d%% of 4 MiB blocks zero; filesystem = ext4 holding %s; medians of %d alternating runs; contenders on %d cores; baseline dd %s\n\n", zeroPct, fsSource, runs, cpus, cmp.Or(ddIflag, "without iflag=fullblock"))
	fmt.Printf("%-16s %-6s %12s %12s %12s %7s %9s %10s %9s  %s\n", "image", "codec", "ceiling", "baseline", "writer", "ratio", "/ceiling", "writer RSS", "zero", "decoder")
	var lines []string // one script-readable line per image and codec, printed last
	for _, im := range imgs {
		for _, codec := range []benchCodec{
			{"zst", diskimage.FormatZstd, "zstd -dc"}, {"gz", diskimage.FormatGzip, "gzip -dc"},
		} {
			if onlyCodec != "" && onlyCodec != codec.ext {
				continue
			}
			l, err := benchImage(im, codec, base, target, fetchCmd)
			lines = append(lines, l...)
			if err != nil {
				return err
			}
		}
	}
	defer func() {
		fmt.Println()
		for _, l := range lines {
			fmt.Println(l)
		}
	}()
	if rssSize > 0 {
		l, err := benchRSS(work, base, rssFlag, rssSize, zeroPct)
		if err != nil {
			return err
		}
		lines = append(lines, l)
	}
	return nil
}

// baselineTools checks for what the baseline pipeline runs and returns
// its download command.
func baselineTools() (string, error) {
	for _, tool := range []string{"zstd", "gzip", "dd"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("%s not installed: the baseline needs it", tool)
		}
	}
	if _, err := exec.LookPath("curl"); err == nil {
		return "curl -sf", nil
	}
	if _, err := exec.LookPath("wget"); err != nil {
		return "", fmt.Errorf("neither curl nor wget is installed for the baseline")
	}
	return "wget -qO-", nil
}

// prepareImages generates the images and their .zst and .gz in work
// (reused from an earlier run with -reuse).
func prepareImages(work string, size int64, zeroPct int) ([]image, error) {
	imgs := []image{{name: "incompressible"}, {name: "mostly-zero"}}
	if fsSource != "" {
		if _, err := exec.LookPath("mkfs.ext4"); err != nil {
			fmt.Println("mkfs.ext4 not installed: no filesystem image")
		} else {
			imgs = append(imgs, image{name: "filesystem"})
		}
	}
	for i := range imgs {
		im := &imgs[i]
		im.raw, im.size = filepath.Join(work, im.name+".raw"), size
		fmt.Printf("generating %s image (%d MiB) and its .zst/.gz ...\n", im.name, size>>20)
		pct := 0
		if i == 1 {
			pct = zeroPct
		}
		sumFile := fmt.Sprintf("%s.%d.%d.sha256", im.raw, size, pct)
		if b, err := os.ReadFile(sumFile); err == nil && reuse {
			im.rawSum = string(b)
			continue
		}
		var err error
		if im.name == "filesystem" {
			// A real filesystem: compressed blocks, metadata, zero tails.
			if err := sh(fmt.Sprintf("rm -f %q && truncate -s %d %q && mkfs.ext4 -q -F -E root_owner=0:0 -d %q %q", im.raw, size, im.raw, fsSource, im.raw)); err != nil {
				return nil, fmt.Errorf("filesystem image from %s (use -fs-source with a smaller tree, or a larger -size): %w", fsSource, err)
			}
			if im.rawSum, err = fileSumOnly(im.raw); err != nil {
				return nil, err
			}
		} else if im.rawSum, err = generate(im.raw, size, pct); err != nil {
			return nil, err
		}
		if err := sh(fmt.Sprintf("zstd -q -T0 -3 -f %q -o %q.zst && gzip -1 -c %q > %q.gz", im.raw, im.raw, im.raw, im.raw)); err != nil {
			return nil, err
		}
		if reuse {
			os.WriteFile(sumFile, []byte(im.rawSum), 0o644)
		}
	}
	return imgs, nil
}

type benchCodec struct{ ext, format, dec string }

// benchImage runs the ceiling, the baseline and every contender on one
// image and codec, alternating, and prints the medians; it returns the
// script-readable lines.
func benchImage(im image, codec benchCodec, base, target, fetchCmd string) ([]string, error) {
	art := im.raw + "." + codec.ext
	u := base + filepath.Base(art)
	// Alternate the contenders so drift in the machine's load
	// (a shared VM) lands on both; compare medians.
	// With -decoders, each run has the baseline then every decoder.
	var baseDurs, ceilDurs []time.Duration
	type contender struct{ dec, verify, exe string }
	var cs []contender
	for _, d := range decoders {
		for _, v := range verifies {
			for _, exe := range writers {
				cs = append(cs, contender{d, v, exe})
			}
		}
	}
	writerDurs := make([][]time.Duration, len(cs))
	ws := make([]*childResult, len(cs))
	for r := 0; r < runs; r++ {
		// The ceiling: the image's decompressed bytes written to the
		// same target with O_DIRECT, nothing to fetch or decode.
		t0 := time.Now()
		if err := shPinned(fmt.Sprintf("dd if=%q of=%q bs=4M oflag=direct status=none", im.raw, target)); err != nil {
			return nil, fmt.Errorf("ceiling %s: %w", im.raw, err)
		}
		ceilDurs = append(ceilDurs, time.Since(t0))
		t0 = time.Now()
		// Under -cpus the whole pipeline is pinned, curl included:
		// the writer's download is its own work too.
		if err := shPinned(fmt.Sprintf("%s %q | %s | dd of=%q bs=4M %soflag=direct status=none", fetchCmd, u, codec.dec, target, ddIflag)); err != nil {
			return nil, fmt.Errorf("baseline %s: %w", art, err)
		}
		baseDurs = append(baseDurs, time.Since(t0))
		// Each run starts with the next contender, so none always runs
		// right after the baseline.
		for k := range cs {
			i := (k + r) % len(cs)
			c := cs[i]
			w, err := runChild(u, art, codec.format, target, c.dec, c.verify, c.exe)
			if err != nil {
				return nil, err
			}
			ws[i] = w
			writerDurs[i] = append(writerDurs[i], w.wall)
			if err := verifyRaw(target, im.size, im.rawSum); err != nil {
				return nil, fmt.Errorf("writer output for %s (decoder %q, %s) does not read back: %w", art, c.dec, c.verify, err)
			}
		}
	}
	bm := mbps(im.size, median(baseDurs))
	cm := mbps(im.size, median(ceilDurs))
	var lines []string
	for i, w := range ws {
		wm := mbps(im.size, median(writerDurs[i]))
		writer := ""
		if cs[i].exe != "" {
			writer = " writer=" + filepath.Base(cs[i].exe)
		}
		fmt.Printf("%-16s %-6s %7.0f MB/s %7.0f MB/s %7.0f MB/s %6.2fx %8.2fx %6d MiB %8.0f%%  %s, %s x%d\n",
			im.name, codec.ext, cm, bm, wm, wm/bm, wm/cm, w.maxRSS>>20, 100*float64(w.res.ZeroBytes)/float64(im.size), w.res.Decoder, w.res.Verification, w.res.Connections)
		st := w.res.Stages
		fmt.Printf("  %s stages of the last run: download %s, decode %s, write %s\n", writer, st.Download.Round(time.Millisecond), st.Decode.Round(time.Millisecond), st.Write.Round(time.Millisecond))
		lines = append(lines, fmt.Sprintf("bench-install image=%s codec=%s ceiling_mbs=%.0f writer_mbs=%.0f ratio_to_ceiling=%.2f ratio_to_pipeline=%.2f decoder=%s verification=%s connections=%d cpus=%d runs=%d",
			im.name, codec.ext, cm, wm, wm/cm, wm/bm, strings.ReplaceAll(w.res.Decoder, " ", "_"), w.res.Verification, w.res.Connections, cpus, runs)+writer)
	}
	return lines, nil
}

// benchRSS writes a large mostly-zero image to a sparse file and reports
// the writer's peak RSS.
func benchRSS(work, base, rssFlag string, rssSize int64, zeroPct int) (string, error) {
	fmt.Printf("\npeak RSS for a %s mostly-zero image (zstd, sparse file target):\n", rssFlag)
	art := filepath.Join(work, "big.raw.zst")
	bigSum, err := generateZstd(art, rssSize, zeroPct)
	if err != nil {
		return "", err
	}
	big := filepath.Join(work, "big.target")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		return "", err
	}
	defer os.Remove(big)
	w, err := runChild(base+filepath.Base(art), art, diskimage.FormatZstd, big, diskimage.DecoderAuto, verifies[len(verifies)-1], "")
	if err != nil {
		return "", err
	}
	verdict := "OK (<= 256 MiB)"
	if w.maxRSS > rssLimit {
		verdict = "OVER the 256 MiB aim"
	}
	if err := verifyRaw(big, rssSize, bigSum); err != nil {
		return "", fmt.Errorf("writer output for %s does not read back: %w", art, err)
	}
	rssMiB := (w.maxRSS + 1<<20 - 1) >> 20 // rounded up
	fmt.Printf("  %d MiB written in %s (%.0f MB/s), peak RSS %d MiB: %s\n", rssSize>>20, w.wall.Round(time.Millisecond), mbps(rssSize, w.wall), rssMiB, verdict)
	return fmt.Sprintf("bench-install image=mostly-zero-%s codec=zst writer_mbs=%.0f rss_mib=%d rss_limit_mib=%d decoder=%s verification=%s connections=%d cpus=%d",
		rssFlag, mbps(rssSize, w.wall), rssMiB, rssLimit>>20, strings.ReplaceAll(w.res.Decoder, " ", "_"), w.res.Verification, w.res.Connections, cpus), nil
}

func mbps(n int64, d time.Duration) float64 { return float64(n) / 1e6 / d.Seconds() }

func sh(script string) error { return runScript(nil, script) }

// shPinned runs script on the contenders' cores (-cpus).
func shPinned(script string) error { return runScript(strings.Fields(pin), script) }

func runScript(prefix []string, script string) error {
	args := append(prefix, "bash", "-o", "pipefail", "-c", script)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", script, err)
	}
	return nil
}

// makeTarget attaches a loop device (direct I/O to a sparse backing file)
// so both contenders write a block device; a regular file otherwise.
func makeTarget(work string, size int64, useFile bool) (string, func(), error) {
	backing := filepath.Join(work, "target.img")
	f, err := os.Create(backing)
	if err != nil {
		return "", nil, err
	}
	f.Close()
	if err := os.Truncate(backing, size); err != nil {
		return "", nil, err
	}
	if useFile {
		return backing, func() {}, nil
	}
	out, err := exec.Command("losetup", "--find", "--show", "--partscan", "--direct-io=on", backing).Output()
	if err != nil {
		fmt.Printf("losetup unavailable (%v): using a regular file\n", err)
		return backing, func() {}, nil
	}
	loop := strings.TrimSpace(string(out))
	return loop, func() { exec.Command("losetup", "--detach", loop).Run() }, nil
}

// generate writes a raw image: random 4 MiB blocks, of which zeroPct
// percent (chosen deterministically) are zeros. It returns the sha256.
func generate(path string, size int64, zeroPct int) (string, error) {
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	w := io.MultiWriter(f, h)
	if err := blocks(size, zeroPct, func(b []byte) error { _, err := w.Write(b); return err }); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), f.Close()
}

func blocks(size int64, zeroPct int, emit func([]byte) error) error {
	var seed [32]byte
	rng := rand.NewChaCha8(seed)
	buf, zero := make([]byte, block), make([]byte, block)
	for i := int64(0); i < size/block; i++ {
		var k [8]byte
		binary.LittleEndian.PutUint64(k[:], uint64(i))
		s := sha256.Sum256(k[:])
		b := buf
		if int(s[0])%100 < zeroPct {
			b = zero
		} else {
			rng.Read(buf)
		}
		if err := emit(b); err != nil {
			return err
		}
	}
	return nil
}

// generateZstd writes the big RSS-check image compressed, without the raw
// file ever existing on disk, and returns the raw image's sha256.
func generateZstd(path string, size int64, zeroPct int) (string, error) {
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	enc, err := zstd.NewWriter(f, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		return "", err
	}
	h := sha256.New()
	if err := blocks(size, zeroPct, func(b []byte) error { h.Write(b); _, err := enc.Write(b); return err }); err != nil {
		return "", err
	}
	if err := enc.Close(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), f.Close()
}

type childResult struct {
	res    diskimage.Result
	wall   time.Duration
	maxRSS int64
}

// chunkList makes (once) the chunk list of art for verify
// ("chunked-ALG") beside it, as `provisioner-lite artifacts add` would,
// and returns its file name and sha256.
func chunkList(art, verify string) (string, string, error) {
	alg, err := chunklist.ParseAlg(strings.TrimPrefix(verify, "chunked-"))
	if err != nil {
		return "", "", err
	}
	p := art + "." + alg.String() + ".chunks"
	if b, err := os.ReadFile(p); err == nil && reuse {
		return p, chunklist.SumHex(b), nil
	}
	f, err := os.Open(art)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	l, err := chunklist.Build(f, alg, chunklist.DefaultChunk)
	if err != nil {
		return "", "", err
	}
	b := l.Marshal()
	return p, chunklist.SumHex(b), os.WriteFile(p, b, 0o644)
}

var sums = map[string][2]string{} // artifact → sha256, size: computed once

// runChild runs the writer in a fresh process of this binary.
// exe, when set, is another bench-install binary whose write-child runs.
func runChild(u, art, format, target, decoder, verify, exe string) (*childResult, error) {
	if _, ok := sums[art]; !ok {
		sum, size, err := fileSum(art)
		if err != nil {
			return nil, err
		}
		sums[art] = [2]string{sum, strconv.FormatInt(size, 10)}
	}
	sum, size := sums[art][0], sums[art][1]
	var chunksURL, chunksSum string
	if verify != "whole" {
		p, s, err := chunkList(art, verify)
		if err != nil {
			return nil, fmt.Errorf("chunk list of %s: %w", art, err)
		}
		chunksURL, chunksSum = strings.TrimSuffix(u, filepath.Base(art))+filepath.Base(p), s
	}
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	args := []string{exe, "write-child", u, sum, size, format, target}
	if pin != "" {
		args = append(strings.Fields(pin), args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = os.Environ()
	if decoder != "" {
		cmd.Env = append(cmd.Env, "BENCH_DECODER="+decoder)
	}
	if chunksURL != "" {
		cmd.Env = append(cmd.Env, "BENCH_CHUNKS_URL="+chunksURL, "BENCH_CHUNKS_SHA256="+chunksSum, "BENCH_CONNECTIONS="+strconv.Itoa(connections))
	}
	if cpuProfileDir != "" {
		// One profile per run: `go tool pprof -top DIR/X.run*.pprof`
		// merges them, and one 1 GiB run alone has ~100 samples.
		key := art + exe
		profileRuns[key]++
		name := filepath.Base(art)
		if exe != self() {
			name += "." + filepath.Base(exe)
		}
		cmd.Env = append(cmd.Env, "BENCH_CPUPROFILE="+filepath.Join(cpuProfileDir, fmt.Sprintf("%s.run%d.pprof", name, profileRuns[key])))
	}
	cmd.Stderr = os.Stderr
	t0 := time.Now()
	out, err := cmd.Output()
	wall := time.Since(t0)
	if err != nil {
		return nil, fmt.Errorf("writer on %s: %w", art, err)
	}
	var co childOut
	if err := json.Unmarshal(out, &co); err != nil {
		return nil, fmt.Errorf("writer output %q: %w", out, err)
	}
	// The writer's peak plus the decoder's, as if both peaked at once.
	r := childResult{res: co.Result, wall: wall, maxRSS: co.SelfMaxRSS + co.DecoderMaxRSS}
	return &r, nil
}

func self() string {
	exe, _ := os.Executable()
	return exe
}

func fileSum(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

func child(args []string) {
	if len(args) != 5 {
		fmt.Fprintln(os.Stderr, "write-child URL SHA256 SIZE FORMAT TARGET")
		os.Exit(2)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	size, _ := strconv.ParseInt(args[2], 10, 64)
	if p := os.Getenv("BENCH_CPUPROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	conns, _ := strconv.Atoi(os.Getenv("BENCH_CONNECTIONS"))
	res, err := diskimage.Write(context.Background(), diskimage.Options{URL: args[0], SHA256: args[1], Size: size, Format: args[3], Target: args[4], Decoder: os.Getenv("BENCH_DECODER"),
		ChunksURL: os.Getenv("BENCH_CHUNKS_URL"), ChunksSHA256: os.Getenv("BENCH_CHUNKS_SHA256"), Connections: conns})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
	// The decoder process (zstd(1), xz(1)) has its own peak RSS: wait4's
	// maxrss would report the larger of the two, the aim is about the sum.
	var self, dec syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &dec)
	json.NewEncoder(os.Stdout).Encode(childOut{Result: *res, SelfMaxRSS: self.Maxrss << 10, DecoderMaxRSS: dec.Maxrss << 10})
}

// childOut is the writer's result and peak RSS (Linux reports KiB).
type childOut struct {
	diskimage.Result
	SelfMaxRSS, DecoderMaxRSS int64
}

// verifyRaw checks the target against the raw image's sha256, independent
// of the writer's own read-back digest.
func verifyRaw(target string, size int64, want string) error {
	f, err := os.Open(target)
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeDevice != 0 {
		// Drop cached pages so the device itself is read.
		if err := unix.IoctlSetInt(int(f.Fd()), unix.BLKFLSBUF, 0); err != nil {
			return fmt.Errorf("BLKFLSBUF %s: %w", target, err)
		}
	}
	h := sha256.New()
	if _, err := io.CopyN(h, f, size); err != nil {
		return fmt.Errorf("read %s: %w", target, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("sha256 of the first %d bytes of %s is %s, the image's is %s", size, target, got, want)
	}
	return nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func fileSumOnly(p string) (string, error) {
	sum, _, err := fileSum(p)
	return sum, err
}

// setCPUs validates -cpus and, when it leaves cores over, moves this
// process (the HTTP server) onto them by re-executing itself under
// taskset; the contenders are then started under `taskset -c 0-(N-1)`,
// which sets their affinity whatever this process's is.
func setCPUs() error {
	n := runtime.NumCPU()
	if s := os.Getenv("BENCH_INSTALL_PINNED"); s != "" {
		// Re-executed: NumCPU is now the server's share.
		n, _ = strconv.Atoi(s)
	}
	if cpus == 0 || cpus == n {
		cpus, pin = n, ""
		return nil
	}
	if cpus < 0 || cpus > n {
		return fmt.Errorf("-cpus %d: this machine has %d cores", cpus, n)
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return fmt.Errorf("-cpus needs taskset (util-linux): %w", err)
	}
	pin = fmt.Sprintf("taskset -c 0-%d ", cpus-1)
	if os.Getenv("BENCH_INSTALL_PINNED") != "" {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command("taskset", append([]string{"-c", fmt.Sprintf("%d-%d", cpus, n-1), exe}, os.Args[1:]...)...)
	cmd.Env = append(os.Environ(), "BENCH_INSTALL_PINNED="+strconv.Itoa(n))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		os.Exit(ee.ExitCode())
	}
	if err != nil {
		return err
	}
	os.Exit(0)
	return nil
}
