"""The launch hook: what `warmstart hook install|uninstall|status` manages.

warmstartd (C, launchd-hook/) answers fanotify exec events; it never opens SQLite. This package
writes the compact index it reads (index.py, built from the database by entries.py), reads the
config (config.py), starts and stops the daemon (service.py), installs the LD_PRELOAD shim
(preload.py) and folds the daemon's launch and staleness records back into the database
(events.py).
"""
