"""The page "capsules x devices": for an evidence directory a Dask run wrote (`run --cluster`,
conformance/cluster/), each device's own records (gpus/<device>/), capsules down and devices
(GPU model, UUID, driver, CUDA runtime, host; or a CPU worker) across, with each record's verdict
and the trust that record alone can earn there: `fuzzed` when it passed (a device has no guard
suite or test report of its own, which `checked` needs), nothing otherwise."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from conformance.evidence import cuda_versions
from reports import names


@dataclass
class DeviceColumn:
    key: str
    label: str               # GPU model, UUID, driver, CUDA runtime, host (or the CPU worker)


@dataclass
class DeviceCell:
    status: str | None       # None: this device holds no record of the capsule
    earned: str | None


@dataclass
class DeviceSection:
    directory: object        # reports.model.Directory
    columns: list[DeviceColumn]
    rows: list[tuple[str, list[DeviceCell]]]


@dataclass
class DevicesPage:
    page: str
    title: str
    sections: list[DeviceSection]


def _label(key: str, ran_on: dict) -> str:
    if ran_on.get("gpu"):
        return (f"{ran_on['gpu']} {(ran_on.get('gpu_uuid') or '?')[:8]}, "
                f"{cuda_versions(ran_on)}, {ran_on.get('host')}")
    return f"CPU worker {ran_on.get('worker')} on {ran_on.get('host')}"


def build_devices(report) -> DevicesPage | None:
    from conformance.cluster import device_matrix, device_records
    sections = []
    for directory in report.directories:
        by_device = device_records(Path(directory.path))
        if not by_device:
            continue
        columns = [DeviceColumn(key, _label(key, recs[0].get("ran_on") or {}))
                   for key, recs in by_device.items()]
        _, by_capsule = device_matrix(Path(directory.path), by_device)
        rows = [(name, [DeviceCell(cells.get(c.key),
                                   "fuzzed" if cells.get(c.key) == "passed" else None)
                        for c in columns])
                for name, cells in sorted(by_capsule.items())]
        sections.append(DeviceSection(directory, columns, rows))
    if not sections:
        return None
    return DevicesPage(names.DEVICES_PAGE, "capsules x devices", sections)
