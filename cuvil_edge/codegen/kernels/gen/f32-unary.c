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

