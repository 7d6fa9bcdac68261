"""Portable schedules: `warmstart export` / `warmstart import` (docs/portable-schedules.md).

A schedule keyed by file identity (path, size, SHA-256 of the scheduled bytes) instead of LBAs,
so one recording serves a fleet of identical machines: format.py (the .wsched file), export.py
(schedule -> file), import_.py (file -> local LBAs via FIEMAP -> the app's active schedule),
analyzer/ext4meta.py (the inode-table, directory and extent-tree blocks of the imported files).
"""
