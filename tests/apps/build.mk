# build rules of tests/apps (appends to BINARIES / CTESTS)

# synthlaunch: the deterministic synthetic launch program (see tests/apps/synthlaunch.c)
BINARIES += $(BUILD)/synthlaunch
$(BUILD)/synthlaunch: tests/apps/synthlaunch.c | $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< -lpthread
