# joule — `make run` starts the agent with deploy/joule.toml; `make test` runs every test tier.
# Both install what is missing first (scripts/install-deps.sh; idempotent and quiet).
CARGO ?= cargo
CONFIG ?= deploy/joule.toml
JOULE := target/release/joule
export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: all deps build run test test-unit test-root test-vm vm-deps restore image clean

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	$(CARGO) build --release --workspace --locked

run: build
	$(JOULE) agent --config $(CONFIG)

# Tier 1: no root, fixture trees. Tier 2: this kernel, as root. Tier 3: sched_ext kernel in a VM.
# Tests build with --release so they share compiled dependencies with the release binary
# that `make run` and the VM tier use (one build of everything instead of two).
test: build test-unit test-root test-vm
	@echo "make test: all three tiers passed"

test-unit: deps
	$(CARGO) test --release --workspace --locked

test-root: deps
	$(CARGO) test --release --workspace --locked -- --ignored root_ --test-threads=1

vm-deps: deps
	@bash scripts/vm/setup.sh

test-vm: build vm-deps
	$(CARGO) test --release --workspace --locked -- --ignored vm_ --test-threads=1

restore: build
	$(JOULE) restore

# The DaemonSet's image, localhost/joule:<crate version>, built offline from the release binary
# (deploy/Containerfile, FROM scratch) with buildah, which it installs if missing; also writes
# the OCI archive target/joule-image.tar. Not part of `make test`.
image: build
	@bash scripts/image.sh

clean:
	$(CARGO) clean
