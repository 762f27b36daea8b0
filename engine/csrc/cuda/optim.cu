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

#include "tl_common.cuh"

// The step over this thread's elements, shared by both kernels: one operation order.
__device__ __forceinline__ void tl_adam_elements(float* __restrict__ p, const float* __restrict__ g,
                                                 float* __restrict__ m, float* __restrict__ v,
                                                 unsigned n, float lr, float b1, float b2,
                                                 float c1, float c2, float bc1, float bc2,
                                                 float eps) {
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i = tl_next(i, stride, n)) {
        const float gi = g[i];
        const float mi = b1 * m[i] + c1 * gi;
        const float vi = b2 * v[i] + (c2 * gi) * gi;
        m[i] = mi;
        v[i] = vi;
        const float m_hat = mi / bc1;
        const float v_hat = vi / bc2;
        p[i] = p[i] - (lr * m_hat) / (sqrtf(v_hat) + eps);
    }
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
