"""Every error a user can cause, as a named exception. Messages say what was given, what was
expected, and what to do."""


class TorchLeanError(Exception):
    """Base of every error the runtime raises on purpose."""


class UnknownLabelError(TorchLeanError, ValueError):
    """A label (op, provider, trust level, ...) that the vocabulary does not know."""


class UnknownDeviceError(UnknownLabelError):
    """A device name that is not one of the known targets."""


class NoMaintainedProfileError(TorchLeanError):
    """The device parses, but no maintained runtime profile exists for it."""


class NativeRuntimeUnavailable(TorchLeanError):
    """CUDA was asked for, but this build or machine cannot execute it."""


class BindingMismatchError(TorchLeanError):
    """A handler's op, provider or device disagrees with the capsule it is bound to."""


class PlanningError(TorchLeanError):
    """No admissible capsule exists for an op under the profile."""


class GateRejectedError(TorchLeanError):
    """The assurance gate refused at least one obligation of a planned kernel."""


class ProviderMismatchError(TorchLeanError):
    """A wrapper was asked to run a kernel other than the one the accepted plan selected."""


class DeviceMismatchError(TorchLeanError):
    """A tensor lives on another device than the session running the op."""


class ShapeError(TorchLeanError, ValueError):
    """A logical shape, axis or parameter that the op does not support."""


class LengthMismatchError(TorchLeanError, ValueError):
    """A flat buffer whose length differs from the count its logical shape requires."""


class DTypeError(TorchLeanError, TypeError):
    """A value whose element type is not the float32 the runtime stores."""


class OutputLengthError(TorchLeanError):
    """A provider returned an output whose length differs from the op's logical output shape."""


class LayoutError(TorchLeanError, ValueError):
    """A buffer that is not one contiguous run of float32 elements."""


class IntegerRangeError(TorchLeanError, OverflowError):
    """An integer beyond the int64/uint64 range that engine.tensor() converts (2**70): it is not
    rounded silently; float(x) passes its float32 rounding explicitly."""


class NoLengthError(TorchLeanError, TypeError):
    """len() of a 0-d tensor, which has no first dimension (a TypeError, as torch's)."""


class AmbiguousTruthError(TorchLeanError, ValueError):
    """bool() of a tensor of more or fewer than one element (`if t:`), whose truth is
    ambiguous."""


class TensorIndexError(TorchLeanError, IndexError):
    """t[key] with what basic indexing does not take: a 0-d tensor, too many indices, a slice of
    another step than 1, a list, a tensor or a bool as an index."""


class UInt32OverflowError(TorchLeanError, OverflowError):
    """An axis, index or element count that does not fit the UInt32 kernel ABI."""


class IndexOutOfRangeError(TorchLeanError, IndexError):
    """A runtime index outside the extent of the axis it indexes."""


class GradientError(TorchLeanError):
    """backward() was asked of a tensor that has no path to anything requiring a gradient."""


class UnsavedValueError(GradientError):
    """A VJP rule read a value its @saves declaration leaves off the tape (engine/autograd.py)."""


class CapsuleNameError(TorchLeanError, ValueError):
    """A capsule name that is not a dotted identifier (`provider.op`, `user.my_add`)."""


class ParameterTypeError(TorchLeanError, TypeError):
    """An op parameter of the wrong type (alpha='x', a bool seed, a list where a number goes)."""


class ParameterValueError(TorchLeanError, ValueError):
    """An op parameter of the right type but outside what the op accepts (clamp lo > hi,
    p = 1.5, a negative seed, eps <= 0)."""


class NotATensorError(TorchLeanError, TypeError):
    """An op was given something other than an engine Tensor (a NumPy array, a list)."""


class Float32OverflowError(TorchLeanError, OverflowError):
    """A finite value too large for float32 (it would become infinity)."""


class NonFiniteInputError(TorchLeanError, ValueError):
    """A NaN or infinity in an input the op requires finite: the FFT entry points and fft_fno (a
    transform spreads one non-finite input over every output) and selective_scan's A (0 * inf
    would make NaNs that depend on the evaluation order)."""


class GraphCaptureError(TorchLeanError):
    """Work inside a CUDA graph capture that a graph cannot hold: a synchronisation, a read back
    to the host, an upload from host memory, a capture on the CPU."""


class GraphAllocationError(GraphCaptureError):
    """An op inside a CUDA graph capture needed device memory its reserved pool did not hold
    (a fresh cudaMalloc is never made inside a capture)."""


class KernelLaunchError(TorchLeanError):
    """The CUDA driver refused a kernel launch of the prepared-parameter path (cuLaunchKernel
    returned an error status), or a launch was given other arguments than the kernel's declared
    signature takes."""


class KernelCompileError(TorchLeanError):
    """NVRTC refused one of engine/csrc/cuda's sources (or a source given to
    loader.compile_source): the message carries the options and NVRTC's log."""


class GraphKeyError(GraphCaptureError):
    """A replay under other shapes, another accepted plan or another reduction mode than the
    capture's, for a graph made with recapture=False."""


class UnknownFlagSetError(UnknownLabelError):
    """TORCHLEAN_NVRTC_FLAG_SET (or TORCHLEAN_NVRTC_DECLARED_FLAG_SET) names no known set of
    NVRTC options (engine/runtime/flag_sets.py)."""
