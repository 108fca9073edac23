# joule — `make run` starts the agent with deploy/joule.toml; `make test` runs every test tier.
# Both install what is missing first (scripts/install-deps.sh; idempotent and quiet): `make run`
# what building and running need, `make test` also the test tiers' tools.
# `make deb` builds the Debian package, `make install` installs from source (docs/deploy.md).
CARGO ?= cargo
CONFIG ?= deploy/joule.toml
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
JOULE := $(TARGET_DIR)/release/joule
export PATH := $(HOME)/.cargo/bin:$(PATH)

# `sudo make run|install` from a user's checkout: root has no cargo and must not write the
# user's ~/.cargo, so cargo builds as that user (SUDO_USER) with their toolchain; only what
# needs root (installing packages and files, the agent) runs as root.
ifneq ($(and $(SUDO_USER),$(filter-out root,$(SUDO_USER)),$(filter 0,$(shell id -u))),)
SUDO_HOME := $(shell getent passwd $(SUDO_USER) | cut -d: -f6)
AS_BUILDER := sudo --preserve-env=CARGO_TARGET_DIR -u $(SUDO_USER) env HOME=$(SUDO_HOME) PATH=$(SUDO_HOME)/.cargo/bin:$(PATH)
endif

# make install: the layout of the Debian package under PREFIX (scripts/install-files.sh);
# /etc/joule/joule.toml only when there is none.
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
UNITDIR ?= $(PREFIX)/lib/systemd/system
MANDIR ?= $(PREFIX)/share/man
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
INSTALL_DIRS = DESTDIR=$(DESTDIR) PREFIX=$(PREFIX) BINDIR=$(BINDIR) UNITDIR=$(UNITDIR) MANDIR=$(MANDIR) \
	BASHCOMPDIR=$(BASHCOMPDIR) ZSHCOMPDIR=$(ZSHCOMPDIR) FISHCOMPDIR=$(FISHCOMPDIR)

.PHONY: all deps test-deps build build-arm64 build-armhf run test test-unit test-root test-vm vm-deps restore image clean fuzz deb deb-arm64 deb-armhf install uninstall

all: build

deps:
	@bash scripts/install-deps.sh build

test-deps:
	@bash scripts/install-deps.sh test

build: deps
	$(AS_BUILDER) $(CARGO) build --release --workspace --locked

# As root the agent reads only a config root owns on a path only root can change
# (docs/security.md); a checkout in a user's home is neither, so `sudo make run` runs it from
# a root-owned copy of $(CONFIG) and says so.
run: build
	@cfg=$(CONFIG); \
	if [ "$$(id -u)" = 0 ] && [ "$$(stat -c %u $(CONFIG))" != 0 ]; then \
	  cfg=/run/joule-make-run.toml; install -m 0600 -o root -g root $(CONFIG) $$cfg; \
	  echo "make run: $(CONFIG) is not root's; the agent reads a copy root owns: $$cfg"; \
	fi; \
	exec $(JOULE) agent --config $$cfg

# The Debian packages, target/deb/joule_<version>_<arch>.deb and joule-dbgsym_..., offline
# from the release binary (scripts/deb.sh; lintian checks them).
deb: build
	@bash scripts/deb.sh $(JOULE)

# The arm64 package, from the cross build (man pages and completions written by this machine's
# joule from the same clap definitions): target/deb/joule_<version>_arm64.deb.
deb-arm64: build build-arm64
	@DEB_ARCH=arm64 JOULE_GEN=$(JOULE) bash scripts/deb.sh target/aarch64-unknown-linux-gnu/release/joule

# The armhf package (Odroid-XU4 and other armv7 boards), the same way:
# target/deb/joule_<version>_armhf.deb.
deb-armhf: build build-armhf
	@DEB_ARCH=armhf JOULE_GEN=$(JOULE) bash scripts/deb.sh target/armv7-unknown-linux-gnueabihf/release/joule

install: build
	@$(INSTALL_DIRS) bash scripts/install-files.sh $(JOULE)
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
	@echo "installed $(BINDIR)/joule; nothing is enabled: systemctl enable --now joule starts the agent"

# Stops and disables the unit first (its ExecStopPost restores what the agent changed); keeps
# /etc/joule/joule.toml (rm -r /etc/joule to remove it).
uninstall:
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ] && [ -e $(UNITDIR)/joule.service ]; then systemctl disable --now joule.service 2>/dev/null || true; fi
	rm -f $(DESTDIR)$(BINDIR)/joule $(DESTDIR)$(UNITDIR)/joule.service $(DESTDIR)$(MANDIR)/man1/joule.1.gz $(DESTDIR)$(MANDIR)/man1/joule-*.1.gz \
	  $(DESTDIR)$(BASHCOMPDIR)/joule $(DESTDIR)$(ZSHCOMPDIR)/_joule $(DESTDIR)$(FISHCOMPDIR)/joule.fish
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
	@echo "kept /etc/joule/joule.toml"

# joule for aarch64 (Raspberry Pi 5, RK3588 boards; docs/arm64.md): on an x86_64 host a cross
# build with Debian's gcc-aarch64-linux-gnu (scripts/arm64/setup.sh cross installs it), natively
# on an aarch64 host. Writes target/aarch64-unknown-linux-gnu/release/joule, and joule-bpf's root
# tests beside it for the arm64 guest.
build-arm64: deps
	@bash scripts/arm64/setup.sh cross
	@bash scripts/arm64/build.sh

# joule for armv7 hard-float (Odroid-XU4 and other 32-bit boards; docs/arm64.md), by the same
# scripts with DEB_ARCH=armhf: Debian's gcc-arm-linux-gnueabihf on an x86_64 host. Writes
# target/armv7-unknown-linux-gnueabihf/release/joule (no root tests: Debian's armhf kernels have
# no BTF to load them with).
build-armhf: deps
	@DEB_ARCH=armhf bash scripts/arm64/setup.sh cross
	@DEB_ARCH=armhf bash scripts/arm64/build.sh

# Tier 1: no root, fixture trees. Tier 2: this kernel, as root. Tier 3: a VM with a newer kernel
# (sched_ext, a real ACPI thermal zone, pure cgroup v2) for what this kernel lacks, the systemd
# guest, and the arm64 and armhf guests running the aarch64 and armv7 builds.
# Tests build with --release so they share compiled dependencies with the release binary
# that `make run` and the VM tier use (one build of everything instead of two).
# Each tier prints how many tests ran, passed, failed and skipped (scripts/test-tier.sh); tiers 2
# and 3 run where bpffs, tracefs and debugfs are unmounted as on a fresh machine
# (scripts/fresh-mounts.sh), and `make test` fails when the tiers left anything behind
# (scripts/check-leftovers.sh).
TIER_SUMMARY ?= target/tier-summary.txt
export JOULE_TIER_SUMMARY := $(abspath $(TIER_SUMMARY))

test: build build-arm64 build-armhf vm-deps deb-arm64 deb-armhf
	@mkdir -p target && rm -f $(TIER_SUMMARY) $(TIER_SUMMARY).failures
	@bash scripts/check-leftovers.sh save target/leftovers-before.txt
	@# Every tier runs even when one fails (-k), so one run says all that is wrong; then the
	@# leftovers check and the totals, and the first failure's status.
	@rc=0; $(MAKE) -k --no-print-directory test-unit test-root test-vm || rc=$$?; \
	bash scripts/check-leftovers.sh compare target/leftovers-before.txt || rc=1; \
	bash scripts/test-summary.sh $(TIER_SUMMARY) || rc=1; exit $$rc

# The unit tier also holds the house rules: rustfmt.toml's format, clippy (workspace lints in
# Cargo.toml) without a warning.
test-unit: test-deps
	$(CARGO) fmt --all --check
	$(CARGO) clippy --release --workspace --all-targets --locked -- -D warnings
	@bash scripts/test-tier.sh unit $(CARGO) test --release --workspace --locked --no-fail-fast

test-root: test-deps
	@bash scripts/test-tier.sh root bash scripts/fresh-mounts.sh $(CARGO) test --release --workspace --locked --no-fail-fast -- --ignored root_ --test-threads=1

vm-deps: test-deps
	@bash scripts/vm/setup.sh
	@bash scripts/arm64/setup.sh guest
	@DEB_ARCH=armhf bash scripts/arm64/setup.sh guest

# Two lanes at once where there are two CPUs (each TCG guest is one host thread): the systemd
# guest beside all the others (scripts/vm/lanes.sh). Its build of the test binaries also builds
# joule-bpf's example scx_other, the coexistence check's other scheduler (docs/vm.md).
test-vm: build build-arm64 build-armhf vm-deps deb # the package's check installs target/deb/joule_*.deb in the systemd guest
	@bash scripts/test-tier.sh vm bash scripts/fresh-mounts.sh bash scripts/vm/lanes.sh $(CARGO)

restore: build
	$(JOULE) restore

# The DaemonSet's image, localhost/joule:<crate version>, as the OCI archive target/joule-image.tar:
# written offline from the release binary with tar and sha256sum (scripts/image.sh: no builder, no
# base image); scripts/kube/load-image.sh loads it into a node's containerd (docs/deploy.md). The
# root tier builds and loads its own from the same scripts (joule-kube/tests/root_image_import.rs).
image: build
	@bash scripts/image.sh $(JOULE)

clean:
	$(CARGO) clean

# Fuzz the config loader, the journal reader and the /proc parsers (needs a nightly toolchain and cargo-fuzz;
# `make test` replays their corpus on stable: joule-core/tests/fuzz_corpus.rs).
fuzz:
	cd fuzz && cargo +nightly fuzz run config -- -max_total_time=60 && cargo +nightly fuzz run journal -- -max_total_time=60 && cargo +nightly fuzz run procfs -- -max_total_time=60
