"""Reference for conv: y[n, co, o] = b[co] + sum over (ci in co's group, taps t in range) of
x[n, ci, o s - p + t d] w[co, ci, t]. Every element is an exact dot product (plus the bias term)
rounded once: kind 'reduction', terms = the taps in range times C_in / groups (+ 1 with a bias),
magnitude sum |x w| (+ |b|). VJP: dx (the adjoint gather), dw (over N and output positions), db
(over N and output positions), each an exact sum rounded once, kind 'reduction'."""

from conformance.references import _conv
from conformance.references._common import f32_grad
from engine.convolution import conv_geometry

OP = "conv"


def _setup(inputs, stride, padding, dilation, groups):
    arrays = _conv.check_inputs(inputs, OP)
    x, w = arrays[0], arrays[1]
    geo, _ = conv_geometry(x.shape, w.shape, stride, padding, dilation, groups)
    bias = arrays[2] if len(arrays) == 3 else None
    return geo, x.reshape((geo.n, geo.c_in) + geo.inp), w, bias, x.shape


def _shaped(ref, shape):
    return _conv.Reference(*(v.reshape(shape) for v in _conv._fields(ref)), kind=ref.kind)


def forward(inputs, *, stride=1, padding=0, dilation=1, groups=1):
    geo, x, w, bias, x_shape = _setup(inputs, stride, padding, dilation, groups)
    ref = _conv.conv_forward(geo, x, w, bias)
    return _shaped(ref, x_shape[:-geo.rank - 1] + (geo.c_out,) + geo.out)


def vjp(inputs, grad_out, *, stride=1, padding=0, dilation=1, groups=1):
    geo, x, w, bias, x_shape = _setup(inputs, stride, padding, dilation, groups)
    g = f32_grad(grad_out, x_shape[:-geo.rank - 1] + (geo.c_out,) + geo.out, OP)
    gy = g.reshape((geo.n, geo.c_out) + geo.out)
    grads = (_shaped(_conv.conv_input_grad(geo, gy, w), x_shape), _conv.conv_kernel_grad(geo, gy, x))
    if bias is not None:
        grads += (_conv.bias_grad(gy, geo.c_out),)
    return grads
