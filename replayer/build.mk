# build rules of replayer (appends to HELPERS, BINARIES, CTESTS)
REPLAY_SRC := replayer/wsr_format.c replayer/engine.c replayer/engine_ra.c replayer/engine_pread.c \
              replayer/engine_uring.c replayer/residency.c replayer/pressure.c replayer/replay.c \
              replayer/stats.c replayer/exitcheck.c replayer/appwatch.c replayer/fsmeta.c \
              replayer/pathopen.c
REPLAY_HDR := $(wildcard replayer/*.h) $(WSR_LAYOUT)

HELPERS  += $(BUILD)/warmstart-replay
CTESTS   += $(BUILD)/test-replay-format $(BUILD)/test-replay-core

$(BUILD)/warmstart-replay: replayer/main.c $(REPLAY_SRC) $(REPLAY_HDR) | $(BUILD)
	$(CC) $(CFLAGS) $(LAYOUT_CFLAGS) -o $@ replayer/main.c $(REPLAY_SRC) -luring -lpthread

$(BUILD)/test-replay-format: replayer/test_format.c replayer/wsr_format.c $(REPLAY_HDR) $(GEN)/wsr_vectors.h | $(BUILD)
	$(CC) $(CFLAGS) $(LAYOUT_CFLAGS) -DVECTOR_DIR='"$(VECTORS)"' -o $@ replayer/test_format.c replayer/wsr_format.c

$(BUILD)/test-replay-core: replayer/test_core.c $(REPLAY_SRC) $(REPLAY_HDR) | $(BUILD)
	$(CC) $(CFLAGS) $(LAYOUT_CFLAGS) -o $@ replayer/test_core.c $(REPLAY_SRC) -luring -lpthread
