"""A runtime session: the device, the accepted plan it grows op by op, and the backend report.

Eager code does not know its graph ahead of time, so each op's one-op graph goes through
`BackendProfile.accept_graph` the first time the op runs; the result is cached for the session.
"""
from __future__ import annotations

import contextlib
from typing import Mapping

import numpy as np

from engine.capsule import ExecutableKernel, KernelCapsule
from engine.errors import ProviderMismatchError
from engine.profile import PROFILES, BackendProfile, maintained_for_device, profile_named
from engine.runtime.buffer import AnyBuffer
from engine.runtime.device_buffer import to_device
from engine.types import BackendOp, Device, TrustLevel


class Session:
    """`Session('cuda')`, `Session('cpu', profile='checked_cpu')`: a device and a profile, each
    given as a name or as the engine.types.Device / engine.profile.BackendProfile itself."""

    def __init__(self, device: Device | str = Device.cpu,
                 profile: BackendProfile | str | None = None,
                 earned_trust: Mapping[str, TrustLevel | None] | None = None) -> None:
        if not isinstance(device, (Device, str)):
            from engine.errors import UnknownDeviceError
            raise UnknownDeviceError(
                f"Session({device!r}): the device must be a name such as 'cpu' or 'cuda' (or an "
                f"engine.types.Device), got {type(device).__name__}")
        self.device = Device.parse(device) if isinstance(device, str) else device
        self.profile = _profile(profile) if profile is not None else \
            maintained_for_device(self.device)
        if self.profile.device is not self.device:
            raise ProviderMismatchError(
                f"profile `{self.profile.name}` targets `{self.profile.device.label}`, but the "
                f"session was asked for `{self.device.label}`; pick a profile for that device")
        if self.device is Device.cuda:
            from engine.runtime.native import require_native_runtime
            require_native_runtime()
            import cupy
            from engine.runtime.allocator import install
            install()   # every device buffer of the session comes from the exact-size cache
            self.xp = cupy
        else:
            self.xp = np
        self.earned_trust = earned_trust
        self._kernels: dict[BackendOp, ExecutableKernel] = {}
        self.dispatched: dict[BackendOp, KernelCapsule] = {}

    def kernel_for(self, op: BackendOp) -> ExecutableKernel:
        kernel = self._kernels.get(op)
        if kernel is None:
            plan = self.profile.accept_graph([op], earned_trust=self.earned_trust)
            kernel = self._kernels[op] = plan.kernel(op)
        return kernel

    def upload(self, host: np.ndarray) -> AnyBuffer:
        flat = np.ascontiguousarray(host, dtype=np.float32).reshape(-1)
        return AnyBuffer(to_device(flat) if self.xp is not np else flat, self.device)

    def backend_report(self) -> str:
        return "\n".join(line for cap in self.dispatched.values() for line in cap.report_lines())


def _profile(profile) -> BackendProfile:
    """A profile given by name ('checked_cpu') or as itself."""
    if isinstance(profile, BackendProfile):
        return profile
    if isinstance(profile, str):
        return profile_named(profile)
    from engine.errors import ParameterTypeError
    raise ParameterTypeError(
        f"Session(profile={profile!r}): the profile must be a name such as 'checked_cpu' (or an "
        f"engine.profile.BackendProfile), got {type(profile).__name__}; "
        f"known profiles: {', '.join(PROFILES)}")


_current: list[Session] = []
_default_cpu: Session | None = None


def current_session() -> Session:
    global _default_cpu
    if _current:
        return _current[-1]
    if _default_cpu is None:
        _default_cpu = Session(Device.cpu)
    return _default_cpu


@contextlib.contextmanager
def use_session(session: Session | Device | str):
    """Run the block under `session`: a Session, or a device ('cuda', Device.cuda) whose
    maintained profile a new Session is made with."""
    if not isinstance(session, Session):
        if not isinstance(session, (Device, str)):
            from engine.errors import ParameterTypeError
            raise ParameterTypeError(
                f"use_session({session!r}): pass an engine.Session, or a device name such as "
                f"'cpu' or 'cuda'; got {type(session).__name__}")
        session = Session(session)
    _current.append(session)
    try:
        yield session
    finally:
        _current.pop()
