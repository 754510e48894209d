/* generated from templates/f64-math.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* float64 kernels, computed in double precision throughout, for the ops that run float64 tensors at run
 * time: batched matmul (f64_bmm), exp and log (f64_vexp, f64_vlog), the exact unary ops (f64_vneg, ...)
 * and softmax (f64_softmax).
 *
 * float64 graphs are rare (test models, numerics checks), so these are plain and correct rather than
 * fast: the matmul is a 2x4 register-blocked f64x2 loop, the rest scalar loops. exp and log take the
 * fdlibm reductions (x = k ln2 + r; x = 2^k (1 + f)) with series good to about 1 ulp: no libm in the
 * module.
 */

INLINE double f64_pow2i(int k) {  /* 2^k for -1022 <= k <= 1023 */
  union { uint64_t u; double f; } v = {(uint64_t)(k + 1023) << 52};
  return v.f;
}

INLINE double f64_exp(double x) {
  if (!(x == x)) return x;
  if (x > 709.782712893384) return __builtin_inf();
  if (x < -745.1332191019412) return 0.0;
  const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
  const double kf = __builtin_nearbyint(x * 1.44269504088896338700e+00);
  const int k = (int)kf;
  const double r = (x - kf * ln2_hi) - kf * ln2_lo;  /* |r| <= ln2 / 2 */
  double p = 1.0 / 6227020800.0;                      /* Taylor to r^13: the tail is below 1e-17 */
  const double inv[13] = {479001600.0, 39916800.0, 3628800.0, 362880.0, 40320.0, 5040.0, 720.0, 120.0,
                          24.0, 6.0, 2.0, 1.0, 1.0};
  for (int i = 0; i < 13; i++) p = p * r + 1.0 / inv[i];
  const int h = k / 2;  /* two steps keep each scale a normal power of two (results down to subnormals) */
  return p * f64_pow2i(h) * f64_pow2i(k - h);
}

INLINE double f64_log(double x) {
  if (!(x > 0)) return x == 0 ? -__builtin_inf() : __builtin_nan("");
  if (x == __builtin_inf()) return x;
  int k = 0;
  if (x < 2.2250738585072014e-308) {  /* subnormal: scale into the normal range */
    x *= 18014398509481984.0;  /* 2^54 */
    k = -54;
  }
  union { double f; uint64_t u; } v = {x};
  k += (int)((v.u >> 52) & 0x7FF) - 1023;
  v.u = (v.u & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull;  /* m in [1, 2) */
  double m = v.f;
  if (m > 1.4142135623730951) {
    m *= 0.5;
    k += 1;
  }
  const double f = m - 1.0, s = f / (2.0 + f), z = s * s;  /* log(1 + f) = 2 atanh(s), |s| < 0.172 */
  double p = 1.0 / 23.0;
  for (int i = 21; i >= 1; i -= 2) p = p * z + 1.0 / i;
  const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
  return k * ln2_hi + (2.0 * s * p + k * ln2_lo);
}

KERNEL void f64_vexp(int n, const double* x, double* y) {
  for (int i = 0; i < n; i++) y[i] = f64_exp(x[i]);
}

KERNEL void f64_vlog(int n, const double* x, double* y) {
  for (int i = 0; i < n; i++) y[i] = f64_log(x[i]);
}

/* The exact ones: one IEEE operation each (wasm has f64 sqrt, floor, ceil and nearest, which rounds half
 * to even as ONNX Round does); sign keeps a zero's sign and NaN. */
KERNEL void f64_vneg(int n, const double* x, double* y) {
  for (int i = 0; i < n; i++) y[i] = -x[i];
}

KERNEL void f64_vabs(int n, const double* x, double* y) {
  for (int i = 0; i < n; i++) y[i] = __builtin_fabs(x[i]);
}

KERNEL void f64_vsqrt(int n, const double* x, double* y) {
  for (int i = 0; i < n; i++) y[i] = __builtin_sqrt(x[i]);
}

KERNEL void f64_vfloor(int n, const double* x, double* y) {
  for (int i = 0; i < n; i++) y[i] = __builtin_floor(x[i]);
}

KERNEL void f64_vceil(int n, const double* x, double* y) {
  for (int i = 0; i < n; i++) y[i] = __builtin_ceil(x[i]);
}

KERNEL void f64_vround(int n, const double* x, double* y) {
  for (int i = 0; i < n; i++) y[i] = __builtin_roundeven(x[i]);
}

KERNEL void f64_vreciprocal(int n, const double* x, double* y) {
  for (int i = 0; i < n; i++) y[i] = 1.0 / x[i];
}

KERNEL void f64_vsign(int n, const double* x, double* y) {
  for (int i = 0; i < n; i++) y[i] = x[i] > 0 ? 1.0 : x[i] < 0 ? -1.0 : x[i];
}

/* Softmax / LogSoftmax over the middle axis of x[outer][n][inner] (x - max first); y may equal x. */
KERNEL void f64_softmax(int outer, int n, int inner, const double* x, double* y, int log) {
  for (int o = 0; o < outer; o++)
    for (int c = 0; c < inner; c++) {
      const double* xp = x + (size_t)o * n * inner + c;
      double* yp = y + (size_t)o * n * inner + c;
      double m = -__builtin_inf(), s = 0.0;
      for (int j = 0; j < n; j++) m = xp[(size_t)j * inner] > m ? xp[(size_t)j * inner] : m;
      for (int j = 0; j < n; j++) {
        const double e = f64_exp(xp[(size_t)j * inner] - m);
        if (!log) yp[(size_t)j * inner] = e;
        s += e;
      }
      const double ls = log ? f64_log(s) : 0.0, r = 1.0 / s;  /* (x - max) - log(s): exact near the max */
      for (int j = 0; j < n; j++)
        yp[(size_t)j * inner] = log ? (xp[(size_t)j * inner] - m) - ls : yp[(size_t)j * inner] * r;
    }
}

/* y[t] = a[t] @ b[t] for each of ``batch`` items: a[t] is [m][k] at a + aoff[t]; b[t] is [k][n] at
 * b + boff[t] with element (p, j) at p * sk + j * sn (sn == 1: rows; sk == 1: a transposed B). */
KERNEL void f64_bmm(int batch, int m, int n, int k, const double* a, const int32_t* aoff, const double* b,
                    const int32_t* boff, int sk, int sn, double* y) {
  for (int t = 0; t < batch; t++) {
    const double* ap = a + aoff[t];
    const double* bp = b + boff[t];
    double* yp = y + (size_t)t * m * n;
    for (int i = 0; i < m; i += 2) {
      const int rows = m - i < 2 ? m - i : 2;
      const double* a0 = ap + (size_t)i * k;
      const double* a1 = a0 + (rows == 2 ? k : 0);
      int j = 0;
      if (sn == 1)
        for (; j + 4 <= n; j += 4) {  /* 2 rows x 4 columns in four f64x2 accumulators */
          v128_t c00 = wasm_f64x2_splat(0.0), c01 = c00, c10 = c00, c11 = c00;
          for (int p = 0; p < k; p++) {
            const double* bk = bp + (size_t)p * sk + j;
            const v128_t b0 = wasm_v128_load(bk), b1 = wasm_v128_load(bk + 2);
            const v128_t x0 = wasm_f64x2_splat(a0[p]), x1 = wasm_f64x2_splat(a1[p]);
            c00 = wasm_f64x2_add(c00, wasm_f64x2_mul(x0, b0));
            c01 = wasm_f64x2_add(c01, wasm_f64x2_mul(x0, b1));
            c10 = wasm_f64x2_add(c10, wasm_f64x2_mul(x1, b0));
            c11 = wasm_f64x2_add(c11, wasm_f64x2_mul(x1, b1));
          }
          double* y0 = yp + (size_t)i * n + j;
          wasm_v128_store(y0, c00);
          wasm_v128_store(y0 + 2, c01);
          if (rows == 2) {
            wasm_v128_store(y0 + n, c10);
            wasm_v128_store(y0 + n + 2, c11);
          }
        }
      for (; j < n; j++)  /* the columns left, or any B strides */
        for (int r = 0; r < rows; r++) {
          const double* ar = r ? a1 : a0;
          double acc = 0.0;
          for (int p = 0; p < k; p++) acc += ar[p] * bp[(size_t)p * sk + (size_t)j * sn];
          yp[(size_t)(i + r) * n + j] = acc;
        }
    }
  }
}
