"""Named parameters to and from safetensors files. Saving refuses non-finite values (a diverged run
must not overwrite a good checkpoint) unless asked, and writes through engine/atomic_file.py
(temp file, fsync, rename, directory fsync), so a crash never leaves half a file under the name;
loading checks every name, shape and dtype before any parameter changes, and names the first
mismatch."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.atomic_file import write_atomically
from engine.errors import TorchLeanError
from engine.tensor import Tensor


class ParamsFileError(TorchLeanError):
    """A parameter file that is missing, unreadable or not safetensors, or safetensors absent."""


class ParamsMismatchError(TorchLeanError):
    """A parameter file whose names, shapes or dtypes differ from the model's."""


class NonFiniteParamsError(TorchLeanError):
    """Parameters holding NaN or inf (a diverged run) that were to be saved without
    --save-nonfinite: nothing is written, the file already at the path stays."""
    exit_code = 1   # conformance/exit_codes.py's EXIT_FAILED: the run failed, not the user


def safetensors_numpy():
    """safetensors.numpy, or ParamsFileError saying how to install it (checked before training)."""
    try:
        import safetensors.numpy as st
    except ImportError as exc:
        raise ParamsFileError("--save-params/--load-params need the safetensors package; "
                              "install it with `pip install safetensors` or the project's "
                              "extra: pip install -e '.[examples]'") from exc
    return st


def save_params(path, named: list[tuple[str, Tensor]], allow_nonfinite: bool = False) -> Path:
    """Write the parameters to `path` as float32 safetensors, atomically and durably; parameters
    holding NaN or inf raise NonFiniteParamsError, writing nothing, unless `allow_nonfinite`."""
    st = safetensors_numpy()
    path = Path(path)
    arrays = {name: np.ascontiguousarray(p.numpy(), dtype=np.float32) for name, p in named}
    if not allow_nonfinite:
        refuse_nonfinite(path, [(name, arrays[name]) for name, _ in named])
    return write_atomically(path, st.save(arrays), "--save-params")


def refuse_nonfinite(path: Path, arrays: list[tuple[str, np.ndarray]]) -> None:
    """Raise NonFiniteParamsError naming the first array (in the model's order) that holds NaN or
    inf, with its count."""
    counts = [(name, a.size - int(np.count_nonzero(np.isfinite(a))), a.size) for name, a in arrays]
    bad = [(name, count, size) for name, count, size in counts if count]
    if not bad:
        return
    name, count, size = bad[0]
    kept = f"{path} is unchanged" if path.exists() else "no file was written"
    raise NonFiniteParamsError(
        f"--save-params {path}: parameter `{name}` holds {count} non-finite values (NaN or inf) "
        f"of {size}, and {len(bad)} of the {len(arrays)} parameters hold some: the run diverged; "
        f"{kept}. Lower --lr, or pass --save-nonfinite to save them anyway")


def load_params(path, named: list[tuple[str, Tensor]]) -> None:
    """Copy the file's arrays into the parameters, in place, after checking all of them."""
    st = safetensors_numpy()
    path = Path(path)
    if not path.is_file():
        raise ParamsFileError(f"--load-params {path}: no such file; pass a file written by "
                              "--save-params")
    try:
        arrays = st.load_file(str(path))
    except Exception as exc:   # safetensors raises its own SafetensorError and OSError
        raise ParamsFileError(f"--load-params {path} is not a readable safetensors file "
                              f"({exc}); pass a file written by --save-params") from None
    mismatch = first_mismatch(arrays, named)
    if mismatch:
        raise ParamsMismatchError(f"--load-params {path}: {mismatch}; load a file saved from "
                                  "the same preset")
    for name, p in named:
        p.buffer.data[...] = _like(p.buffer.data, arrays[name].reshape(-1))


def _like(data, host: np.ndarray):
    """`host` on the device of `data` (a CuPy buffer takes a device copy)."""
    if isinstance(data, np.ndarray):
        return host
    import cupy
    return cupy.asarray(host)


def first_mismatch(arrays: dict[str, np.ndarray], named: list[tuple[str, Tensor]]) -> str | None:
    """What differs first, in the model's parameter order, then the file's extra names."""
    for name, p in named:
        if name not in arrays:
            return f"parameter `{name}` is missing from the file"
        a = arrays[name]
        if a.dtype != np.float32:
            return f"parameter `{name}` has dtype {a.dtype} in the file, the model wants float32"
        if tuple(a.shape) != tuple(p.shape):
            return (f"parameter `{name}` has shape {tuple(a.shape)} in the file, the model "
                    f"wants {tuple(p.shape)}")
    extra = sorted(set(arrays) - {name for name, _ in named})
    if extra:
        return f"the file holds `{extra[0]}`, which the model has no parameter for"
    return None
