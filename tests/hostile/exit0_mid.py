"""Exits 0 partway through the campaign, after a few wrong answers: an older passing record must
not become this run's verdict."""
import sys

from tests.hostile._common import entry, wrong_abs

calls = [0]


def forward(a):
    calls[0] += 1
    if calls[0] == 5:
        sys.exit(0)
    return wrong_abs(a)


ENTRIES = entry("exit0_mid", forward)
