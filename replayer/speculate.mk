# build rules of the speculative pre-executor (appends to HELPERS, BINARIES, CTESTS); docs/speculation.md
SPEC_SRC := replayer/speculate/main.c replayer/speculate/sandbox.c replayer/speculate/filter.c \
            replayer/speculate/notify.c replayer/speculate/fdpass.c
HELPERS += $(BUILD)/ws-spec-run

$(BUILD)/ws-spec-run: $(SPEC_SRC) replayer/speculate/spec.h | $(BUILD)
	$(CC) $(CFLAGS) -o $@ $(SPEC_SRC) -lpthread
