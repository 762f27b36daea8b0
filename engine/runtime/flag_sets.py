"""The named sets of NVRTC options the native kernels can be built with, and the environment
variables that pick one per process (read once, by engine/runtime/loader.py at import).

`default` is the build every native-cuda capsule's policy is written for (loader.py's docstring
says what each option fixes). The others exist for the compile-flag matrix
(`torchlean-conformance flags`, docs/FLAGS.md), which builds the kernels under each set and checks
that the policy a capsule declares follows the flags the build really used:
  ftz        --ftz=true: subnormal inputs and results flushed to zero;
  fmad       --fmad=true: a*b+c may be contracted into one FMA;
  fast-math  --use_fast_math: ftz, fmad, approximate division and square root, and the __expf-style
             intrinsics in place of libdevice's functions (NVRTC implies all of them, so the set
             names no other numeric option that could contradict it).

TORCHLEAN_NVRTC_FLAG_SET picks what the kernels are compiled with. TORCHLEAN_NVRTC_DECLARED_FLAG_SET
(the matrix harness's, never a user's) makes the capsules declare the policy of another set than
the one compiled: the record a user who trusts the default capsule would hold if the build had
silently changed flags. The evidence then still names the real options (environment
.compile_options) and its fingerprint is the compiled build's, so it can never stand in for the
default build's evidence.
"""
from __future__ import annotations

import os
from typing import Mapping

from engine.errors import UnknownFlagSetError

FLAG_SET_ENV = "TORCHLEAN_NVRTC_FLAG_SET"
DECLARED_FLAG_SET_ENV = "TORCHLEAN_NVRTC_DECLARED_FLAG_SET"
DEFAULT = "default"

_STD = "-std=c++17"
FLAG_SETS: dict[str, tuple[str, ...]] = {
    "default": (_STD, "--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true"),
    "ftz": (_STD, "--fmad=false", "--ftz=true", "--prec-div=true", "--prec-sqrt=true"),
    "fmad": (_STD, "--fmad=true", "--ftz=false", "--prec-div=true", "--prec-sqrt=true"),
    "fast-math": (_STD, "--use_fast_math"),
}


def options_for(name: str, variable: str = FLAG_SET_ENV) -> tuple[str, ...]:
    """The NVRTC options of a named set; UnknownFlagSetError names the known ones."""
    try:
        return FLAG_SETS[name]
    except KeyError:
        raise UnknownFlagSetError(
            f"{variable}={name!r} names no NVRTC flag set; expected one of "
            f"{', '.join(FLAG_SETS)}; unset it for the default build") from None


def selected(env: Mapping[str, str] | None = None, variable: str = FLAG_SET_ENV) -> str:
    """The set `variable` names in `env` (default: os.environ), checked; `default` when unset or
    empty."""
    env = os.environ if env is None else env
    name = (env.get(variable) or "").strip() or DEFAULT
    options_for(name, variable)
    return name


def selected_declared(env: Mapping[str, str] | None = None) -> str:
    """The set whose policy the capsules declare: DECLARED_FLAG_SET_ENV, else the compiled set."""
    env = os.environ if env is None else env
    if (env.get(DECLARED_FLAG_SET_ENV) or "").strip():
        return selected(env, DECLARED_FLAG_SET_ENV)
    return selected(env)
