// Host twin of conformance/exhaustive_fused.py's kernels: the same element functions (HELPERS,
// included from TL_HELPERS_FILE with __host__ __device__ defined away) driven by plain loops,
// with the kernels' block reductions replaced by sums and a maximum.
#define TL_HD
#include TL_HELPERS_FILE

typedef long long ll;

extern "C" {
void tl_k_f32_to_f64(const unsigned *x, double *y, ll n) {
    for (ll i = 0; i < n; ++i) y[i] = tl_f32_to_f64(x[i]);
}
void tl_k_f64_to_f32(const double *x, unsigned *y, ll n) {
    for (ll i = 0; i < n; ++i) y[i] = tl_f64_to_f32(x[i]);
}
void tl_k_subnormal32(const unsigned *x, bool *y, ll n) {
    for (ll i = 0; i < n; ++i) y[i] = tl_sub32(x[i]);
}
void tl_k_certify(const double *v, const double *bound, ll bs, const signed char *sign, ll ss,
                  const bool *dom, ll ds, int ovf, unsigned *r, bool *dec, ll n) {
    for (ll i = 0; i < n; ++i) {
        bool d;
        r[i] = tl_certify(v[i], bound[i * bs], sign[i * ss], dom[i * ds], ovf != 0, &d);
        dec[i] = d;
    }
}
void tl_k_classify(const unsigned *x, const unsigned *y, const unsigned *ref,
                   const unsigned *out, unsigned poison, unsigned char *code, tl_u64 *counts,
                   ll n) {
    for (ll i = 0; i < n; ++i)
        code[i] = (unsigned char)tl_classify(x[i], y[i], ref[i], out[i], poison, counts);
}
void tl_k_tally(const bool *ok, const double *ulps, const unsigned *ref, const unsigned *got,
                tl_u64 *counts, ll n) {
    for (ll i = 0; i < n; ++i) {
        tl_u64 k = tl_tally(ok[i], ulps[i], ref[i], got[i], counts);
        if (k > counts[TL_TALLY]) counts[TL_TALLY] = k;
    }
}
}
