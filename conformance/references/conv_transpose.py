"""Reference for conv_transpose: the adjoint of conv(., w) applied to x, plus the bias:
y[n, co, i] = b[co] + sum over (ci in co's group, taps t, o with o s - p + t d = i) of
x[n, ci, o] w[ci, co, t]. Every element is an exact dot product (plus the bias) rounded once:
kind 'reduction', terms = the (ci, t) pairs that reach it (+ 1 with a bias). VJP: dx = conv(g, w)
(no bias), dw with the roles of conv's dKernel swapped, db = g summed over N and positions."""

from conformance.references import _conv
from conformance.references._common import f32_grad
from engine.convolution import transpose_geometry

OP = "conv_transpose"


def _setup(inputs, stride, padding, dilation, groups):
    arrays = _conv.check_inputs(inputs, OP)
    x, w = arrays[0], arrays[1]
    geo, _ = transpose_geometry(x.shape, w.shape, stride, padding, dilation, groups)
    bias = arrays[2] if len(arrays) == 3 else None
    return geo, x.reshape((geo.n, geo.c_out) + geo.out), w, bias, x.shape


def _shaped(ref, shape):
    return _conv.Reference(*(v.reshape(shape) for v in _conv._fields(ref)), kind=ref.kind)


def forward(inputs, *, stride=1, padding=0, dilation=1, groups=1):
    geo, x, w, bias, x_shape = _setup(inputs, stride, padding, dilation, groups)
    ref = _conv.conv_input_grad(geo, x, w, bias)
    return _shaped(ref, x_shape[:-geo.rank - 1] + (geo.c_in,) + geo.inp)


def vjp(inputs, grad_out, *, stride=1, padding=0, dilation=1, groups=1):
    geo, x, w, bias, x_shape = _setup(inputs, stride, padding, dilation, groups)
    g = f32_grad(grad_out, x_shape[:-geo.rank - 1] + (geo.c_in,) + geo.inp, OP)
    gy = g.reshape((geo.n, geo.c_in) + geo.inp)
    grads = (_shaped(_conv.conv_forward(geo, gy, w), x_shape), _conv.conv_kernel_grad(geo, x, gy))
    if bias is not None:
        grads += (_conv.bias_grad(gy, geo.c_in),)
    return grads
