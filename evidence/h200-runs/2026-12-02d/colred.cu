// experiment: column sums of [R][inner] (outer 1), block-combined variants
extern "C" __global__ void cols_blk(const float* __restrict__ in, float* __restrict__ out,
                                    unsigned R, unsigned inner, unsigned seg, unsigned groups,
                                    int atomic) {
    const unsigned lane = threadIdx.x & 31u, w = threadIdx.x >> 5;
    const unsigned g = blockIdx.x % groups, c = blockIdx.x / groups;
    const unsigned q = g * 32u + lane;
    const unsigned lo = c * seg;
    const unsigned len = (R - lo > seg) ? seg : R - lo;
    const unsigned sub = (len + 7u) >> 3;
    const unsigned a = w * sub < len ? w * sub : len;
    const unsigned b = (w + 1u) * sub < len ? (w + 1u) * sub : len;
    float4 acc = make_float4(-0.0f, -0.0f, -0.0f, -0.0f);
    const float* p = in + (unsigned long long)lo * inner + 4u * q;
    unsigned r = a;
    for (; r + 8u <= b; r += 8u) {
        float4 v[8];
#pragma unroll
        for (unsigned u = 0; u < 8u; ++u)
            v[u] = *reinterpret_cast<const float4*>(p + (unsigned long long)(r + u) * inner);
#pragma unroll
        for (unsigned u = 0; u < 8u; ++u) { acc.x += v[u].x; acc.y += v[u].y; acc.z += v[u].z; acc.w += v[u].w; }
    }
    for (; r < b; ++r) {
        const float4 v = *reinterpret_cast<const float4*>(p + (unsigned long long)r * inner);
        acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    }
    __shared__ float part[8][128];
    part[w][4 * lane] = acc.x; part[w][4 * lane + 1] = acc.y;
    part[w][4 * lane + 2] = acc.z; part[w][4 * lane + 3] = acc.w;
    __syncthreads();
    if (threadIdx.x < 128u) {
        float s = part[0][threadIdx.x];
#pragma unroll
        for (unsigned k = 1; k < 8u; ++k) s += part[k][threadIdx.x];
        const unsigned col = g * 128u + threadIdx.x;
        if (atomic) atomicAdd(out + col, s);
        else out[(unsigned long long)c * inner + col] = s;
    }
}

// interleaved: warp w takes rows w, w+8, ... in batches of 8 rows per warp-step -> 64-row stride
extern "C" __global__ void cols_blk_il(const float* __restrict__ in, float* __restrict__ out,
                                       unsigned R, unsigned inner, unsigned seg, unsigned groups,
                                       int atomic) {
    const unsigned lane = threadIdx.x & 31u, w = threadIdx.x >> 5;
    const unsigned g = blockIdx.x % groups, c = blockIdx.x / groups;
    const unsigned q = g * 32u + lane;
    const unsigned lo = c * seg;
    const unsigned len = (R - lo > seg) ? seg : R - lo;
    float4 acc = make_float4(-0.0f, -0.0f, -0.0f, -0.0f);
    const float* p = in + (unsigned long long)lo * inner + 4u * q;
    unsigned r = w * 8u;
    for (; r + 8u <= len; r += 64u) {
        float4 v[8];
#pragma unroll
        for (unsigned u = 0; u < 8u; ++u)
            v[u] = *reinterpret_cast<const float4*>(p + (unsigned long long)(r + u) * inner);
#pragma unroll
        for (unsigned u = 0; u < 8u; ++u) { acc.x += v[u].x; acc.y += v[u].y; acc.z += v[u].z; acc.w += v[u].w; }
    }
    __shared__ float part[8][128];
    part[w][4 * lane] = acc.x; part[w][4 * lane + 1] = acc.y;
    part[w][4 * lane + 2] = acc.z; part[w][4 * lane + 3] = acc.w;
    __syncthreads();
    if (threadIdx.x < 128u) {
        float s = part[0][threadIdx.x];
#pragma unroll
        for (unsigned k = 1; k < 8u; ++k) s += part[k][threadIdx.x];
        const unsigned col = g * 128u + threadIdx.x;
        if (atomic) atomicAdd(out + col, s);
        else out[(unsigned long long)c * inner + col] = s;
    }
}
