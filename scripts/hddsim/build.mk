# build rules of scripts/hddsim (appends to BINARIES / CTESTS)
