# agent-sandbox: the two commands of the README, and the targets developers use.
#
#   sudo make run    install what is missing, build what running needs, build the base
#                    template, run sandboxd
#   sudo make test   install what is missing, build all three build trees, run every suite
#
# Both do all set-up themselves on a fresh Debian 12 machine. Meson and Ninja do the real
# building; this file only strings the steps together.

SHELL := /bin/bash
.DEFAULT_GOAL := build
.NOTPARALLEL:

BUILD        ?= build
ASAN_BUILD   ?= build-asan
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 60
NINJA_FLAGS  ?=

ASAN_OPTIONS_MESON := -Db_sanitize=address,undefined -Db_lundef=false
FUZZ_OPTIONS_MESON := -Dfuzz=true -Dstatic_agent=false $(ASAN_OPTIONS_MESON)

.PHONY: all build deps run run-build test asan fuzz fuzz-build format format-check templates \
	base-template kernel clean deb test-deb

all: build

# Debian packages (scripts/debian-packages.txt) and npm packages; only what is missing.
deps:
	@scripts/install-deps.sh

# build/: sandboxd, sandbox-agent and sandbox in build/src, build/agent and build/cli.
build: deps
	@scripts/meson-setup.sh $(BUILD)
	ninja -C $(BUILD) $(NINJA_FLAGS)

# build-asan/: everything with AddressSanitizer and UndefinedBehaviorSanitizer.
asan: deps
	@scripts/meson-setup.sh $(ASAN_BUILD) $(ASAN_OPTIONS_MESON)
	ninja -C $(ASAN_BUILD) $(NINJA_FLAGS)

# build-fuzz/: clang, with the libFuzzer targets of tests/fuzz.
fuzz-build: deps
	@CC=clang scripts/meson-setup.sh $(FUZZ_BUILD) $(FUZZ_OPTIONS_MESON)
	ninja -C $(FUZZ_BUILD) $(NINJA_FLAGS)

# Longer fuzzing than the test suite does: FUZZ_SECONDS per target.
fuzz: fuzz-build
	FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz.sh $(FUZZ_BUILD)

# The base template (its builder needs the agent). A recipe of its own, so that `make run`
# can build it after building only what running needs.
define build_base_template
	@if [ -f templates/build.sh ]; then \
		bash templates/build.sh base; \
	else \
		echo "templates/build.sh not found: the base template is not built"; \
	fi
endef

base-template: build
	$(build_base_template)

# Every bundled template (base first: the others may start from it).
templates: build
	@[ -f templates/build.sh ] || { echo "templates/build.sh not found" >&2; exit 1; }
	@for dir in templates/base/ templates/*/; do \
		name=$$(basename "$$dir"); \
		case " $$seen " in *" $$name "*) continue ;; esac; \
		seen="$$seen $$name"; \
		[ -f "$$dir/template.json" ] || continue; \
		bash templates/build.sh "$$name" || exit 1; \
	done

kernel: deps
	guest/kernel/build.sh

# What running needs, and nothing of the tests: the daemon, the agent, the CLI and the
# dashboard (ui/app.js names its target), from the Debian packages and the dashboard's npm
# packages only. `make build` and `make test` build everything.
RUN_TARGETS := src/sandboxd agent/sandbox-agent cli/sandbox ui/app.js

run-build:
	@scripts/install-deps.sh --debian --ui
	@scripts/meson-setup.sh $(BUILD)
	ninja -C $(BUILD) $(NINJA_FLAGS) $(RUN_TARGETS)

# Sessions default to the node template, as in the reference; until `make templates` has
# built it, `make run` defaults them to base instead (say SANDBOX_DEFAULT_TEMPLATE to choose).
run: run-build
	$(build_base_template)
	@if [ -z "$$SANDBOX_DEFAULT_TEMPLATE" ] && \
	    [ ! -f "$${FIRECRACKER_ARTIFACTS_DIR:-/var/lib/agent-sandbox/artifacts}/templates/node/template.json" ]; then \
		echo "make run: the node template is not built yet (make templates); sessions default to base"; \
		export SANDBOX_DEFAULT_TEMPLATE=base; \
	fi; \
	exec $(BUILD)/src/sandboxd

# scripts/test.sh builds the three trees and the base template itself (`make build`, `make
# asan`, `make fuzz-build`, `make base-template`), counting each as a test, so that a build
# error is reported with everything else rather than stopping the run; the guest kernel is
# built (or taken from its cache) in the background meanwhile. See docs/testing.md.
test: deps
	@BUILD=$(BUILD) ASAN_BUILD=$(ASAN_BUILD) FUZZ_BUILD=$(FUZZ_BUILD) scripts/test.sh

# The template builder's tests, and every bundled template built into the artifacts
# directory and tried in a session (see docs/templates.md, Testing).
test-templates: base-template
	@tests/templates/run.sh; s=$$?; TEMPLATE_TESTS=all tests/integration/run.sh tests/templates && exit $$s

# Debian packages (debhelper) into $(DEB_OUT): agent-sandbox and agent-sandbox-cli, then
# lintian on them. See docs/install.md.
DEB_OUT ?= build-deb
deb: deps
	@scripts/build-deb.sh $(DEB_OUT)

# The packages installed into a throw-away Debian 12 root (mmdebstrap), the daemon started
# there as its unit would start it, a session served, the CLI used by a member of its group.
test-deb: deps
	@scripts/test-deb.sh --build $(DEB_OUT)

format:
	git ls-files -z '*.c' '*.h' | xargs -0 -r clang-format -i

format-check:
	git ls-files -z '*.c' '*.h' | xargs -0 -r clang-format --dry-run -Werror

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
