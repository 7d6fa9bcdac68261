# build rules of tests/apps (appends to BINARIES / CTESTS)
