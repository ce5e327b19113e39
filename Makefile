# CURE: `make demo` builds the image and provisions a QEMU node end to end;
# `make test` runs every test, the QEMU end-to-end ones included.
SHELL       := /bin/bash
GO          ?= go
KERNEL_ROOT := .cache/kernel/root
OUT         := out
export CGO_ENABLED := 0

.PHONY: all deps pki image hostos baseline toolbundle test unit e2e demo bench-boot clean man

all: image hostos

# DEPS_ROLE: what scripts/install-deps.sh installs (coordinator, image, tests,
# all); tests is what make test and make demo need.
DEPS_ROLE ?= tests
deps:
	@scripts/install-deps.sh $(DEPS_ROLE)

# The state dir whose CA the image trusts (cure-build --state-dir records its
# fingerprint in report.json; the coordinator refuses an image of another CA).
# The demo and tests use $(OUT) (its pki/ is copied into their state dirs); a
# site makes its own with `provisioner-lite init --state-dir state` and builds
# with `make image STATE=state`.
STATE ?= $(OUT)
pki: $(STATE)/pki/ca.pem $(STATE)/pki/secureboot.pem
$(STATE)/pki/ca.pem $(STATE)/pki/secureboot.pem:
	$(GO) run ./provisioner-lite/cmd/provisioner-lite pki --state-dir $(STATE)

# cure-nvml, the runner's NVML helper for gpu checks, needs cgo (go-nvml
# dlopens libnvidia-ml.so.1), so it is built apart from the cgo-free busybox.
# CURE_NVIDIA_LIB is the site's libnvidia-ml.so.1, from the NVIDIA driver
# release matching the GPUs (not redistributable here). The helper goes into
# the image only with an NVML to talk to (CURE_NVIDIA_LIB, or a driver bundle,
# whose lib/ carries it): without one it could never answer, and it is 1.26 MB
# of the compressed image. An image without it reports gpu checks on GPU nodes
# as SKIP "cure-nvml not in this image".
CURE_NVIDIA_LIB ?=
NVML_TOOLS = $(if $(CURE_NVIDIA_LIB)$(CURE_DRIVER_BUNDLE),--tool $(abspath $(OUT))/tools/cure-nvml:usr/bin/cure-nvml) \
	$(if $(CURE_NVIDIA_LIB),--tool $(CURE_NVIDIA_LIB):usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1)

.PHONY: nvml-helper
nvml-helper:
	CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" $(GO) build -trimpath -ldflags=-s -o $(OUT)/tools/cure-nvml ./tools/gpu/cmd/cure-nvml

# CURE_DRIVER_BUNDLE is the site's NVIDIA driver bundle (a directory or
# tarball: modules/ built for this kernel, firmware/, lib/, bin/, share/;
# see builder/driverbundle). cure-build refuses modules whose vermagic is
# not the kernel's, and report.json says what the bundle adds.
CURE_DRIVER_BUNDLE ?=

# The image pins the tool bundle it is built with (its sha256, size and
# tools at /etc/cure/toolbundle.json): cure-tools in the debug shell fetches
# nvme-cli and the other operator tools from it and refuses any other bundle.
image: deps pki nvml-helper toolbundle
	$(GO) run ./builder/cmd/cure-build --spec initramfs/cure.yaml --kernel-root $(KERNEL_ROOT) --state-dir $(STATE) --out $(OUT)/image $(NVML_TOOLS) \
		--pin-tool-bundle $(OUT)/toolbundle/toolbundle.json \
		$(if $(CURE_DRIVER_BUNDLE),--driver-bundle $(CURE_DRIVER_BUNDLE))

# The arm64 image (docs/ARM.md): the same spec's Go programs cross-compiled
# (GOARCH=arm64, cgo off: no cure-nvml, which needs cgo and an aarch64 C
# toolchain), Debian's arm64 kernel and modules from .cache/kernel-arm64
# (install-deps.sh image-arm64), no signed cure.efi (its stub is x86-64),
# no tool bundle pin (the bundle's tools are x86-64 builds).
KERNEL_ROOT_ARM64 := .cache/kernel-arm64/root
.PHONY: image-arm64
image-arm64: pki
	@scripts/install-deps.sh image-arm64
	$(GO) run ./builder/cmd/cure-build --arch arm64 --spec initramfs/cure.yaml --kernel-root $(KERNEL_ROOT_ARM64) --state-dir $(STATE) --out $(OUT)/image-arm64

# The arm64 test host OS's kernel and initramfs (make e2e-arm64): QEMU
# boots them directly with the node's disk attached (docs/ARM.md).
.PHONY: hostos-arm64
hostos-arm64:
	@scripts/install-deps.sh image-arm64
	$(GO) run ./builder/cmd/cure-build --arch arm64 --spec qemu-test/hostos/hostos.yaml --kernel-root $(KERNEL_ROOT_ARM64) --out $(OUT)/hostos-image-arm64

# CURE on Arm end to end (TestArm64Provision: an x86-64 and an arm64 node
# provisioned, their boot times logged as bench-arm64), and the arm64
# image's budget. aarch64 under TCG is slow, so make test runs the short
# proofs (TestBuildArm64, TestBootImageByArch, TestArm64DirectBoot).
.PHONY: e2e-arm64
e2e-arm64: image hostos toolbundle image-arm64 hostos-arm64
	CURE_OUT=$(CURDIR)/$(OUT) $(GO) test -count=1 -run '^TestImageBudget$$' -v ./builder/
	CURE_OUT=$(CURDIR)/$(OUT) $(GO) test -tags e2e_arm64 -timeout 60m -count=1 -v -run '^TestArm64Provision$$' ./qemu-test/

hostos: deps
	$(GO) run ./builder/cmd/cure-build --spec qemu-test/hostos/hostos.yaml --kernel-root $(KERNEL_ROOT) --out $(OUT)/hostos-image
	$(GO) run ./qemu-test/hostos/cmd/mkhostdisk --kernel $(OUT)/hostos-image/vmlinuz --initrd $(OUT)/hostos-image/initramfs.cpio.zst --out $(OUT)/hostos

baseline: deps
	$(GO) run ./builder/cmd/cure-build --baseline --kernel-root $(KERNEL_ROOT) --out $(OUT)/baseline

# fio, stress-ng, iperf3 and nvme-cli from their pinned Debian packages with
# their libraries (initramfs/toolbundle.yaml): too big for the image, served
# by the coordinator (--tool-bundle) and fetched by the runner when a suite
# needs them, or by cure-tools in the debug shell. docs/VALIDATION.md.
toolbundle: deps
	$(GO) run ./builder/cmd/cure-build --tool-bundle initramfs/toolbundle.yaml --out $(OUT)/toolbundle

unit:
	$(GO) test -short ./...

# Everything: unit tests, then the QEMU end-to-end tests against freshly built images.
# The QEMU suite runs in shuffled order (its tests must not depend on each
# other's order; the seed is printed for a rerun with -shuffle SEED).
# CURE_TEST_COMPLETE=1: this run is meant to be complete, so a test that
# needs what the machine lacks (root) fails naming it instead of skipping
# (tools/testenv).
test: export CURE_TEST_COMPLETE := 1
test: image hostos baseline toolbundle
	CURE_OUT=$(CURDIR)/$(OUT) $(GO) test -timeout 80m $$($(GO) list ./... | grep -v '/qemu-test$$')
	CURE_OUT=$(CURDIR)/$(OUT) $(GO) test -timeout 60m -shuffle on ./qemu-test/
	# NVML's Go bindings need cgo; the rest of the tree is built without it.
	CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" $(GO) test ./tools/gpu/...

# The static checks alone, in about a minute: go vet, the exhaustive
# analyzer over every enum switch, the function-length bound and the other
# repository rules (qemu-test/repocheck; make test runs them too).
.PHONY: check
check:
	$(GO) vet ./...
	$(GO) test -count=1 ./qemu-test/repocheck/

e2e: image hostos baseline toolbundle
	CURE_OUT=$(CURDIR)/$(OUT) $(GO) test -timeout 80m -v -count=1 -shuffle on ./qemu-test/

# TestSoftwareRAIDInstall (qemu-test/raid_e2e_test.go, in make test too): a
# node with three NVMe drives: an md RAID1 the image goes to, booting the
# installed OS from a member; this target runs it alone.
.PHONY: e2e-raid
e2e-raid: image hostos baseline toolbundle
	CURE_OUT=$(CURDIR)/$(OUT) $(GO) test -timeout 30m -v -count=1 -run '^TestSoftwareRAIDInstall$$' ./qemu-test/

# TestEnlistUnknownMachine (qemu-test/enlist_e2e_test.go, in make test
# too): a QEMU machine no nodes file names boots with --enlist, is
# discovered with its inventory and SMBIOS type 42 BMC record, approved,
# then provisioned; this target runs it alone.
.PHONY: e2e-enlist
e2e-enlist: image hostos baseline
	CURE_OUT=$(CURDIR)/$(OUT) $(GO) test -timeout 30m -v -count=1 -run '^TestEnlistUnknownMachine$$' ./qemu-test/

# TestLLDPCablingQEMU (qemu-test/lldp_e2e_test.go, in make test too): a
# node on a bridge in a network namespace, a Go sender on its tap announcing
# a switch, a cabling map naming another port: the report shows the
# neighbour and nic/eth0 cabling FAIL; this target runs it alone.
.PHONY: e2e-lldp
e2e-lldp: image hostos baseline
	CURE_OUT=$(CURDIR)/$(OUT) $(GO) test -timeout 30m -v -count=1 -run '^TestLLDPCablingQEMU$$' ./qemu-test/

demo: image hostos toolbundle
	$(GO) run ./qemu-test/cmd/cure-demo --out $(OUT) --work $(OUT)/demo

# Man pages of curectl and every command (troff, section 1).
man:
	$(GO) run ./provisioner-lite/cmd/curectl man --dir $(OUT)/man

# The .deb packages (cure-provisioner: provisioner-lite, curectl, systemd
# units, man pages, completions; cure-build: the image builder and its
# inputs) in $(OUT)/release, packed with the nfpm library (tools/release).
.PHONY: release
release:
	$(GO) run ./tools/release/cmd/cure-release --out $(OUT)/release

clean:
	rm -rf $(OUT)

# QEMU start → runner registered, against a bare kernel + trivial init (same run).
# Ends with the last run's breakdown (a bench-boot-stage line per stage) and
# its bench-boot line. CURE_BENCH_INITRD=initramfs.cpio.gz (or .zst) boots
# another compression of the same archive.
bench-boot: image baseline
	set -o pipefail; CURE_OUT=$(CURDIR)/$(OUT) $(GO) test -run '^$$' -bench BootToRegistered -benchtime 3x -timeout 30m -v ./qemu-test/ | tee $(OUT)/bench-boot.log
	@awk '/^bench-boot breakdown/{n=0} /^bench-boot/{last[n++]=$$0} END{for(i=0;i<n;i++) print last[i]}' $(OUT)/bench-boot.log

# The fleet simulator against the real coordinator at 1, 100, 1,000, 5,000 and
# 10,000 nodes (BENCH_FLEET_NODES=1,100 for a quick run): wall time against one
# node's (wall_ratio_healthy: the nodes without injected faults), first-pass
# success, faults named, coordinator RSS and CPU per node (rss_kib_per_node,
# cpu_ms_per_node), latencies, store commits per run. BENCH_FLEET_FLAGS adds
# flags: -profile DIR (coordinator CPU, heap and goroutine profiles),
# -coordinator BIN (measure another build), -scale N.
# TestInstanceKilledRunsTakenOver (qemu-test/fleet, build tag e2e_fleet):
# 40 simulated nodes on two instances sharing PostgreSQL, one SIGKILLed
# mid-batch, its runs taken over. make test runs the same takeover with
# three instances and nine nodes (TestThreeInstancesOnPostgres).
.PHONY: e2e-fleet
e2e-fleet:
	$(GO) test -tags e2e_fleet -timeout 20m -v -count=1 -run '^TestInstanceKilledRunsTakenOver$$' ./qemu-test/fleet/

.PHONY: bench-fleet
# The PostgreSQL line: the same simulator on a private PostgreSQL cluster
# at a modest size (BENCH_FLEET_PG_NODES), beside SQLite's line of that size.
BENCH_FLEET_PG_NODES ?= 1,1000
bench-fleet:
	$(GO) run ./qemu-test/fleet/cmd/bench-fleet $(BENCH_FLEET_FLAGS)
	$(GO) run ./qemu-test/fleet/cmd/bench-fleet -db postgres -nodes $(BENCH_FLEET_PG_NODES) $(BENCH_FLEET_FLAGS)

# The three-node node-pair burn-in (node3's link shaped, the batch names its
# port): about 8 minutes under TCG, so make test runs the two-node version.
.PHONY: bench-pairs
bench-pairs: image hostos toolbundle
	CURE_OUT=$(CURDIR)/$(OUT) CURE_PAIRS_FULL=1 $(GO) test -timeout 40m -count=1 -v -run '^TestNodePairBurnin$$' ./qemu-test/

# Every Go fuzz target in the module (found by scripts/fuzz.sh), one at a
# time for FUZZTIME each (default 30s); `make test` runs their seed corpora.
.PHONY: fuzz
fuzz:
	FUZZTIME="$(FUZZTIME)" GO="$(GO)" scripts/fuzz.sh

# Image writer vs `curl | zstd -dc | dd oflag=direct` (and gzip) on the same
# images and target in one run: MB/s, ratio, writer peak RSS (incompressible
# and mostly-zero images; 10 GiB RSS check). BENCH_INSTALL_FLAGS=-size=512MiB for a quick run;
# -decoders=cure-zstd,klauspost-zstd,exec,auto adds one row per zstd decoder, alternated in the same runs;
# -verify=whole,chunked-sha256,chunked-blake3 one row per verification (default: chunked, the chunk
# list `artifacts add` makes), -connections=N the chunked writer's Range connections. Each line names both.
.PHONY: bench-install
bench-install:
	$(GO) run ./tools/diskimage/cmd/bench-install $(BENCH_INSTALL_FLAGS)

# Regenerate api/curev1 from cure.proto (Debian protobuf-compiler 3.21.12,
# protoc-gen-go v1.36.6, protoc-gen-go-grpc v1.5.1: the versions the checked-in code names).
.PHONY: proto
proto:
	command -v protoc >/dev/null || apt-get install -y protobuf-compiler
	GOBIN=$(CURDIR)/bin $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.6
	GOBIN=$(CURDIR)/bin $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
	cd api/curev1 && PATH=$(CURDIR)/bin:$$PATH protoc --go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative cure.proto
