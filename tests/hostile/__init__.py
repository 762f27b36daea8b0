"""A catalogue of hostile kernels, one module per class of the threat model (TRUST_BOUNDARIES.md,
"The judge and the kernel"): each is a plugin whose capsule `hostile.<class>` (op abs, exact policy)
is wrong on purpose and tries to obtain `passed` anyway: by exiting, forking, patching the harness or
NumPy, reading the judge's state, caching, aliasing, forging or rewriting its record, printing
without end or signalling its parent. tests/test_hostile_kernels.py runs them through the CLI, as a
user's audit would, and asserts each is flagged with a named reason or refused. `honest` is the
control: the same capsule, right."""
