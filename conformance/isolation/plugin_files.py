"""A plugin's fingerprint as the judge can vouch for it: the plugin's own account (computed in its
kernel process, so only a claim) joined to this process's sha256 of the plugin's source files,
found on the import path WITHOUT importing anything (importing would run the plugin here).

The files hashed: the module's own file, and every .py file under its top-level package when it
is in one (a plugin may import its siblings). A plugin that loads code from elsewhere (another
package, a shared library, the network) is covered only by its own account."""
from __future__ import annotations

import hashlib
import os
import sys
from importlib.machinery import PathFinder
from pathlib import Path

FILES_MAX = 4000
BYTES_MAX = 64 << 20


def plugin_files(spec: str) -> list[Path]:
    """The plugin module's source file and its top-level package's .py files, sorted."""
    module = spec.partition(":")[0]
    parts = module.split(".")
    search = [os.getcwd()] + [p for p in sys.path if p]
    found, top_dir = None, None
    for i in range(len(parts)):
        ms = PathFinder.find_spec(".".join(parts[:i + 1]), search)
        if ms is None:
            return []
        if i == 0 and ms.submodule_search_locations:
            top_dir = Path(list(ms.submodule_search_locations)[0])
        found = ms
        search = list(ms.submodule_search_locations or [])
    files = set()
    if found is not None and found.origin and found.origin not in ("built-in", "frozen"):
        files.add(Path(found.origin))
    if top_dir is not None and top_dir.is_dir():
        for f in sorted(top_dir.rglob("*.py"))[:FILES_MAX]:
            files.add(f)
    return sorted(files)


def files_digest(files: list[Path]) -> str:
    h, total = hashlib.sha256(), 0
    for f in files:
        try:
            data = f.read_bytes()[:BYTES_MAX]
        except OSError:
            data = b"<unreadable>"
        total += len(data)
        h.update(str(f.name).encode() + b"\0" + hashlib.sha256(data).digest())
        if total > BYTES_MAX:
            break
    return h.hexdigest()


def plugin_fingerprint(spec: str, reported) -> dict:
    """{value, method, inputs}: the kernel process's reported fingerprint (a dict with a string
    `value`, else nothing) joined to the judge's digest of the plugin's files."""
    claim = reported.get("value") if isinstance(reported, dict) else None
    claim = claim if isinstance(claim, str) else ""
    files = plugin_files(spec)
    judged = files_digest(files)
    value = hashlib.sha256(f"{claim}\0{judged}".encode()).hexdigest()
    inputs = reported.get("inputs") if isinstance(reported, dict) else None
    inputs = [str(x)[:300] for x in inputs[:200]] if isinstance(inputs, list) else []
    return {"value": value,
            "method": "sha256 of the plugin's account of its build (its kernel process) and of "
                      f"its {len(files)} source file(s) as the judge read them",
            "inputs": inputs + [f"judge:{spec.partition(':')[0]} ({len(files)} files)"]}
