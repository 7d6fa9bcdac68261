# build rules of the O_DIRECT+libaio timing probe (appends to HELPERS, BINARIES, CTESTS)
HELPERS += $(BUILD)/warmstart-probe

$(BUILD)/warmstart-probe: replayer/probe.c | $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< -laio
