/* generated from templates/f32-unary.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* Elementwise unary kernels, plus the vector math (log, erf, pow) and partial-vector helpers that the
 * binary, softmax, reduce and LRN families build on (each of those lists f32-unary before itself). */

/* Lanes [0, k) of p as a vector (k < 4); the rest are zero. Never reads past p + k. */
INLINE v128_t load_tail(const float* p, int k) {
  float t[4] = {0, 0, 0, 0};
  for (int j = 0; j < k; j++) t[j] = p[j];
  return VLOAD(t);
}
/* Store lanes [0, k) of v to p (k < 4) without touching p[k..3], which may belong to another tensor. */
INLINE void store_tail(float* p, v128_t v, int k) {
  float t[4];
  VSTORE(t, v);
  for (int j = 0; j < k; j++) p[j] = t[j];
}
/* k (1..4) lanes at p: the kernels that walk 4 columns at a time end with a partial block */
INLINE v128_t load_k(const float* p, int k) { return k == 4 ? VLOAD(p) : load_tail(p, k); }
INLINE void store_k(float* p, v128_t v, int k) {
  if (k == 4) VSTORE(p, v); else store_tail(p, v, k);
}
INLINE float hsum(v128_t v) {
  return (wasm_f32x4_extract_lane(v, 0) + wasm_f32x4_extract_lane(v, 1)) +
         (wasm_f32x4_extract_lane(v, 2) + wasm_f32x4_extract_lane(v, 3));
}

/* log(x) for 4 lanes (Cephes logf): x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(1 + (m-1)) by a
 * degree-9 polynomial. Denormals are treated as the smallest normal; log(0) = -inf, log(<0) = nan. */
INLINE v128_t v_log(v128_t x) {
  v128_t xc = VMAX(x, VSPLAT(1.17549435e-38f));  /* NaN stays NaN (see v_clamp) */
  v128_t e = wasm_i32x4_sub(wasm_u32x4_shr(xc, 23), wasm_i32x4_splat(126));
  v128_t m = wasm_v128_or(wasm_v128_and(xc, wasm_i32x4_splat(0x007fffff)), wasm_i32x4_splat(0x3f000000));
  v128_t small = wasm_f32x4_lt(m, VSPLAT(0.707106781186547524f));
  v128_t ef = wasm_f32x4_sub(wasm_f32x4_convert_i32x4(e), wasm_v128_and(small, VSPLAT(1.0f)));
  m = wasm_f32x4_sub(wasm_f32x4_add(m, wasm_v128_and(small, m)), VSPLAT(1.0f));
  v128_t z = wasm_f32x4_mul(m, m);
  v128_t p = VSPLAT(7.0376836292e-2f);
  p = VFMA(p, m, VSPLAT(-1.1514610310e-1f));
  p = VFMA(p, m, VSPLAT(1.1676998740e-1f));
  p = VFMA(p, m, VSPLAT(-1.2420140846e-1f));
  p = VFMA(p, m, VSPLAT(1.4249322787e-1f));
  p = VFMA(p, m, VSPLAT(-1.6668057665e-1f));
  p = VFMA(p, m, VSPLAT(2.0000714765e-1f));
  p = VFMA(p, m, VSPLAT(-2.4999993993e-1f));
  p = VFMA(p, m, VSPLAT(3.3333331174e-1f));
  p = wasm_f32x4_mul(wasm_f32x4_mul(p, m), z);
  p = VFMA(ef, VSPLAT(-2.12194440e-4f), p);
  p = VFMA(z, VSPLAT(-0.5f), p);
  v128_t r = VFMA(ef, VSPLAT(0.693359375f), wasm_f32x4_add(m, p));
  r = wasm_v128_bitselect(VSPLAT(-__builtin_inff()), r, wasm_f32x4_eq(x, VSPLAT(0.0f)));
  r = wasm_v128_bitselect(VSPLAT(__builtin_inff()), r, wasm_f32x4_eq(x, VSPLAT(__builtin_inff())));
  /* x < 0 or x is nan: nan */
  return wasm_v128_bitselect(VSPLAT(__builtin_nanf("")), r, wasm_v128_not(wasm_f32x4_ge(x, VSPLAT(0.0f))));
}

/* erf(x): odd rational approximation on [-4, 4] (Eigen's), |error| < 4e-7; saturates to +-1 beyond. */
INLINE v128_t v_erf(v128_t x) {
  x = v_clamp(x, -4.0f, 4.0f);
  v128_t x2 = wasm_f32x4_mul(x, x);
  v128_t p = VSPLAT(-2.72614225801306e-10f);
  p = VFMA(p, x2, VSPLAT(2.77068142495902e-08f));
  p = VFMA(p, x2, VSPLAT(-2.10102402082508e-06f));
  p = VFMA(p, x2, VSPLAT(-5.69250639462346e-05f));
  p = VFMA(p, x2, VSPLAT(-7.34990630326855e-04f));
  p = VFMA(p, x2, VSPLAT(-2.95459980854025e-03f));
  p = VFMA(p, x2, VSPLAT(-1.60960333262415e-02f));
  v128_t q = VSPLAT(-1.45660718464996e-05f);
  q = VFMA(q, x2, VSPLAT(-2.13374055278905e-04f));
  q = VFMA(q, x2, VSPLAT(-1.68282697438203e-03f));
  q = VFMA(q, x2, VSPLAT(-7.37332916720468e-03f));
  q = VFMA(q, x2, VSPLAT(-1.42647390514189e-02f));
  return wasm_f32x4_div(wasm_f32x4_mul(p, x), q);
}

/* a^b = exp(b log|a|), with the sign of a for odd integer b, nan for a < 0 and non-integer b, 1 for b = 0. */
INLINE v128_t v_pow(v128_t a, v128_t b) {
  v128_t r = v_exp(wasm_f32x4_mul(b, v_log(wasm_f32x4_abs(a))));
  v128_t bint = wasm_f32x4_eq(wasm_f32x4_nearest(b), b);
  v128_t odd = wasm_f32x4_ne(wasm_f32x4_nearest(wasm_f32x4_mul(b, VSPLAT(0.5f))), wasm_f32x4_mul(b, VSPLAT(0.5f)));
  v128_t neg = wasm_f32x4_lt(a, VSPLAT(0.0f));
  r = wasm_v128_bitselect(wasm_f32x4_neg(r), r, wasm_v128_and(neg, wasm_v128_and(bint, odd)));
  r = wasm_v128_bitselect(VSPLAT(__builtin_nanf("")), r, wasm_v128_andnot(neg, bint));
  /* a = 0: exp saturates at the float range ends; give the exact 0 / inf */
  v128_t zero = wasm_f32x4_eq(a, VSPLAT(0.0f));
  r = wasm_v128_bitselect(VSPLAT(0.0f), r, wasm_v128_and(zero, wasm_f32x4_gt(b, VSPLAT(0.0f))));
  r = wasm_v128_bitselect(VSPLAT(__builtin_inff()), r, wasm_v128_and(zero, wasm_f32x4_lt(b, VSPLAT(0.0f))));
  return wasm_v128_bitselect(VSPLAT(1.0f), r, wasm_f32x4_eq(b, VSPLAT(0.0f)));
}

/* sin and cos for 4 lanes (Cephes sinf/cosf, as in SSE sin_ps/cos_ps): |x| reduced by multiples of pi/4
 * (j = 4|x|/pi rounded up to even, a three-part Cody-Waite subtraction), then the sine or the cosine
 * polynomial on [-pi/4, pi/4] as the octant says. About 2 ulp for |x| < 8192 (past it the reduction
 * loses bits, as Cephes); inf and nan give nan. */
INLINE v128_t v_sincos(v128_t x, int cosine) {
  v128_t ax = wasm_f32x4_abs(x);
  v128_t j = wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_mul(ax, VSPLAT(1.27323954473516f)));
  j = wasm_v128_and(wasm_i32x4_add(j, wasm_i32x4_splat(1)), wasm_i32x4_splat(~1));
  v128_t y = wasm_f32x4_convert_i32x4(j);
  v128_t sign;
  if (cosine) {
    j = wasm_i32x4_sub(j, wasm_i32x4_splat(2));
    sign = wasm_i32x4_shl(wasm_v128_andnot(wasm_i32x4_splat(4), j), 29);
  } else {
    sign = wasm_v128_xor(wasm_v128_and(x, wasm_i32x4_splat((int)0x80000000)),
                         wasm_i32x4_shl(wasm_v128_and(j, wasm_i32x4_splat(4)), 29));
  }
  v128_t sin_poly = wasm_i32x4_eq(wasm_v128_and(j, wasm_i32x4_splat(2)), wasm_i32x4_splat(0));
  v128_t z = VFMA(y, VSPLAT(-0.78515625f), ax);
  z = VFMA(y, VSPLAT(-2.4187564849853515625e-4f), z);
  z = VFMA(y, VSPLAT(-3.77489497744594108e-8f), z);
  v128_t zz = wasm_f32x4_mul(z, z);
  v128_t c = VSPLAT(2.443315711809948e-5f);
  c = VFMA(c, zz, VSPLAT(-1.388731625493765e-3f));
  c = VFMA(c, zz, VSPLAT(4.166664568298827e-2f));
  c = wasm_f32x4_mul(wasm_f32x4_mul(c, zz), zz);
  c = VFMA(zz, VSPLAT(-0.5f), c);
  c = wasm_f32x4_add(c, VSPLAT(1.0f));
  v128_t s = VSPLAT(-1.9515295891e-4f);
  s = VFMA(s, zz, VSPLAT(8.3321608736e-3f));
  s = VFMA(s, zz, VSPLAT(-1.6666654611e-1f));
  s = VFMA(z, wasm_f32x4_mul(s, zz), z);
  v128_t r = wasm_v128_xor(wasm_v128_bitselect(s, c, sin_poly), sign);
  return wasm_v128_bitselect(r, VSPLAT(__builtin_nanf("")), wasm_f32x4_lt(ax, VSPLAT(__builtin_inff())));
}

/* asin on [-0.5, 0.5] (Cephes asinf's polynomial): the core of asin and acos */
INLINE v128_t v_asin_core(v128_t x) {
  v128_t z = wasm_f32x4_mul(x, x);
  v128_t p = VSPLAT(4.2163199048e-2f);
  p = VFMA(p, z, VSPLAT(2.4181311049e-2f));
  p = VFMA(p, z, VSPLAT(4.5470025998e-2f));
  p = VFMA(p, z, VSPLAT(7.4953002686e-2f));
  p = VFMA(p, z, VSPLAT(1.6666752422e-1f));
  return VFMA(x, wasm_f32x4_mul(p, z), x);
}

/* asin(x) (Cephes asinf): |x| > 0.5 as pi/2 - 2 asin(sqrt((1 - |x|) / 2)); |x| > 1 gives nan. */
INLINE v128_t v_asin(v128_t x) {
  v128_t a = wasm_f32x4_abs(x);
  v128_t big = wasm_f32x4_gt(a, VSPLAT(0.5f));
  v128_t t = wasm_v128_bitselect(wasm_f32x4_sqrt(wasm_f32x4_mul(VSPLAT(0.5f), wasm_f32x4_sub(VSPLAT(1.0f), a))),
                                 a, big);
  v128_t p = v_asin_core(t);
  p = wasm_v128_bitselect(wasm_f32x4_sub(VSPLAT(1.5707963267948966f), wasm_f32x4_add(p, p)), p, big);
  return wasm_v128_or(p, wasm_v128_and(x, wasm_i32x4_splat((int)0x80000000)));
}

/* acos(x) (Cephes acosf): 2 asin(sqrt((1 - x) / 2)) above 0.5, pi - that of -x below -0.5, else
 * pi/2 - asin(x): no cancellation near +-1. */
INLINE v128_t v_acos(v128_t x) {
  v128_t a = wasm_f32x4_abs(x);
  v128_t big = wasm_f32x4_gt(a, VSPLAT(0.5f));
  v128_t t = wasm_f32x4_sqrt(wasm_f32x4_mul(VSPLAT(0.5f), wasm_f32x4_sub(VSPLAT(1.0f), a)));
  v128_t edge = v_asin_core(t);
  edge = wasm_f32x4_add(edge, edge);
  edge = wasm_v128_bitselect(wasm_f32x4_sub(VSPLAT(3.14159265358979f), edge), edge,
                             wasm_f32x4_lt(x, VSPLAT(0.0f)));
  v128_t mid = wasm_f32x4_sub(VSPLAT(1.5707963267948966f), v_asin_core(x));
  return wasm_v128_bitselect(edge, mid, big);
}

/* atan(x) (Cephes atanf): |x| above tan(3pi/8) as pi/2 + atan(-1/|x|), above tan(pi/8) as
 * pi/4 + atan((|x| - 1) / (|x| + 1)), then an odd polynomial; the sign of x. */
INLINE v128_t v_atan(v128_t x) {
  v128_t a = wasm_f32x4_abs(x);
  v128_t far = wasm_f32x4_gt(a, VSPLAT(2.414213562373095f));
  v128_t mid = wasm_v128_andnot(wasm_f32x4_gt(a, VSPLAT(0.4142135623730950f)), far);
  v128_t t = wasm_v128_bitselect(wasm_f32x4_div(VSPLAT(-1.0f), a), a, far);
  t = wasm_v128_bitselect(wasm_f32x4_div(wasm_f32x4_sub(a, VSPLAT(1.0f)), wasm_f32x4_add(a, VSPLAT(1.0f))), t, mid);
  v128_t y0 = wasm_v128_or(wasm_v128_and(far, VSPLAT(1.5707963267948966f)),
                           wasm_v128_and(mid, VSPLAT(0.7853981633974483f)));
  v128_t z = wasm_f32x4_mul(t, t);
  v128_t p = VSPLAT(8.05374449538e-2f);
  p = VFMA(p, z, VSPLAT(-1.38776856032e-1f));
  p = VFMA(p, z, VSPLAT(1.99777106478e-1f));
  p = VFMA(p, z, VSPLAT(-3.33329491539e-1f));
  v128_t r = wasm_f32x4_add(y0, VFMA(t, wasm_f32x4_mul(p, z), t));
  return wasm_v128_or(r, wasm_v128_and(x, wasm_i32x4_splat((int)0x80000000)));
}

/* sinh(x) (Cephes sinhf): a polynomial for |x| <= 1, else (e^|x| - e^-|x|) / 2 with the sign of x. */
INLINE v128_t v_sinh(v128_t x) {
  v128_t a = wasm_f32x4_abs(x);
  v128_t e = v_exp(a);
  v128_t big = wasm_f32x4_mul(VSPLAT(0.5f), wasm_f32x4_sub(e, wasm_f32x4_div(VSPLAT(1.0f), e)));
  big = wasm_v128_or(big, wasm_v128_and(x, wasm_i32x4_splat((int)0x80000000)));
  v128_t z = wasm_f32x4_mul(x, x);
  v128_t p = VSPLAT(2.03721912945e-4f);
  p = VFMA(p, z, VSPLAT(8.33028376239e-3f));
  p = VFMA(p, z, VSPLAT(1.66667160211e-1f));
  v128_t small = VFMA(x, wasm_f32x4_mul(p, z), x);
  return wasm_v128_bitselect(big, small, wasm_f32x4_gt(a, VSPLAT(1.0f)));
}

/* cosh(x) = (e^|x| + e^-|x|) / 2 */
INLINE v128_t v_cosh(v128_t x) {
  v128_t e = v_exp(wasm_f32x4_abs(x));
  return wasm_f32x4_mul(VSPLAT(0.5f), wasm_f32x4_add(e, wasm_f32x4_div(VSPLAT(1.0f), e)));
}

/* asinh(x) (Cephes asinhf): a polynomial below 0.5, log(|x| + sqrt(x^2 + 1)) up to 1500 and
 * log(|x|) + log 2 past it (x^2 would overflow); the sign of x. */
INLINE v128_t v_asinh(v128_t x) {
  v128_t a = wasm_f32x4_abs(x);
  v128_t z = wasm_f32x4_mul(a, a);
  v128_t mid = v_log(wasm_f32x4_add(a, wasm_f32x4_sqrt(wasm_f32x4_add(z, VSPLAT(1.0f)))));
  v128_t huge = wasm_f32x4_add(v_log(a), VSPLAT(0.693147180559945f));
  v128_t p = VSPLAT(2.0122003309e-2f);
  p = VFMA(p, z, VSPLAT(-4.2699340972e-2f));
  p = VFMA(p, z, VSPLAT(7.4847586088e-2f));
  p = VFMA(p, z, VSPLAT(-1.6666288134e-1f));
  v128_t small = VFMA(a, wasm_f32x4_mul(p, z), a);
  v128_t r = wasm_v128_bitselect(small, wasm_v128_bitselect(huge, mid, wasm_f32x4_gt(a, VSPLAT(1500.0f))),
                                 wasm_f32x4_lt(a, VSPLAT(0.5f)));
  return wasm_v128_or(r, wasm_v128_and(x, wasm_i32x4_splat((int)0x80000000)));
}

/* acosh(x) (Cephes acoshf): sqrt(2 (x - 1)) times a polynomial just above 1, log(x + sqrt(x^2 - 1)) up
 * to 1500, log(x) + log 2 past it; nan below 1. */
INLINE v128_t v_acosh(v128_t x) {
  v128_t z = wasm_f32x4_sub(x, VSPLAT(1.0f));
  v128_t p = VSPLAT(1.7596881071e-3f);
  p = VFMA(p, z, VSPLAT(-7.5272886713e-3f));
  p = VFMA(p, z, VSPLAT(2.6454905019e-2f));
  p = VFMA(p, z, VSPLAT(-1.1784741703e-1f));
  p = VFMA(p, z, VSPLAT(1.4142135263f));
  v128_t near = wasm_f32x4_mul(p, wasm_f32x4_sqrt(z));
  v128_t mid = v_log(wasm_f32x4_add(x, wasm_f32x4_sqrt(wasm_f32x4_mul(z, wasm_f32x4_add(x, VSPLAT(1.0f))))));
  v128_t huge = wasm_f32x4_add(v_log(x), VSPLAT(0.693147180559945f));
  v128_t r = wasm_v128_bitselect(near, wasm_v128_bitselect(huge, mid, wasm_f32x4_gt(x, VSPLAT(1500.0f))),
                                 wasm_f32x4_lt(z, VSPLAT(0.5f)));
  return wasm_v128_bitselect(VSPLAT(__builtin_nanf("")), r, wasm_v128_not(wasm_f32x4_ge(x, VSPLAT(1.0f))));
}

/* atanh(x) (Cephes atanhf): an odd polynomial below 0.5, else log((1 + x) / (1 - x)) / 2 (+-inf at +-1,
 * nan past). */
INLINE v128_t v_atanh(v128_t x) {
  v128_t z = wasm_f32x4_mul(x, x);
  v128_t p = VSPLAT(1.81740078349e-1f);
  p = VFMA(p, z, VSPLAT(8.24370301058e-2f));
  p = VFMA(p, z, VSPLAT(1.46691431730e-1f));
  p = VFMA(p, z, VSPLAT(1.99782164500e-1f));
  p = VFMA(p, z, VSPLAT(3.33337300303e-1f));
  v128_t small = VFMA(x, wasm_f32x4_mul(p, z), x);
  v128_t big = wasm_f32x4_mul(VSPLAT(0.5f), v_log(wasm_f32x4_div(wasm_f32x4_add(VSPLAT(1.0f), x),
                                                                   wasm_f32x4_sub(VSPLAT(1.0f), x))));
  return wasm_v128_bitselect(small, big, wasm_f32x4_lt(wasm_f32x4_abs(x), VSPLAT(0.5f)));
}

/* y = act(f(x)) over n floats; y may equal x. */
KERNEL void f32_vexp(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(v_exp(v), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(v_exp(v), act), n - i);
  }
}

KERNEL void f32_vlog(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(v_log(v), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(v_log(v), act), n - i);
  }
}

KERNEL void f32_vsqrt(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(wasm_f32x4_sqrt(v), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(wasm_f32x4_sqrt(v), act), n - i);
  }
}

KERNEL void f32_vneg(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(wasm_f32x4_neg(v), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(wasm_f32x4_neg(v), act), n - i);
  }
}

KERNEL void f32_vabs(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(wasm_f32x4_abs(v), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(wasm_f32x4_abs(v), act), n - i);
  }
}

KERNEL void f32_verf(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(v_erf(v), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(v_erf(v), act), n - i);
  }
}

KERNEL void f32_vfloor(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(wasm_f32x4_floor(v), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(wasm_f32x4_floor(v), act), n - i);
  }
}

KERNEL void f32_vceil(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(wasm_f32x4_ceil(v), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(wasm_f32x4_ceil(v), act), n - i);
  }
}

KERNEL void f32_vround(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(wasm_f32x4_nearest(v), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(wasm_f32x4_nearest(v), act), n - i);
  }
}

KERNEL void f32_vreciprocal(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(wasm_f32x4_div(VSPLAT(1.0f), v), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(wasm_f32x4_div(VSPLAT(1.0f), v), act), n - i);
  }
}

KERNEL void f32_vsquare(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(wasm_f32x4_mul(v, v), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(wasm_f32x4_mul(v, v), act), n - i);
  }
}

KERNEL void f32_vcube(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(wasm_f32x4_mul(wasm_f32x4_mul(v, v), v), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(wasm_f32x4_mul(wasm_f32x4_mul(v, v), v), act), n - i);
  }
}

KERNEL void f32_vcopy(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(v, act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(v, act), n - i);
  }
}

KERNEL void f32_vsin(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(v_sincos(v, 0), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(v_sincos(v, 0), act), n - i);
  }
}

KERNEL void f32_vcos(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(v_sincos(v, 1), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(v_sincos(v, 1), act), n - i);
  }
}

KERNEL void f32_vtan(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(wasm_f32x4_div(v_sincos(v, 0), v_sincos(v, 1)), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(wasm_f32x4_div(v_sincos(v, 0), v_sincos(v, 1)), act), n - i);
  }
}

KERNEL void f32_vasin(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(v_asin(v), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(v_asin(v), act), n - i);
  }
}

KERNEL void f32_vacos(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(v_acos(v), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(v_acos(v), act), n - i);
  }
}

KERNEL void f32_vatan(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(v_atan(v), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(v_atan(v), act), n - i);
  }
}

KERNEL void f32_vsinh(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(v_sinh(v), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(v_sinh(v), act), n - i);
  }
}

KERNEL void f32_vcosh(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(v_cosh(v), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(v_cosh(v), act), n - i);
  }
}

KERNEL void f32_vasinh(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(v_asinh(v), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(v_asinh(v), act), n - i);
  }
}

KERNEL void f32_vacosh(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(v_acosh(v), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(v_acosh(v), act), n - i);
  }
}

KERNEL void f32_vatanh(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(v_atanh(v), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(v_atanh(v), act), n - i);
  }
}

KERNEL void f32_vsign(int n, const float* x, float* y, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t v = VLOAD(x + i);
    VSTORE(y + i, act_apply(wasm_v128_or(wasm_v128_and(wasm_f32x4_gt(v, VSPLAT(0.0f)), VSPLAT(1.0f)), wasm_v128_and(wasm_f32x4_lt(v, VSPLAT(0.0f)), VSPLAT(-1.0f))), act));
  }
  if (i < n) {
    v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, act_apply(wasm_v128_or(wasm_v128_and(wasm_f32x4_gt(v, VSPLAT(0.0f)), VSPLAT(1.0f)), wasm_v128_and(wasm_f32x4_lt(v, VSPLAT(0.0f)), VSPLAT(-1.0f))), act), n - i);
  }
}

