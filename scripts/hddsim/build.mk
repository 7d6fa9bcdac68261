# build rules of scripts/hddsim (appends to BINARIES / CTESTS)
HDDSIM_DIR := scripts/hddsim
HDDSIM_MODEL := $(HDDSIM_DIR)/hdd_model.c $(HDDSIM_DIR)/ssd_model.c
BINARIES += $(BUILD)/hddsim
CTESTS += $(BUILD)/test_hddsim_model

$(BUILD)/hddsim: $(HDDSIM_DIR)/hddsim.c $(HDDSIM_MODEL) $(HDDSIM_DIR)/model.h | $(BUILD)
	$(CC) $(CFLAGS) $$(pkg-config --cflags fuse3) -o $@ $(HDDSIM_DIR)/hddsim.c $(HDDSIM_MODEL) $$(pkg-config --libs fuse3) -lm

$(BUILD)/test_hddsim_model: $(HDDSIM_DIR)/test_model.c $(HDDSIM_MODEL) $(HDDSIM_DIR)/model.h | $(BUILD)
	$(CC) $(CFLAGS) -o $@ $(HDDSIM_DIR)/test_model.c $(HDDSIM_MODEL) -lm
