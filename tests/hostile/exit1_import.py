"""Exits 1 while it is imported."""
raise SystemExit(1)
