// Group reductions for the register-path row kernels (softmax.cu, norm.cu): a group is G
// consecutive threads of a block (G = 32, 64, 128 or TL_BLOCK, dividing TL_BLOCK) that owns a row.
//   tl_group_sum<G>(v)          fixed-order double sum over the group: xor-shuffle tree in each
//                               warp, then the group's warps in order; every thread of the group
//                               returns the same total
//   tl_group_sum2<G>(a, b)      two such sums through one pair of barriers
//   tl_group_argmax<G>(v, i)    tl_pick over the group (see tl_common.cuh), same result everywhere
//   tl_group_max<G>(v)          fmax over the group (exact: any order gives the same value)
//   tl_group_or<G>(u), tl_group_min<G>(u)   bitwise or / minimum of unsigned values
// For G > 32 every thread of the block must make the same calls (they contain __syncthreads):
// the kernels walk rows in block-uniform steps. Include after tl_common.cuh (tl_pick, TL_BLOCK):
// the loader inlines one level of headers, so this one includes none.
#ifndef TL_ROWS_CUH
#define TL_ROWS_CUH

template <int G>
__device__ __forceinline__ unsigned tl_group_first_warp() {
    return (threadIdx.x / G) * (G / 32);
}

template <int G>
__device__ __forceinline__ double tl_group_sum(double v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (G == 32) return v;
    __shared__ double sv[TL_BLOCK / 32];
    __syncthreads();   // the slots may still be read by a previous call
    if ((threadIdx.x & 31u) == 0) sv[threadIdx.x >> 5] = v;
    __syncthreads();
    const unsigned w0 = tl_group_first_warp<G>();
    double total = sv[w0];
    for (unsigned w = 1; w < G / 32; ++w) total += sv[w0 + w];
    return total;
}

template <int G>
__device__ __forceinline__ void tl_group_sum2(double& a, double& b) {
    for (int off = 16; off > 0; off >>= 1) {
        a += __shfl_xor_sync(0xffffffffu, a, off);
        b += __shfl_xor_sync(0xffffffffu, b, off);
    }
    if (G == 32) return;
    __shared__ double sa[TL_BLOCK / 32], sb[TL_BLOCK / 32];
    __syncthreads();
    if ((threadIdx.x & 31u) == 0) { sa[threadIdx.x >> 5] = a; sb[threadIdx.x >> 5] = b; }
    __syncthreads();
    const unsigned w0 = tl_group_first_warp<G>();
    a = sa[w0];
    b = sb[w0];
    for (unsigned w = 1; w < G / 32; ++w) { a += sa[w0 + w]; b += sb[w0 + w]; }
}

template <int G>
__device__ __forceinline__ void tl_group_argmax(double& v, unsigned& i) {
    for (int off = 16; off > 0; off >>= 1) {
        const double v2 = __shfl_xor_sync(0xffffffffu, v, off);
        const unsigned i2 = __shfl_xor_sync(0xffffffffu, i, off);
        tl_pick(v, i, v2, i2);
    }
    if (G == 32) return;
    __shared__ double sv[TL_BLOCK / 32];
    __shared__ unsigned si[TL_BLOCK / 32];
    __syncthreads();
    if ((threadIdx.x & 31u) == 0) { sv[threadIdx.x >> 5] = v; si[threadIdx.x >> 5] = i; }
    __syncthreads();
    const unsigned w0 = tl_group_first_warp<G>();
    v = sv[w0];
    i = si[w0];
    for (unsigned w = 1; w < G / 32; ++w) tl_pick(v, i, sv[w0 + w], si[w0 + w]);
}

// One body for the order-free reductions: xor-shuffle in each warp, then the group's warps.
template <int G, class T, class Op>
__device__ __forceinline__ T tl_group_fold(T v, Op op) {
    for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
    if (G == 32) return v;
    __shared__ T sv[TL_BLOCK / 32];
    __syncthreads();
    if ((threadIdx.x & 31u) == 0) sv[threadIdx.x >> 5] = v;
    __syncthreads();
    const unsigned w0 = tl_group_first_warp<G>();
    v = sv[w0];
    for (unsigned w = 1; w < G / 32; ++w) v = op(v, sv[w0 + w]);
    return v;
}

struct TlMax { __device__ double operator()(double a, double b) const { return fmax(a, b); } };
struct TlOr { __device__ unsigned operator()(unsigned a, unsigned b) const { return a | b; } };
struct TlMin { __device__ unsigned operator()(unsigned a, unsigned b) const { return min(a, b); } };

template <int G>
__device__ __forceinline__ double tl_group_max(double v) { return tl_group_fold<G>(v, TlMax()); }
template <int G>
__device__ __forceinline__ unsigned tl_group_or(unsigned v) { return tl_group_fold<G>(v, TlOr()); }
template <int G>
__device__ __forceinline__ unsigned tl_group_min(unsigned v) { return tl_group_fold<G>(v, TlMin()); }

#endif  // TL_ROWS_CUH
