"""`torchlean-conformance replay FILE`: rerun one shrunk counterexample. The file is data: the
plugin it names is imported (and so runs) only when the user passes the same `--plugin`, and the
case is checked field by field and against a size cap before anything is allocated
(conformance/replay.py). Exit codes are conformance/exit_codes.py's: 0 passes now, 1 still
failing, 2 a file or option the command refuses (or a case the reference refuses), 3 the
harness raised on a well-formed case."""
from __future__ import annotations

import argparse
import shlex
import warnings
from pathlib import Path
from typing import Callable

from conformance.console import ordered_reasons
from conformance.exit_codes import EXIT_FAILED, EXIT_HARNESS, EXIT_OK, EXIT_USAGE
from conformance.plugins import PluginError
from conformance.replay import DEFAULT_MAX_ELEMENTS, ReplayError, decode_case, read_replay


def configure(p: argparse.ArgumentParser, element_count: Callable[[str], int]) -> None:
    p.add_argument("file", help="a replay file written under <evidence-dir>/replays/")
    p.add_argument("--plugin", metavar="MODULE:ATTR",
                   help="the plugin the file was recorded for: replaying imports that module, "
                        "which runs its code, so a file's plugin is loaded only when you name it "
                        "here yourself (docs/PLUGINS.md)")
    p.add_argument("--op-contracts", action="append", metavar="MODULE:ATTR",
                   help="the contracts of the plugin's ops the engine does not have (as run's)")
    p.add_argument("--max-elements", type=element_count, default=DEFAULT_MAX_ELEMENTS,
                   metavar="N",
                   help="the most elements a case may declare, arrays and output together, "
                        f"checked before anything is allocated (default: {DEFAULT_MAX_ELEMENTS}, "
                        "2^26)")


def _consented_plugin(path: Path, data: dict, given: str | None) -> str | None:
    """The plugin to import: the file's, only when the user named the same one."""
    recorded = data.get("plugin")
    if recorded is None and given is not None:
        raise ReplayError(f"replay file {path} names no plugin (capsule `{data['capsule']}` is "
                          f"built in), but --plugin {given} was given; drop --plugin")
    if recorded is not None and given != recorded:
        module = recorded.partition(":")[0]
        said = "no --plugin was given" if given is None else f"--plugin {given} was given"
        raise ReplayError(
            f"replay file {path} names plugin `{recorded}` for capsule `{data['capsule']}`, but "
            f"{said}: replaying imports the plugin's module `{module}`, which runs its code, so "
            f"a replay file's plugin is loaded only when you name it yourself. If you trust "
            f"`{module}`, run: torchlean-conformance replay --plugin {shlex.quote(recorded)} "
            f"{shlex.quote(str(path))}")
    return recorded


def _resolve(path: Path, name: str, plugin: str | None, device: str):
    """(kernel process, capsule, handler): the kernel runs in its own process, as in a run."""
    from conformance.isolation.remote import KernelProcessError, PluginLoadError
    from conformance.worker import open_remote
    try:
        kp, capsule, handler, _ = open_remote(name, plugin, device, False)
        return kp, capsule, handler
    except KeyError as exc:
        raise ReplayError(f"replay file {path}: {exc.args[0]}") from None
    except (PluginError, PluginLoadError, KernelProcessError) as exc:
        module = str(plugin).partition(":")[0]
        raise ReplayError(
            f"replay file {path} was recorded for plugin `{plugin}`, which cannot be loaded "
            f"({exc}); run the replay from the directory the campaign ran in, or make "
            f"`{module}` importable (PYTHONPATH=<dir holding it>)") from None


def main(args, require_device: Callable[[str], None]) -> int:
    path = Path(args.file)
    data = read_replay(path)
    plugin = _consented_plugin(path, data, args.plugin)
    require_device(data["device"])
    try:   # the case's fields and size first: nothing is imported or allocated for a bad file
        case = decode_case(data["case"], args.max_elements)
    except ReplayError as exc:
        raise type(exc)(f"replay file {path}: {exc}") from None
    kp, capsule, handler = _resolve(path, data["capsule"], plugin, data["device"])
    try:
        return _judge(path, data, case, capsule, handler, plugin)
    finally:
        kp.close()


def _judge(path: Path, data: dict, case, capsule, handler, plugin: str | None) -> int:
    from conformance.isolation.remote import KernelProcessError
    if case.op.label != capsule.op.label:
        raise ReplayError(f"replay file {path}: its case is of op `{case.op.label}`, but capsule "
                          f"`{capsule.name}` computes `{capsule.op.label}`; a replay file holds "
                          "a case of its capsule's op: rerun the campaign to write it again")
    if capsule.device.label != data["device"]:
        raise ReplayError(f"replay file {path} says device `{data['device']}`, but capsule "
                          f"`{capsule.name}` runs on `{capsule.device.label}`; rerun the campaign "
                          "to write it again")
    recorded = ordered_reasons(data.get("reasons") or [])
    print(f"replaying {capsule.name} on {case.summary()} (recorded: "
          f"{', '.join(recorded) or 'no reasons'})")
    from conformance.campaign import check_case
    from conformance.peers.contracts import contract_for
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            res = check_case(capsule, handler, case, {},
                             contract=contract_for(plugin, capsule.name))
        except KernelProcessError as exc:   # it exited, hung or broke the protocol: a verdict
            print(f"  {exc.status}: {exc}")
            print("still failing")
            return EXIT_FAILED
    if res.harness_error is not None:
        print(f"not judged: the harness raised in {res.harness_error['where']}: "
              f"{res.harness_error['error']} (a harness defect)")
        return EXIT_HARNESS
    if res.skipped:
        print(f"not judged: {res.skipped}")
        return EXIT_USAGE
    for f in res.failures:
        print("  " + f.line())
        if f.kernel_frames:   # the kernel raised: where, in its own code
            print("    raised at (the kernel's frames, innermost last):")
            print("\n".join(f"      {frame}" for frame in f.kernel_frames))
    print("still failing" if res.failed else "passes now")
    return EXIT_FAILED if res.failed else EXIT_OK
