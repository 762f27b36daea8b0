"""Writes a forged passing record where its capsule's record goes, on every call."""
from tests.hostile._common import entry, forge, wrong_abs


def forward(a):
    forge("write_record")
    return wrong_abs(a)


ENTRIES = entry("write_record", forward)
