"""The judge and the kernel in separate processes (TRUST_BOUNDARIES.md, "The judge and the kernel").

- wire.py: framed JSON plus raw array bytes between them, never pickle, every frame size-capped.
- kernel_side.py: what runs next to the kernel: upload, poisoning, the call, reading back.
- kernel_host.py: the kernel process (`python -m conformance.isolation.kernel_host`): imports the
  plugin or the registry, answers describe / forward / vjp / declines requests, nothing else.
- prefork.py: the kernel process forked from its judge before the judge reads its run (what
  conformance.worker uses; a fresh `kernel_host` interpreter elsewhere).
- remote.py: the judge's side: starts a kernel process, bounds its output, kills its descendants,
  and hands the campaign a RemoteHandler that looks like a KernelHandler.
- reaper.py: Linux process hygiene (die with the parent, adopt and kill orphans, no core/ptrace).
"""
