# build rules of launchd-hook (appends to HELPERS, BINARIES, CTESTS)
HOOK_DIR := launchd-hook
HOOK_COMMON := $(HOOK_DIR)/index.c
HOOK_HDRS := $(wildcard $(HOOK_DIR)/*.h) $(INDEX_LAYOUT)

HELPERS  += $(BUILD)/warmstartd $(BUILD)/libwarmstart-preload.so
BINARIES += $(BUILD)/warmstart-execbench   # the exec-overhead benchmark (docs/hook.md)
CTESTS   += $(BUILD)/test-hook-index

$(BUILD)/warmstartd: $(HOOK_DIR)/warmstartd.c $(HOOK_DIR)/worker.c $(HOOK_DIR)/base.c $(HOOK_DIR)/spawn.c \
		$(HOOK_DIR)/procinfo.c $(HOOK_COMMON) $(HOOK_HDRS) | $(BUILD)
	$(CC) $(CFLAGS) $(LAYOUT_CFLAGS) -o $@ $(filter %.c,$^)

# The shim runs inside every preloaded process: no libc state touched beyond what it restores.
$(BUILD)/libwarmstart-preload.so: $(HOOK_DIR)/preload.c $(HOOK_COMMON) $(HOOK_HDRS) | $(BUILD)
	$(CC) $(CFLAGS) $(LAYOUT_CFLAGS) -fPIC -shared -fvisibility=hidden -o $@ $(filter %.c,$^)

$(BUILD)/test-hook-index: $(HOOK_DIR)/test_index.c $(HOOK_COMMON) $(HOOK_HDRS) $(GEN)/hook_index_vectors.h | $(BUILD)
	$(CC) $(CFLAGS) $(LAYOUT_CFLAGS) -DVECTOR_DIR='"$(VECTORS)"' -o $@ $(filter %.c,$^)

$(BUILD)/warmstart-execbench: $(HOOK_DIR)/execbench.c | $(BUILD)
	$(CC) $(CFLAGS) -o $@ $<
