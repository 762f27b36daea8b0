// Optimizer steps, in place on float32 buffers.
//
// Compiled with OPTIONS (engine/runtime/loader.py): --fmad=false, --prec-div=true and
// --prec-sqrt=true make every operation below one IEEE float rounding in the order written, the
// same order engine/optim.py's NumPy path uses, so CPU and CUDA Adam steps agree bit for bit.
// No #defines expected. 32-bit unsigned indexing.
//
//   tl_adam_step(p, g, m, v, n, lr, b1, b2, c1, c2, bc1, bc2, eps)
//       m = b1*m + c1*g;  v = b2*v + (c2*g)*g;          c1 = f32(1 - b1), c2 = f32(1 - b2)
//       p = p - (lr * (m / bc1)) / (sqrt(v / bc2) + eps)  bc1 = f32(1 - b1^t), bc2 = f32(1 - b2^t)
//   tl_adam_step_table(p, g, m, v, n, lr, b1, b2, c1, c2, bc, step, last, eps)
//       the same step with (bc1, bc2) = bc[2 t], bc[2 t + 1], t = min(*step, last): the step
//       count lives on the device, so a CUDA graph replay (engine/graphs.py) takes the next one
//   tl_adam_advance(step)     *step += 1, once per optimizer step, before its parameters
//
// The multi-tensor step: every parameter of an optimizer in one launch (PyTorch's
// multi_tensor_apply, without its per-launch pointer lists). A device table, built once per
// optimizer (engine/providers/native_cuda/optim_multi.py), holds T tensors:
//   ptrs[4T]    (p, g, m, v) as device addresses: p at [t], g at [T + t], m at [2T + t],
//               v at [3T + t]; a g of 0 skips the tensor (a parameter without a gradient)
//   sizes[T]    elements of tensor t;   decay[T]  1 where the tensor decays (AdamW)
//   chunks[2C]  (tensor, first element) of each chunk of TL_ADAM_CHUNK elements: block c walks
//               chunk c, so one grid covers every tensor with no search
//   tl_adam_multi(ptrs, T, sizes, decay, chunks, use_decay, shrink, lr, b1, b2, c1, c2,
//                 bc1, bc2, eps)
//       per element: p = p * shrink where use_decay and decay[t] (AdamW's decoupled decay, one
//       rounding, before the step), then tl_adam_step's arithmetic, operation for operation
//   tl_adam_multi_table(ptrs, T, sizes, decay, chunks, use_decay, shrink, lr, b1, b2, c1, c2,
//                       bc, step, last, eps)      the bias corrections from the device table
//   tl_adam_set_ptrs(ptrs, first, count, a0 .. a63)   ptrs[first + k] = a_k for k < count: the
//       addresses travel as kernel arguments, so a CUDA graph capture records them with no
//       upload from host memory (engine/graphs.py forbids one), and a replay rewrites them

#include "tl_common.cuh"

// One element's step, shared by every kernel here: one operation order.
__device__ __forceinline__ void tl_adam_one(float* __restrict__ p, const float* __restrict__ g,
                                            float* __restrict__ m, float* __restrict__ v,
                                            unsigned i, float lr, float b1, float b2, float c1,
                                            float c2, float bc1, float bc2, float eps) {
    const float gi = g[i];
    const float mi = b1 * m[i] + c1 * gi;
    const float vi = b2 * v[i] + (c2 * gi) * gi;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / bc1;
    const float v_hat = vi / bc2;
    p[i] = p[i] - (lr * m_hat) / (sqrtf(v_hat) + eps);
}

// The step over this thread's elements of one tensor.
__device__ __forceinline__ void tl_adam_elements(float* __restrict__ p, const float* __restrict__ g,
                                                 float* __restrict__ m, float* __restrict__ v,
                                                 unsigned n, float lr, float b1, float b2,
                                                 float c1, float c2, float bc1, float bc2,
                                                 float eps) {
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i = tl_next(i, stride, n))
        tl_adam_one(p, g, m, v, i, lr, b1, b2, c1, c2, bc1, bc2, eps);
}

extern "C" __global__ void tl_adam_step(float* __restrict__ p, const float* __restrict__ g,
                                        float* __restrict__ m, float* __restrict__ v, unsigned n,
                                        float lr, float b1, float b2, float c1, float c2,
                                        float bc1, float bc2, float eps) {
    tl_adam_elements(p, g, m, v, n, lr, b1, b2, c1, c2, bc1, bc2, eps);
}

extern "C" __global__ void tl_adam_step_table(float* __restrict__ p, const float* __restrict__ g,
                                              float* __restrict__ m, float* __restrict__ v,
                                              unsigned n, float lr, float b1, float b2, float c1,
                                              float c2, const float* __restrict__ bc,
                                              const unsigned* __restrict__ step, unsigned last,
                                              float eps) {
    const unsigned t = min(*step, last);
    tl_adam_elements(p, g, m, v, n, lr, b1, b2, c1, c2, bc[2u * t], bc[2u * t + 1u], eps);
}

extern "C" __global__ void tl_adam_advance(unsigned* step) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *step += 1u;
}

// --- the multi-tensor step ------------------------------------------------------------------

#define TL_ADAM_CHUNK 4096u   // elements per block: engine/providers/native_cuda/optim_multi.py

__device__ __forceinline__ void tl_adam_chunk(const unsigned long long* __restrict__ ptrs,
                                              unsigned T, const unsigned* __restrict__ sizes,
                                              const unsigned* __restrict__ decay,
                                              const unsigned* __restrict__ chunks,
                                              unsigned use_decay, float shrink, float lr,
                                              float b1, float b2, float c1, float c2, float bc1,
                                              float bc2, float eps) {
    const unsigned t = chunks[2u * blockIdx.x], first = chunks[2u * blockIdx.x + 1u];
    const float* g = reinterpret_cast<const float*>(ptrs[T + t]);
    if (g == nullptr) return;                        // no gradient: the parameter stays
    float* p = reinterpret_cast<float*>(ptrs[t]);
    float* m = reinterpret_cast<float*>(ptrs[2u * T + t]);
    float* v = reinterpret_cast<float*>(ptrs[3u * T + t]);
    const unsigned n = sizes[t];
    const unsigned end = (n - first > TL_ADAM_CHUNK) ? first + TL_ADAM_CHUNK : n;
    const bool decays = use_decay != 0u && decay[t] != 0u;
    for (unsigned i = first + threadIdx.x; i < end; i += blockDim.x) {
        if (decays) p[i] = p[i] * shrink;
        tl_adam_one(p, g, m, v, i, lr, b1, b2, c1, c2, bc1, bc2, eps);
    }
}

extern "C" __global__ void tl_adam_multi(const unsigned long long* __restrict__ ptrs, unsigned T,
                                         const unsigned* __restrict__ sizes,
                                         const unsigned* __restrict__ decay,
                                         const unsigned* __restrict__ chunks, unsigned use_decay,
                                         float shrink, float lr, float b1, float b2, float c1,
                                         float c2, float bc1, float bc2, float eps) {
    tl_adam_chunk(ptrs, T, sizes, decay, chunks, use_decay, shrink, lr, b1, b2, c1, c2, bc1, bc2,
                  eps);
}

extern "C" __global__ void tl_adam_multi_table(const unsigned long long* __restrict__ ptrs,
                                               unsigned T, const unsigned* __restrict__ sizes,
                                               const unsigned* __restrict__ decay,
                                               const unsigned* __restrict__ chunks,
                                               unsigned use_decay, float shrink, float lr,
                                               float b1, float b2, float c1, float c2,
                                               const float* __restrict__ bc,
                                               const unsigned* __restrict__ step, unsigned last,
                                               float eps) {
    const unsigned s = min(*step, last);
    tl_adam_chunk(ptrs, T, sizes, decay, chunks, use_decay, shrink, lr, b1, b2, c1, c2,
                  bc[2u * s], bc[2u * s + 1u], eps);
}

#define TL_PTR_ARGS8(k) unsigned long long a##k##0, unsigned long long a##k##1, \
    unsigned long long a##k##2, unsigned long long a##k##3, unsigned long long a##k##4, \
    unsigned long long a##k##5, unsigned long long a##k##6, unsigned long long a##k##7
#define TL_PTR_LIST8(k) a##k##0, a##k##1, a##k##2, a##k##3, a##k##4, a##k##5, a##k##6, a##k##7

extern "C" __global__ void tl_adam_set_ptrs(unsigned long long* __restrict__ ptrs,
                                            unsigned first, unsigned count, TL_PTR_ARGS8(0),
                                            TL_PTR_ARGS8(1), TL_PTR_ARGS8(2), TL_PTR_ARGS8(3),
                                            TL_PTR_ARGS8(4), TL_PTR_ARGS8(5), TL_PTR_ARGS8(6),
                                            TL_PTR_ARGS8(7)) {
    const unsigned long long a[64] = {TL_PTR_LIST8(0), TL_PTR_LIST8(1), TL_PTR_LIST8(2),
                                      TL_PTR_LIST8(3), TL_PTR_LIST8(4), TL_PTR_LIST8(5),
                                      TL_PTR_LIST8(6), TL_PTR_LIST8(7)};
    const unsigned k = threadIdx.x;
    if (blockIdx.x == 0 && k < count && k < 64u) ptrs[first + k] = a[k];
}
