# build rules of launchd-hook (appends to BINARIES / CTESTS)
