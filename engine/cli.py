"""The `torchlean` command: example models (quickstart_mlp, cnn_digits, fno1d, gpt2), the capsule
catalogue (capsules) and allocator telemetry (memory). Exit codes, with the numbers and meanings of
conformance/exit_codes.py: 0 success, 1 the run failed (gpt2 diverged and --save-params refused its
non-finite parameters), 2 a usage error (the message says what was given and what to do), 4 an
environment failure (a parameter file that could not be written), 130 interrupted."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

from engine.errors import TorchLeanError


class OutputPathError(TorchLeanError):
    """A --log (or other output) path that cannot be written."""


def writable_file(path: str) -> Path:
    """`path` when a file can be written there, checked before any work starts."""
    p = Path(path)
    if p.is_dir():
        raise OutputPathError(f"--log {path} is a directory; pass a file path such as "
                              f"{p / 'quickstart.json'}")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise OutputPathError(f"--log {path}: directory {parent} does not exist; create it or "
                              "pass a path in an existing directory")
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise OutputPathError(f"--log {path} is not writable; pass a writable path")
    return p


SEED_MAX = 2 ** 64 - 1   # seeds are whole numbers from 0 to 2^64-1 everywhere (README)


def seed_number(text: str) -> int:
    """The argparse type of every seed option: a whole number from 0 to 2^64-1, else a usage
    error (exit 2) naming the range, before any work (a negative or wider seed used to run)."""
    try:
        value = int(text, 10)
    except ValueError:
        value = None
    if value is None or not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"must be a whole number from 0 to 2^64-1 ({SEED_MAX}), "
                                         f"got {text!r}; pass a seed in that range")
    return value


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Help that shows a default where it says something: not `(default: None)` after a help
    text that already says what leaving the option out means, nor `(default: False)` on a
    switch."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False:
            return action.help or ""
        return super()._get_help_string(action)


def version() -> str:
    from importlib.metadata import PackageNotFoundError, version as dist_version
    try:
        return dist_version("torchlean-cuda-runtime")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _session(device_name: str, profile_name: str | None = None):
    from engine.profile import maintained_for_device, profile_named
    from engine.session import Session
    from engine.types import Device
    device = Device.parse(device_name)
    profile = profile_named(profile_name) if profile_name else maintained_for_device(device)
    return Session(device, profile)


def _example_setup(args):
    """The checks every example runs before any work: steps, the log path, the session."""
    if args.steps < 1:
        raise TorchLeanError(f"--steps must be at least 1, got {args.steps}")
    log = writable_file(args.log) if args.log else None
    return log, _session(args.device, args.profile)


def _reductions(args):
    """Deterministic reductions for the run when --deterministic asks, restored afterwards."""
    from engine.runtime.deterministic import deterministic_reductions
    return deterministic_reductions(True) if args.deterministic else contextlib.nullcontext()


def _finish(args, session, result, log, **record) -> int:
    """What every example ends with: the backend report when asked, the JSON log when asked (the
    run's settings, every logged loss, and `record`)."""
    if args.show_backend:
        print("backend:")
        print(result.backend_report)
    if log is not None:
        with open(log, "w", encoding="utf-8") as fh:
            json.dump({"device": session.device.label, "profile": session.profile.name,
                       "seed": args.seed, "steps": args.steps, "losses": result.losses,
                       **record}, fh, indent=1)
    return 0


def cmd_quickstart(args) -> int:
    from engine.models import quickstart_mlp
    if args.graph and args.device != "cuda":
        raise TorchLeanError(f"--graph replays CUDA graphs and needs --device cuda, got "
                             f"--device {args.device}; drop --graph to train eagerly")
    log, session = _example_setup(args)
    print(f"quickstart_mlp: device={session.device.label} profile={session.profile.name} "
          f"seed={args.seed} steps={args.steps}" + (" graph=replayed" if args.graph else ""))
    with _reductions(args):
        result = quickstart_mlp.run(session, steps=args.steps, seed=args.seed, graph=args.graph)
    for step, loss in result.losses:
        print(f"step {step:4d}  loss {loss:.9g}")
    print(f"final loss {result.final_loss:.9g}")
    for (x1, x2), value in result.predictions:
        print(f"prediction at ({x1:g}, {x2:g}) = {value:.6f}")
    return _finish(args, session, result, log, final_loss=result.final_loss,
                   predictions=[[list(p), v] for p, v in result.predictions])


def cmd_cnn_digits(args) -> int:
    from engine.models import cnn_digits
    cnn_digits.digits_loader()   # a missing scikit-learn is named before any work
    log, session = _example_setup(args)
    print(f"cnn_digits: device={session.device.label} profile={session.profile.name} "
          f"seed={args.seed} steps={args.steps}")
    with _reductions(args):
        result = cnn_digits.run(session, steps=args.steps, seed=args.seed)
    for step, loss in enumerate(result.losses):
        if step % 25 == 0 or step == len(result.losses) - 1:
            print(f"step {step:4d}  loss {loss:.9g}")
    print(f"train accuracy {result.train_accuracy:.4f}")
    print(f"held-out accuracy {result.test_accuracy:.4f}")
    return _finish(args, session, result, log, train_accuracy=result.train_accuracy,
                   test_accuracy=result.test_accuracy)


def cmd_fno1d(args) -> int:
    from engine.models import fno1d
    log, session = _example_setup(args)
    print(f"fno1d: device={session.device.label} profile={session.profile.name} "
          f"seed={args.seed} steps={args.steps} grid={fno1d.GRID} width={fno1d.WIDTH} "
          f"modes={fno1d.MODES} train={fno1d.TRAIN} test={fno1d.TEST}")
    with _reductions(args):
        result = fno1d.run(session, steps=args.steps, seed=args.seed)
    baseline = fno1d.baseline_relative_l2(args.seed)
    for step, loss in result.losses:
        print(f"step {step:4d}  loss {loss:.9g}")
    print(f"final loss {result.final_loss:.9g}")
    print(f"held-out relative L2 error {result.test_relative_l2:.6f} (u(T) = u0 would give "
          f"{baseline:.6f})")
    return _finish(args, session, result, log, final_loss=result.final_loss,
                   test_relative_l2=result.test_relative_l2, baseline_relative_l2=baseline)


def cmd_gpt2(args) -> int:
    from engine import cli_gpt2
    setup = cli_gpt2.prepare(args)
    log = writable_file(args.log) if args.log else None
    # A captured step plans attention through the native kernel (profile graph_cuda) unless
    # --profile names another.
    profile = args.profile or ("graph_cuda" if args.graph else None)
    session = cli_gpt2.evidence_gate(args, _session(args.device, profile))
    with _reductions(args):
        result, record = cli_gpt2.train(args, setup, session)
    return _finish(args, session, result, log, **record)


def cmd_capsules(args) -> int:
    from engine.registry import registry
    from engine.types import Device
    caps = registry().capsules()
    if args.device is not None:
        device = Device.parse(args.device)   # a name that is no device at all is named so
        registered = list(dict.fromkeys(c.device.label for c in caps))
        if device.label not in registered:
            # A known device without capsules (metal) printed nothing and exited 0, as if it had
            # been listed.
            raise TorchLeanError(f"capsules --device {args.device}: no capsule is registered for "
                                 f"that device; registered devices: {', '.join(registered)}; "
                                 "pass one of them, or leave --device out to list every capsule")
        caps = [c for c in caps if c.device is device]
    if args.json:
        print(json.dumps([{
            "name": c.name, "op": c.op.label, "provider": c.provider.label,
            "device": c.device.label, "declared_trust": c.trust_level.label,
            "vjp": c.vjp_mode.label,
            "numeric": c.numerical_policy.label,
            "contracts": {k: {"claim": d.claim.label, "evidence": d.evidence.label,
                              "summary": d.summary} for k, d in c.contracts.items()},
        } for c in caps], indent=1))
        return 0
    # The trust a capsule declares, not what evidence earned it (export-trust decides that).
    for c in caps:
        print(f"{c.name:40s} provider={c.provider.label:11s} device={c.device.label:4s} "
              f"declared-trust={c.trust_level.label:8s} vjp={c.vjp_mode.label:14s} "
              f"numeric=[{c.numerical_policy.label}]")
    return 0


def cmd_memory(args) -> int:
    from engine.runtime.allocator import allocator_stats
    print(allocator_stats().format())
    return 0


def _example_arguments(p: argparse.ArgumentParser, steps: int, log_what: str,
                       steps_help: str) -> None:
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--profile", default=None,
                   help="a named profile instead of the device's maintained one "
                        "(e.g. libtorch_forward_cuda)")
    p.add_argument("--steps", type=int, default=steps, help=steps_help)
    p.add_argument("--seed", type=seed_number, default=2026,
                   help="initialisation seed, 0 to 2^64-1")
    p.add_argument("--show-backend", action="store_true",
                   help="print every capsule that crossed the backend boundary")
    p.add_argument("--log", default=None, help=f"write {log_what} as JSON here")
    p.add_argument("--deterministic", action="store_true",
                   help="fixed-order reductions in every backward kernel (the same as "
                        "TORCHLEAN_CUDA_DETERMINISTIC_REDUCTIONS=1): same seed, same losses")


def _add_example(sub, name: str, fn, steps: int, log_what: str, help: str,
                 description: str, steps_help: str = "training steps, at least 1"
                 ) -> argparse.ArgumentParser:
    """An example model's subcommand with the options every example shares."""
    p = sub.add_parser(name, help=help, description=description,
                       formatter_class=DefaultsHelpFormatter)
    _example_arguments(p, steps=steps, log_what=log_what, steps_help=steps_help)
    p.set_defaults(fn=fn)
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="torchlean", description=__doc__.split("\n\n")[0],
                                     formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    fmt = DefaultsHelpFormatter
    q = _add_example(sub, "quickstart_mlp", cmd_quickstart, 200, "losses and predictions",
                     "train the 2-8-1 MLP on the 25-point grid",
                     "train linear 2->8, relu, linear 8->1 with Adam on the 25 points of the 5x5 "
                     "grid")
    q.add_argument("--graph", action="store_true",
                   help="CUDA only: run step 0 eagerly, capture it into a CUDA graph and replay "
                        "it for every later step (engine/graphs.py)")
    _add_example(sub, "cnn_digits", cmd_cnn_digits, 300, "every step's loss and the accuracies",
                 "train a small CNN on scikit-learn's 8x8 digits",
                 "train conv -> relu -> max_pool -> conv -> relu -> avg_pool -> linear with Adam "
                 "on sklearn.datasets.load_digits and report train and held-out accuracy")
    _add_example(sub, "fno1d", cmd_fno1d, 200, "the logged losses and the held-out error",
                 "train a 1-D Fourier neural operator on the heat equation",
                 "learn u(., 0) -> u(., T) of u_t = nu u_xx on a periodic grid (exact solutions "
                 "generated in Fourier space); reports the held-out relative L2 error")
    from engine import cli_gpt2
    g = _add_example(sub, "gpt2", cmd_gpt2, 100,
                     "the logged losses, held-out losses and sample",
                     "train a byte-level GPT and sample from it",
                     "train a byte-level GPT (token and position embeddings, pre-norm causal "
                     "attention blocks, GELU MLP, tied head) with AdamW on the standard "
                     "library's .py sources or --data-file; reports the held-out loss and "
                     "samples text",
                     steps_help="training steps; 0 trains nothing: the parameters (from "
                                "--load-params) are evaluated on the held-out part and sampled "
                                "unchanged")
    cli_gpt2.add_arguments(g, seed_type=seed_number)
    c = sub.add_parser("capsules", help="list the registered capsules", formatter_class=fmt,
                       description="the registry: provider, device, declared trust (what "
                                   "the capsule claims; `torchlean-conformance export-trust` "
                                   "says what its evidence earned), VJP mode, policy")
    c.add_argument("--device", default=None,
                   help="only this device's capsules: cpu or cuda (default: every device)")
    c.add_argument("--json", action="store_true", help="JSON with the four contracts")
    c.set_defaults(fn=cmd_capsules)
    m = sub.add_parser("memory", help="print allocator telemetry")
    m.set_defaults(fn=cmd_memory)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from engine import cli_warnings
    cli_warnings.install("torchlean")
    try:
        with printable_stdout():
            return args.fn(args)
    except TorchLeanError as exc:
        print(f"torchlean: error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)   # a usage error unless the error says otherwise
    except BrokenPipeError:   # `torchlean capsules | head`: the reader left, nothing is wrong
        quiet_broken_pipe()
        return 0
    except KeyboardInterrupt:  # ^C mid-run: one line, the shell's 128 + SIGINT; files written
        print("torchlean: interrupted", file=sys.stderr)   # atomically are whole or absent
        return 130


@contextlib.contextmanager
def printable_stdout():
    """stdout that prints any text under any locale: characters its encoding lacks (a sampled
    byte under LC_ALL=C or PYTHONIOENCODING=ascii) come out as backslash escapes, as stderr's do,
    instead of a UnicodeEncodeError after the work is done. The handler is restored afterwards."""
    stream = sys.stdout
    errors = getattr(stream, "errors", None)
    if errors is None or not hasattr(stream, "reconfigure"):
        yield
        return
    stream.reconfigure(errors="backslashreplace")
    try:
        yield
    finally:
        stream.reconfigure(errors=errors)


def quiet_broken_pipe() -> None:
    """After a BrokenPipeError on stdout: point stdout at /dev/null so the interpreter's final
    flush does not raise again (the Python documentation's recipe for SIGPIPE)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
