"""Benchmarks of the UI: the app headless, and the real TUI in a terminal."""
