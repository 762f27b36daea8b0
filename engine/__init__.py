"""TorchLean's eager runtime on CuPy (NumPy on the CPU): typed tensors, kernel capsules, a tape."""
from engine.session import Session, current_session, use_session
from engine.tensor import Tensor, tensor

__all__ = ["Session", "Tensor", "current_session", "tensor", "use_session"]
