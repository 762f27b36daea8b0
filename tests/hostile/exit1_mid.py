"""Exits 1 at once (os._exit, no cleanup) partway through the campaign."""
import os

from tests.hostile._common import entry, wrong_abs

calls = [0]


def forward(a):
    calls[0] += 1
    if calls[0] == 3:
        os._exit(1)
    return wrong_abs(a)


ENTRIES = entry("exit1_mid", forward)
