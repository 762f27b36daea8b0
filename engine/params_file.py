"""Named parameters to and from safetensors files. Saving writes a temporary file in the target's
directory and renames it over the target (os.replace), so a crash never leaves half a file under
the name; loading checks every name, shape and dtype before any parameter changes, and names the
first mismatch."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from engine.errors import TorchLeanError
from engine.tensor import Tensor


class ParamsFileError(TorchLeanError):
    """A parameter file that is missing, unreadable or not safetensors, or safetensors absent."""


class ParamsMismatchError(TorchLeanError):
    """A parameter file whose names, shapes or dtypes differ from the model's."""


def _safetensors_numpy():
    try:
        import safetensors.numpy as st
    except ImportError as exc:
        raise ParamsFileError("--save-params/--load-params need the safetensors package; "
                              "install it with `pip install safetensors` or the project's "
                              "extra: pip install -e '.[examples]'") from exc
    return st


def save_params(path, named: list[tuple[str, Tensor]]) -> Path:
    st = _safetensors_numpy()
    path = Path(path)
    arrays = {name: np.ascontiguousarray(p.numpy(), dtype=np.float32) for name, p in named}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    os.close(fd)
    try:
        st.save_file(arrays, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_params(path, named: list[tuple[str, Tensor]]) -> None:
    """Copy the file's arrays into the parameters, in place, after checking all of them."""
    st = _safetensors_numpy()
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
