# build rules of the speculative pre-executor (appends to HELPERS, BINARIES, CTESTS); docs/speculation.md
SPEC_SRC := replayer/speculate/main.c replayer/speculate/sandbox.c replayer/speculate/filter.c \
            replayer/speculate/notify.c replayer/speculate/fdpass.c
HELPERS += $(BUILD)/ws-spec-run
CTESTS  += $(BUILD)/test-spec-filter

$(BUILD)/ws-spec-run: $(SPEC_SRC) replayer/speculate/spec.h | $(BUILD)
	$(CC) $(CFLAGS) -o $@ $(SPEC_SRC) -lseccomp -lpthread

# the seccomp policy, call by call (filter.c as the copy installs it)
$(BUILD)/test-spec-filter: replayer/speculate/test_filter.c replayer/speculate/filter.c \
		replayer/speculate/fdpass.c replayer/speculate/spec.h | $(BUILD)
	$(CC) $(CFLAGS) -o $@ $(filter %.c,$^) -lseccomp -lpthread
