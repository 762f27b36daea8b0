"""Exits 0 while it is imported: the run must not read that as success."""
import sys

sys.exit(0)
