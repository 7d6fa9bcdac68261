# the fuzzer of the binary readers (appends to BINARIES; tests/test_fuzz_formats.py runs it)
FUZZ_CFLAGS := -O1 -g -Wall -Wextra -D_GNU_SOURCE -fsanitize=address,undefined -fno-sanitize-recover=all \
               -fno-omit-frame-pointer

BINARIES += $(BUILD)/fuzz-formats

$(BUILD)/fuzz-formats: tests/fuzz/fuzz_formats.c replayer/wsr_format.c launchd-hook/index.c \
		replayer/wsr_format.h launchd-hook/index.h $(WSR_LAYOUT) $(INDEX_LAYOUT) | $(BUILD)
	$(CC) $(FUZZ_CFLAGS) $(LAYOUT_CFLAGS) -o $@ $(filter %.c,$^)
