/* generated from templates/f32-random.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* Counter-based random numbers: RandomUniform, RandomNormal (and their Like forms), Bernoulli's draws and
 * Multinomial.
 *
 * Philox4x32-10 (Salmon et al., SC'11: the generator of JAX, PyTorch's CUDA side and cuRAND) maps a
 * 128-bit counter and a 64-bit key to four 32-bit words with integer multiplies and xors only, so every
 * host draws the same bits. A node's block b is the counter (b, draw, run low, run high) under its key
 * (k0, k1): ``run`` is the module's run counter (a persistent state: the stream moves on each inference),
 * ``draw`` tells apart copies of one source node (an unrolled loop's iterations).
 *
 * Words to numbers: uniform float32 (float16, bfloat16) element i is word i, its top 24 (11, 8) bits
 * times 2^-bits, in [0, 1); a float64 one takes 53 bits of the word pair (2i, 2i + 1). Then low + u *
 * (high - low), computed in double and rounded once. Normal pairs (2j, 2j + 1) take block j: u1, u2 of 53
 * bits each, z = sqrt(-2 log(1 - u1)) (cos, sin)(2 pi u2) (Box-Muller), mean + scale * z in double.
 * Multinomial sample i of a row takes 53 bits of words (2i, 2i + 1) and inverts the row's CDF of
 * exp(x - max). Every double here is computed without contraction into fused multiply-adds, with
 * f64-math's log and exp and the sin/cos below: the values, not only the bits drawn, are the same on
 * every host and tier.
 */

typedef struct { uint32_t k0, k1, draw, run_lo, run_hi; } rnd_stream;

INLINE rnd_stream rnd_stream_of(uint32_t k0, uint32_t k1, uint32_t draw, const int64_t* run) {
  const uint64_t r = (uint64_t)run[0];
  rnd_stream s = {k0, k1, draw, (uint32_t)r, (uint32_t)(r >> 32)};
  return s;
}

/* the four words of block b: Philox4x32 with 10 rounds, the key bumped by the Weyl constants between */
INLINE void rnd_block(const rnd_stream* s, uint32_t b, uint32_t w[4]) {
  uint32_t c0 = b, c1 = s->draw, c2 = s->run_lo, c3 = s->run_hi, k0 = s->k0, k1 = s->k1;
  for (int r = 0; r < 10; r++) {
    if (r) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = (uint32_t)p1;
    c2 = n2;
    c3 = (uint32_t)p0;
  }
  w[0] = c0;
  w[1] = c1;
  w[2] = c2;
  w[3] = c3;
}

INLINE double rnd_u53(uint32_t hi, uint32_t lo) {  /* [0, 1): the top 53 bits of hi:lo */
  return (double)(((uint64_t)hi << 21) | (lo >> 11)) * 0x1p-53;
}

/* sin and cos of 2 pi t for t in [0, 1): the quadrant from t exactly, then Taylor on [0, pi/4] */
INLINE void rnd_sincos2pi(double t, double* s, double* c) {
#pragma clang fp contract(off)
  const double t4 = t * 4.0;
  const int q = (int)t4;
  double f = t4 - q;
  const int flip = f > 0.5;
  if (flip) f = 1.0 - f;
  const double x = f * 1.5707963267948966, x2 = x * x;
  double ps = 1.0, pc = 1.0;
  for (int k = 18; k >= 2; k -= 2) {  /* to x^19 / 19!, x^18 / 18!: below 1e-19 on [0, pi/4] */
    ps = 1.0 - ps * x2 / ((double)k * (k + 1));
    pc = 1.0 - pc * x2 / ((double)(k - 1) * k);
  }
  double sn = x * ps, cs = pc;
  if (flip) {
    const double tmp = sn;
    sn = cs;
    cs = tmp;
  }
  switch (q) {
    case 0: *s = sn; *c = cs; break;
    case 1: *s = cs; *c = -sn; break;
    case 2: *s = -sn; *c = -cs; break;
    default: *s = -cs; *c = sn; break;
  }
}

KERNEL void f32_random_uniform(float* y, int n, int bits, double low, double range, uint32_t k0, uint32_t k1,
                               uint32_t draw, const int64_t* run) {
#pragma clang fp contract(off)
  const rnd_stream s = rnd_stream_of(k0, k1, draw, run);
  const double unit = 1.0 / (double)(1u << bits);
  for (int i = 0; i < n; i += 4) {
    uint32_t w[4];
    rnd_block(&s, (uint32_t)(i / 4), w);
    for (int j = 0; j < 4 && i + j < n; j++)
      y[i + j] = (float)(low + range * ((double)(w[j] >> (32 - bits)) * unit));
  }
}

KERNEL void f64_random_uniform(double* y, int n, double low, double range, uint32_t k0, uint32_t k1,
                               uint32_t draw, const int64_t* run) {
#pragma clang fp contract(off)
  const rnd_stream s = rnd_stream_of(k0, k1, draw, run);
  for (int i = 0; i < n; i += 2) {
    uint32_t w[4];
    rnd_block(&s, (uint32_t)(i / 2), w);
    y[i] = low + range * rnd_u53(w[0], w[1]);
    if (i + 1 < n) y[i + 1] = low + range * rnd_u53(w[2], w[3]);
  }
}

/* the normal pair of block b: mean + scale * z0, mean + scale * z1 */
INLINE void rnd_normal_pair(const rnd_stream* s, uint32_t b, double mean, double scale, double z[2]) {
#pragma clang fp contract(off)
  uint32_t w[4];
  rnd_block(s, b, w);
  const double r = __builtin_sqrt(-2.0 * f64_log(1.0 - rnd_u53(w[0], w[1])));
  double sn, cs;
  rnd_sincos2pi(rnd_u53(w[2], w[3]), &sn, &cs);
  z[0] = mean + scale * (r * cs);
  z[1] = mean + scale * (r * sn);
}

KERNEL void f32_random_normal(float* y, int n, double mean, double scale, uint32_t k0, uint32_t k1, uint32_t draw,
                               const int64_t* run) {
  const rnd_stream s = rnd_stream_of(k0, k1, draw, run);
  for (int i = 0; i < n; i += 2) {
    double z[2];
    rnd_normal_pair(&s, (uint32_t)(i / 2), mean, scale, z);
    y[i] = (float)z[0];
    if (i + 1 < n) y[i + 1] = (float)z[1];
  }
}

/* Multinomial: per row, cdf[k] = sum of exp(x[j] - max) for j <= k; sample i draws u and takes the first
 * class with u * total < cdf[k], among the classes up to the last of positive probability (u * total may
 * round up to total). y: int32 (wide 0) or int64 (wide 1). cdf: ``classes`` doubles of scratch. */
KERNEL void f32_multinomial(const float* x, int rows, int classes, int samples, void* y, int wide, double* cdf,
                             uint32_t k0, uint32_t k1, uint32_t draw, const int64_t* run) {
#pragma clang fp contract(off)
  const rnd_stream s = rnd_stream_of(k0, k1, draw, run);
  for (int r = 0; r < rows; r++) {
    const float* xr = x + (size_t)r * classes;
    double m = xr[0], total = 0.0;
    for (int k = 1; k < classes; k++) m = xr[k] > m ? xr[k] : m;
    for (int k = 0; k < classes; k++) cdf[k] = total += f64_exp(xr[k] - m);
    int last = 0, hi = classes - 1;  /* last: the first class whose cdf is the total */
    while (last < hi) {
      const int mid = (last + hi) / 2;
      if (cdf[mid] >= total) hi = mid; else last = mid + 1;
    }
    for (int j = 0; j < samples; j++) {
      const uint32_t i = (uint32_t)r * (uint32_t)samples + (uint32_t)j;
      uint32_t w[4];
      rnd_block(&s, i / 2, w);
      const double target = rnd_u53(w[2 * (i % 2)], w[2 * (i % 2) + 1]) * total;
      int lo = 0;
      hi = last;
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (target < cdf[mid]) hi = mid; else lo = mid + 1;
      }
      if (wide) ((int64_t*)y)[(size_t)r * samples + j] = lo;
      else ((int32_t*)y)[(size_t)r * samples + j] = lo;
    }
  }
}

KERNEL void f64_random_normal(double* y, int n, double mean, double scale, uint32_t k0, uint32_t k1, uint32_t draw,
                               const int64_t* run) {
  const rnd_stream s = rnd_stream_of(k0, k1, draw, run);
  for (int i = 0; i < n; i += 2) {
    double z[2];
    rnd_normal_pair(&s, (uint32_t)(i / 2), mean, scale, z);
    y[i] = (double)z[0];
    if (i + 1 < n) y[i + 1] = (double)z[1];
  }
}

/* Multinomial: per row, cdf[k] = sum of exp(x[j] - max) for j <= k; sample i draws u and takes the first
 * class with u * total < cdf[k], among the classes up to the last of positive probability (u * total may
 * round up to total). y: int32 (wide 0) or int64 (wide 1). cdf: ``classes`` doubles of scratch. */
KERNEL void f64_multinomial(const double* x, int rows, int classes, int samples, void* y, int wide, double* cdf,
                             uint32_t k0, uint32_t k1, uint32_t draw, const int64_t* run) {
#pragma clang fp contract(off)
  const rnd_stream s = rnd_stream_of(k0, k1, draw, run);
  for (int r = 0; r < rows; r++) {
    const double* xr = x + (size_t)r * classes;
    double m = xr[0], total = 0.0;
    for (int k = 1; k < classes; k++) m = xr[k] > m ? xr[k] : m;
    for (int k = 0; k < classes; k++) cdf[k] = total += f64_exp(xr[k] - m);
    int last = 0, hi = classes - 1;  /* last: the first class whose cdf is the total */
    while (last < hi) {
      const int mid = (last + hi) / 2;
      if (cdf[mid] >= total) hi = mid; else last = mid + 1;
    }
    for (int j = 0; j < samples; j++) {
      const uint32_t i = (uint32_t)r * (uint32_t)samples + (uint32_t)j;
      uint32_t w[4];
      rnd_block(&s, i / 2, w);
      const double target = rnd_u53(w[2 * (i % 2)], w[2 * (i % 2) + 1]) * total;
      int lo = 0;
      hi = last;
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (target < cdf[mid]) hi = mid; else lo = mid + 1;
      }
      if (wide) ((int64_t*)y)[(size_t)r * samples + j] = lo;
      else ((int32_t*)y)[(size_t)r * samples + j] = lo;
    }
  }
}

