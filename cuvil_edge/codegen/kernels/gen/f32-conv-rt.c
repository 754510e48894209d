/* generated from templates/f32-conv-rt.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* f32 convolutions whose weights are run-time tensors (NCDHW; 2D runs with D = kd = 1, 1D also with
 * H = kh = 1): nothing can be packed at build time, so these read the weights where they lie.
 *
 * Each output volume y[n][m] starts as its bias; every (input channel, tap) pair then adds one scalar
 * weight times a run of input row to a run of output row, the run's bounds worked out once per tap so
 * the inner loop has no padding tests (4 lanes at a time where both rows are contiguous). The activation
 * runs over the volume at the end. Threads split the N*M output volumes: each owns its own, so the
 * result is the same whatever the thread count.
 */

/* [lo, hi): the i in [0, n) with 0 <= i*s + off < lim (the positions one tap reaches). */
INLINE void rt_tap_range(int off, int s, int n, int lim, int* lo, int* hi) {
  *lo = off >= 0 ? 0 : (-off + s - 1) / s;
  const int last = lim - 1 - off;
  *hi = last < 0 ? 0 : (last / s + 1 < n ? last / s + 1 : n);
}

/* dst[i * ds] += wv * src[i * ss] for i in [0, n). */
INLINE void rt_axpy(float* dst, int ds, const float* src, int ss, int n, float wv) {
  int i = 0;
  if (ds == 1 && ss == 1) {
    const v128_t vw = VSPLAT(wv);
    for (; i + 4 <= n; i += 4) VSTORE(dst + i, VFMA(VLOAD(src + i), vw, VLOAD(dst + i)));
  }
  for (; i < n; i++) dst[(size_t)i * ds] += wv * src[(size_t)i * ss];
}

/* y[n][m] = act(bias[m] + sum over m's group's Cg channels and the taps of w[m][c][tap] * x at
 * o * s - p + tap * d). w: [M][Cg][kd][kh][kw]. */
KERNEL void f32_conv_rt(const float* x, int N, int C, int D, int H, int W, const float* w, const float* bias,
                        float* y, int M, int OD, int OH, int OW, int G, int kd, int kh, int kw, int sd, int sh,
                        int sw, int dd, int dh, int dw, int pd, int pt, int pl, Act act, int tid, int nt) {
  const int Cg = C / G, Mg = M / G;
  const size_t P = (size_t)D * H * W, Q = (size_t)OD * OH * OW;
  int lo, hi;
  cuvil_split(N * M, 1, tid, nt, &lo, &hi);
  for (int r = lo; r < hi; r++) {
    const int n = r / M, m = r % M;
    float* ym = y + (size_t)r * Q;
    fill_f32(ym, bias ? bias[m] : 0.0f, (int)Q);
    const float* wm = w + (size_t)m * Cg * kd * kh * kw;
    for (int c = 0; c < Cg; c++) {
      const float* xc = x + ((size_t)n * C + (size_t)(m / Mg) * Cg + c) * P;
      for (int kz = 0; kz < kd; kz++)
        for (int ky = 0; ky < kh; ky++)
          for (int kx = 0; kx < kw; kx++) {
            const float wv = *wm++;
            const int off = kx * dw - pl;
            int ox0, ox1;
            rt_tap_range(off, sw, OW, W, &ox0, &ox1);
            if (ox0 >= ox1) continue;
            for (int oz = 0; oz < OD; oz++) {
              const int iz = oz * sd - pd + kz * dd;
              if ((unsigned)iz >= (unsigned)D) continue;
              for (int oy = 0; oy < OH; oy++) {
                const int iy = oy * sh - pt + ky * dh;
                if ((unsigned)iy >= (unsigned)H) continue;
                rt_axpy(ym + ((size_t)oz * OH + oy) * OW + ox0, 1, xc + ((size_t)iz * H + iy) * W + ox0 * sw + off,
                        sw, ox1 - ox0, wv);
              }
            }
          }
    }
    if (act.kind != ACT_NONE) f32_act(ym, (int)Q, act);
  }
}

/* Transposed: y[n][m] = act(bias[m] + sum over m's group's Cg input channels c and the taps of
 * w[c][m % Mg][tap] * x[n][c] scattered to o = i * s - p + tap * d). w: [C][Mg][kd][kh][kw]. Pads may be
 * negative (an output_shape larger than the natural one): positions no tap reaches keep the bias. */
KERNEL void f32_deconv_rt(const float* x, int N, int C, int D, int H, int W, const float* w,
                          const float* bias, float* y, int M, int OD, int OH, int OW, int G, int kd, int kh, int kw,
                          int sd, int sh, int sw, int dd, int dh, int dw, int pd, int pt, int pl, Act act, int tid,
                          int nt) {
  const int Cg = C / G, Mg = M / G, K = kd * kh * kw;
  const size_t P = (size_t)D * H * W, Q = (size_t)OD * OH * OW;
  int lo, hi;
  cuvil_split(N * M, 1, tid, nt, &lo, &hi);
  for (int r = lo; r < hi; r++) {
    const int n = r / M, m = r % M, g = m / Mg;
    float* ym = y + (size_t)r * Q;
    fill_f32(ym, bias ? bias[m] : 0.0f, (int)Q);
    for (int c = 0; c < Cg; c++) {
      const float* xc = x + ((size_t)n * C + (size_t)g * Cg + c) * P;
      const float* wc = w + ((size_t)(g * Cg + c) * Mg + m % Mg) * K;
      for (int kz = 0; kz < kd; kz++)
        for (int ky = 0; ky < kh; ky++)
          for (int kx = 0; kx < kw; kx++) {
            const float wv = *wc++;
            const int off = kx * dw - pl;
            int ix0, ix1;
            rt_tap_range(off, sw, W, OW, &ix0, &ix1);
            if (ix0 >= ix1) continue;
            for (int iz = 0; iz < D; iz++) {
              const int oz = iz * sd - pd + kz * dd;
              if ((unsigned)oz >= (unsigned)OD) continue;
              for (int iy = 0; iy < H; iy++) {
                const int oy = iy * sh - pt + ky * dh;
                if ((unsigned)oy >= (unsigned)OH) continue;
                rt_axpy(ym + ((size_t)oz * OH + oy) * OW + ix0 * sw + off, sw, xc + ((size_t)iz * H + iy) * W + ix0,
                        1, ix1 - ix0, wv);
              }
            }
          }
    }
    if (act.kind != ACT_NONE) f32_act(ym, (int)Q, act);
  }
}
