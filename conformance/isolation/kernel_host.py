"""The kernel process: `python -m conformance.isolation.kernel_host IN_FD OUT_FD PARENT_PID`.

It imports the plugin (or the registry), and answers the judge's requests on two pipes, one frame
each way (wire.py): `load` (describe the capsules), `forward`, `vjp`, `declines`, `quit`, and for
16-bit kernels `lowp_load`, `lowp_call`, `lowp_pairs` and `lowp_triples` (lowp_side.py). It never
sees the run's seed, nonce, settings, references or evidence directory: only the arrays of each
call. Its stdout and stderr go to a pipe the judge drains and bounds. Everything here is as
trustworthy as the plugin it imports, which is not at all: the judge validates every answer.
"""
from __future__ import annotations

import os
import sys
import traceback


# The judge's modules: references, bounds, case generation, records. A kernel that imports them to
# compute the expected values or regenerate the cases is refused (an ImportError from its call).
# A kernel can remove this guard, as it can do anything in its own process; what it cannot reach
# is the judge's state: the run's seed, its cases before they are sent, its verdicts and records.
JUDGE_MODULES = ("conformance.references", "conformance.error_models", "conformance.error_terms",
                 "conformance.rounding", "conformance.campaign", "conformance.generators",
                 "conformance.edges", "conformance.layouts", "conformance.samplers",
                 "conformance.vjp", "conformance.evidence", "conformance.trust",
                 "conformance.worker", "conformance.runner", "conformance.orders",
                 "conformance.order_claims", "conformance.shrink", "conformance.focus",
                 "conformance.stats", "conformance.exhaustive", "conformance.failures",
                 "conformance.families", "conformance.signatures", "conformance.lowp.refs",
                 "conformance.lowp.sweep", "conformance.lowp.remote", "conformance.lowp.cli",
                 "conformance.lowp.accumulate", "conformance.lowp.audit",
                 "conformance.lowp.binary", "conformance.lowp.contracts")


def is_judge_module(name: str) -> bool:
    return any(name == m or name.startswith(m) for m in JUDGE_MODULES)


class JudgeImportGuard:
    """A meta-path finder that refuses the judge's modules in the kernel process."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if is_judge_module(name):
            raise ImportError(f"the kernel process may not import the judge's module `{name}`: "
                              "a kernel under audit computes its own results")
        return None


def _capsule_table(plugin: str | None, device: str, names: list | None) -> dict:
    if plugin:
        from conformance.plugins import plugin_handlers
        table = plugin_handlers(plugin, device=device)
    else:
        from engine.registry import registry
        reg = registry()
        table = {c.name: (c, reg.handler(c.name)) for c in reg.capsules()
                 if c.device.label == device}
    if names is not None:
        table = {k: v for k, v in table.items() if k in names}
    return table


def _describe(table: dict, plugin: str | None) -> list[dict]:
    from conformance.isolation.capsule_codec import to_data
    from conformance.isolation.kernel_side import vjp_callable
    out = []
    for name, (cap, handler) in table.items():
        entry = {"name": name, "capsule": to_data(cap), "has_declines": handler.declines is not None,
                 "has_vjp": vjp_callable(cap, handler) is not None}
        if plugin:   # the plugin's own account of its build; the judge adds the files it hashes
            from conformance.fingerprint import fingerprint
            entry["fingerprint"] = fingerprint(cap, handler)
        out.append(entry)
    return out


def _array_or_returned(out) -> dict:
    import numpy as np
    from conformance.isolation.kernel_side import describe_returned
    from conformance.isolation.wire import DTYPES
    if isinstance(out, np.ndarray) and out.dtype.name in DTYPES:
        return {"out": out}
    return {"out": None, "returned": describe_returned(out)}


def _grads(grads) -> dict:
    import numpy as np
    from conformance.isolation.kernel_side import describe_returned
    from conformance.isolation.wire import DTYPES
    if not isinstance(grads, tuple) or not all(
            g is None or (isinstance(g, np.ndarray) and g.dtype.name in DTYPES) for g in grads):
        return {"grads": None, "returned": describe_returned(grads)}
    return {"grads": list(grads)}


def serve(in_fd: int, out_fd: int) -> None:
    from conformance.isolation import wire
    reader = wire.Reader(in_fd)
    table: dict = {}
    while True:
        msg = reader.receive(budget=1 << 40)
        op = msg.get("op")
        if op == "quit":
            os._exit(0)
        try:
            reply = _answer(op, msg, table)
        except Exception as exc:   # the kernel side's own step failed
            from conformance.isolation.kernel_side import KernelRaised, KernelSideError
            if isinstance(exc, KernelRaised):   # its own frames, for the judge's record
                reply = {"raised": str(exc), "frames": exc.frames}
            elif isinstance(exc, KernelSideError):
                reply = {"side_error": {"where": exc.where, "error": f"{type(exc.exc).__name__}: "
                                        f"{exc.exc}"[:500], "traceback": "".join(
                                            traceback.format_exception(exc.exc))[-1500:]}}
            else:
                reply = {"side_error": {"where": f"kernel-process {op}",
                                        "error": f"{type(exc).__name__}: {exc}"[:500],
                                        "traceback": traceback.format_exc()[-1500:]}}
        wire.send(out_fd, reply)


def _answer(op: str, msg: dict, table: dict) -> dict:
    from conformance.isolation import kernel_side as K
    if op == "load":
        from conformance.plugins import PluginError
        import warnings
        warnings.filterwarnings("ignore", category=RuntimeWarning)   # IEEE specials are the point
        from engine.runtime.deterministic import set_deterministic_reductions
        set_deterministic_reductions(bool(msg.get("deterministic")))
        try:
            table.update(_capsule_table(msg.get("plugin"), msg["device"], msg.get("names")))
        except PluginError as exc:
            return {"plugin_error": str(exc)}
        return {"capsules": _describe(table, msg.get("plugin"))}
    if op in ("lowp_load", "lowp_call", "lowp_pairs", "lowp_triples"):   # conformance/lowp/
        from conformance.isolation import lowp_side
        return lowp_side.answer(op, msg, table)
    cap, handler = table[msg["name"]]
    device = cap.device
    if op == "declines":
        if handler.declines is None:
            return {"declined": None}
        try:
            why = handler.declines(tuple(msg["inputs"]), dict(msg["params"]))
        except Exception as exc:
            raise K.KernelRaised(exc) from exc
        return {"declined": None if why is None else str(why)[:2000]}
    if op == "forward":
        out, handed = K.run_forward(handler.forward, device, tuple(msg["inputs"]),
                                    dict(msg["params"]), bool(msg["poison"]), msg.get("offsets"))
        return {**_array_or_returned(out), "handed": handed}
    if op == "vjp":
        fn = K.vjp_callable(cap, handler)
        grads, handed = K.run_vjp(fn, device, tuple(msg["inputs"]), msg["out"], msg["g"],
                                  dict(msg["params"]), bool(msg["poison"]), msg.get("offsets"))
        return {**_grads(grads), "handed": handed}
    raise ValueError(f"unknown request {op!r}")


def exit_status(code) -> int:
    """The status an interpreter exits with for `sys.exit(code)`."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run_to_the_end(start) -> None:
    """Run `start()` (which sets the process up and serves until `quit`) and end the process as
    an interpreter would, but for atexit hooks, which never run (neither a kernel's nor, in a
    fork, its judge's): a kernel's sys.exit(code) exits with that code, anything else raised is
    printed on the output the judge keeps, and exits 1. Both ways of starting a kernel process
    end through here (main, and prefork.py's child)."""
    code = 1
    try:
        start()
        code = 0
    except SystemExit as exc:
        code = exit_status(exc.code)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def main() -> None:
    in_fd, out_fd, parent = (int(a) for a in sys.argv[1:4])

    def start() -> None:
        from conformance.isolation.reaper import die_with_parent, name_kernel_process
        die_with_parent(parent)
        name_kernel_process()
        sys.meta_path.insert(0, JudgeImportGuard)
        serve(in_fd, out_fd)
    run_to_the_end(start)


if __name__ == "__main__":
    main()
