// Device helpers shared by the kernel files; the loader inlines this header into each source
// that includes it (NVRTC gets one translation unit), and it is part of every build fingerprint.
//   tl_next(i, stride, n)   the next index of a grid-stride loop, saturating at n (no overflow)
//   tl_block_sum(v)         fixed-order float block sum (xor-shuffle in each warp, then the warp
//                           sums in order); meaningful in thread 0 only
//   tl_block_sum_d(v)       the same in double; every thread returns the total
//   tl_pick(v, i, v2, i2)   the better (value, index) candidate for an argmax: NaN first (lowest
//                           index), then the larger value, ties to the lower index
// Expects TL_BLOCK (threads per block, default 256); defines TL_NONE ("no candidate").
#ifndef TL_COMMON_CUH
#define TL_COMMON_CUH

#ifndef TL_BLOCK
#define TL_BLOCK 256
#endif
#define TL_NONE 0xffffffffu

__device__ __forceinline__ unsigned tl_next(unsigned i, unsigned stride, unsigned n) {
    return (n - i > stride) ? i + stride : n;
}

__device__ __forceinline__ float tl_block_sum(float v) {
    __shared__ float warp_sums[TL_BLOCK / 32];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    float total = -0.0f;
    if (threadIdx.x == 0) {
        const unsigned warps = (blockDim.x + 31u) >> 5;
        for (unsigned w = 0; w < warps; ++w) total += warp_sums[w];
    }
    return total;   // meaningful in thread 0 only
}

__device__ __forceinline__ double tl_block_sum_d(double v) {
    __shared__ double sv[TL_BLOCK / 32];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    __syncthreads();   // the slots may still be read by a previous call
    if ((threadIdx.x & 31u) == 0) sv[threadIdx.x >> 5] = v;
    __syncthreads();
    double total = sv[0];
    for (unsigned w = 1; w < blockDim.x / 32; ++w) total += sv[w];
    return total;
}

__device__ __forceinline__ void tl_pick(double& v, unsigned& i, double v2, unsigned i2) {
    if (i2 == TL_NONE) return;
    if (i == TL_NONE) { v = v2; i = i2; return; }
    const bool n1 = (v != v), n2 = (v2 != v2);
    bool take;
    if (n1 || n2) take = n2 && (!n1 || i2 < i);
    else take = (v2 > v) || (v2 == v && i2 < i);
    if (take) { v = v2; i = i2; }
}

#endif  // TL_COMMON_CUH
