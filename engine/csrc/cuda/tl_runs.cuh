// Copying runs of w floats by lane groups: the row fast paths of shape.cu and the gather of
// index.cu. A run is cut in segments of TL_SEG_UNITS * tpr four-element units; a group of tpr
// lanes (a power of two, <= 32) copies one segment, so the caller computes a run's addresses once
// per segment instead of once per element. Include after tl_common.cuh (the loader inlines one
// level of headers).
//   tl_segment(seg, chunks, w, tpr)   segment `seg` of [rows][w] cut in `chunks` per run:
//                                     (run, first unit, end unit), one division
//   tl_copy_segment(src, dst, step, s, t, tpr, w, vec)   dst[j] = src[j * step] (step 0 or 1)
//       for the units of s that lane t owns; vec != 0 (w % 4 == 0, both runs 16-byte aligned;
//       step 0 reads one float, so only dst need be aligned)
//       moves a unit with one 16-byte load and store, all of a lane's loads issued first.
#ifndef TL_RUNS_CUH
#define TL_RUNS_CUH

#define TL_SEG_UNITS 8u

struct TlSegment { unsigned row, lo, hi; };

__device__ __forceinline__ TlSegment tl_segment(unsigned seg, unsigned chunks, unsigned w,
                                                unsigned tpr) {
    const unsigned units = (w + 3u) >> 2, span = TL_SEG_UNITS * tpr;
    TlSegment s;
    s.row = seg / chunks;
    s.lo = (seg - s.row * chunks) * span;
    s.hi = (units - s.lo > span) ? s.lo + span : units;
    return s;
}

__device__ __forceinline__ void tl_copy_segment(const float* __restrict__ src,
                                                float* __restrict__ dst, unsigned step,
                                                TlSegment s, unsigned t, unsigned tpr,
                                                unsigned w, int vec) {
    if (vec && step) {
        const float4* src4 = reinterpret_cast<const float4*>(src);
        float4* dst4 = reinterpret_cast<float4*>(dst);
        float4 v[TL_SEG_UNITS];
#pragma unroll
        for (unsigned k = 0; k < TL_SEG_UNITS; ++k) {
            const unsigned u = s.lo + t + k * tpr;
            if (u < s.hi) v[k] = src4[u];
        }
#pragma unroll
        for (unsigned k = 0; k < TL_SEG_UNITS; ++k) {
            const unsigned u = s.lo + t + k * tpr;
            if (u < s.hi) dst4[u] = v[k];
        }
    } else if (vec) {
        // Unrolled like the run copy above: the rolled loop ran the reduce_sum VJP's column
        // broadcast (65536 x 1024) at 3.6 TB/s, 1.14x PyTorch's write of the same bytes.
        const float x = src[0];
        const float4 v = make_float4(x, x, x, x);
        float4* dst4 = reinterpret_cast<float4*>(dst);
#pragma unroll
        for (unsigned k = 0; k < TL_SEG_UNITS; ++k) {
            const unsigned u = s.lo + t + k * tpr;
            if (u < s.hi) dst4[u] = v;
        }
    } else {
        for (unsigned u = s.lo + t; u < s.hi; u += tpr) {
            for (unsigned j = u << 2; j < w && j < (u << 2) + 4u; ++j) dst[j] = src[j * step];
        }
    }
}

#endif  // TL_RUNS_CUH
