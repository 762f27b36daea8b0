// What tl_act_f32.cuh (the float32 activation functors) needs from CUDA's device API on the host,
// shared by activations_host.cpp and loss_optim_host.cpp (bias_gelu.cu): its table's float2 and
// __ldg (a plain load), the bit casts it uses, and PTX rcp.approx.f32 (specified to 1 ulp) as
// emu_rcp_approx: the correctly rounded reciprocal moved g_rcp_ulps float ulps (the builder puts
// the call in place of the asm statement: tests/emulated/host_build.py), so a test can try every
// admissible result. Bit casts cuda_host.h already has (__int_as_float, __float_as_uint) are not
// here.
#ifndef TL_ACT_F32_HOST_H
#define TL_ACT_F32_HOST_H
#include <cmath>
#include <cstdint>
#include <cstring>

struct float2 { float x, y; };
template <class T> inline T __ldg(const T* p) { return *p; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline double __hiloint2double(int hi, int lo) {
    const uint64_t u = (uint64_t)(uint32_t)hi << 32 | (uint32_t)lo;
    double d;
    std::memcpy(&d, &u, 8);
    return d;
}
inline int __double2hiint(double d) { uint64_t u; std::memcpy(&u, &d, 8); return (int)(u >> 32); }
inline int __double2loint(double d) { uint64_t u; std::memcpy(&u, &d, 8); return (int)(uint32_t)u; }
int g_rcp_ulps = 0;
inline float emu_rcp_approx(float f) {
    float r = 1.0f / f;
    for (int k = 0; k < (g_rcp_ulps < 0 ? -g_rcp_ulps : g_rcp_ulps); ++k)
        r = std::nextafter(r, g_rcp_ulps < 0 ? 0.0f : 4.0f);
    return r;
}
#endif
