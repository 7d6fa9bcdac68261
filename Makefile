# warmstart: `make demo` and `make test` install what is missing, build, and run.
# C build products go to build/, never into the source folders.

BUILD   ?= $(CURDIR)/build
CC      ?= gcc
CFLAGS  ?= -O2 -g -Wall -Wextra -Werror=implicit-function-declaration -D_GNU_SOURCE
PYTHON  ?= python3

# Each C component appends the programs warmstart runs (record, analyze, run, hook, speculate)
# to HELPERS, its bench and test programs to BINARIES, and its C unit tests to CTESTS.
# `make helpers BUILD=DIR` is what `pip install` builds into the package (setup.py).
HELPERS  :=
BINARIES :=
CTESTS   :=
include scripts/hddsim/build.mk replayer/build.mk replayer/probe.mk replayer/speculate.mk tests/apps/build.mk launchd-hook/build.mk \
        tests/fuzz/build.mk

.PHONY: all deps build test ctest pytest demo clean
all: build

deps:
	@bash scripts/install-deps

build: deps
	@$(MAKE) --no-print-directory binaries

.PHONY: binaries helpers
binaries: $(HELPERS) $(BINARIES)

helpers: $(HELPERS)

$(BUILD):
	@mkdir -p $@

test: build
	@$(MAKE) --no-print-directory ctest
	$(PYTHON) -m pytest -q -rs tests

# C unit tests: each prints its own "N passed, N failed" line and exits non-zero on failure.
ctest: $(CTESTS)
	@set -e; for t in $(CTESTS); do $$t; done

demo: build
	$(PYTHON) scripts/demo.py

clean:
	rm -rf $(BUILD)
