# build rules of the O_DIRECT+libaio timing probe (appends to BINARIES / CTESTS)
BINARIES += $(BUILD)/warmstart-probe

$(BUILD)/warmstart-probe: replayer/probe.c | $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< -laio
