# build rules of the O_DIRECT+libaio timing probe (appends to BINARIES / CTESTS)
