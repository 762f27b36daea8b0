"""The native-cuda provider: our own kernels in engine/csrc/cuda/*.cu, launched through CuPy or
(the elementwise family) through the driver with prepared parameters (launch.py).

Capsules are plain data and register without CuPy; handlers import it on first call. One module
per op family (elementwise, shape, reduce, index, random, softmax, norm, attention, optim; loss
and fused for the fused entries cross_entropy and bias_gelu), each declaring its kernels next to
their handlers (`decl.KernelDecl`); the launch plumbing in `launch`, strided copies in `strided`,
policies and registration in `capsules`.
"""
from engine.providers.native_cuda.capsules import register_all
from engine.providers.native_cuda.launch import KERNELS
from engine.providers.native_cuda.optim import BiasTable, native_adam_step, native_adam_step_table
from engine.providers.native_cuda.strided import broadcast_into

__all__ = ["register_all", "native_adam_step", "native_adam_step_table", "BiasTable",
           "broadcast_into", "KERNELS"]
