# warmstart: `make demo` and `make test` install what is missing, build, and run.
# C build products go to build/, never into the source folders.

BUILD   ?= $(CURDIR)/build
CC      ?= gcc
CFLAGS  ?= -O2 -g -Wall -Wextra -Werror=implicit-function-declaration -D_GNU_SOURCE
PYTHON  ?= python3

# The binary formats shared with Python are defined once in warmstart/formats/; their C headers
# are generated from there into $(GEN) (never edited by hand). LAYOUT_CFLAGS finds them.
GEN           := $(BUILD)/gen
FORMAT_SPECS  := $(wildcard warmstart/formats/*.py)
LAYOUT_CFLAGS := -I$(GEN)
WSR_LAYOUT    := $(GEN)/wsr_layout.h
INDEX_LAYOUT  := $(GEN)/hook_index_layout.h
VECTORS       := $(CURDIR)/tests/vectors

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

$(BUILD) $(GEN):
	@mkdir -p $@

$(GEN)/%_layout.h: $(FORMAT_SPECS) | $(GEN)
	$(PYTHON) -m warmstart.formats.cheader $* > $@.tmp && mv $@.tmp $@

# what the C tests expect of the shared test vectors (tests/vectors/FORMAT.json)
$(GEN)/%_vectors.h: tests/vectors/%.json tests/vectors/vectors.py | $(GEN)
	$(PYTHON) tests/vectors/vectors.py c $* > $@.tmp && mv $@.tmp $@

test: build
	@$(MAKE) --no-print-directory ctest
	$(PYTHON) -m pytest -q -rs --durations=30 tests

# C unit tests: each prints its own "N passed, N failed" line and exits non-zero on failure.
ctest: $(CTESTS)
	@set -e; for t in $(CTESTS); do $$t; done

demo: build
	$(PYTHON) scripts/demo.py

clean:
	rm -rf $(BUILD)
