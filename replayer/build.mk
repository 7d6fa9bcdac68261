# build rules of replayer (appends to BINARIES / CTESTS)
