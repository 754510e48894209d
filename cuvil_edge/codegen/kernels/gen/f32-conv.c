/* generated from templates/f32-conv.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* f32 convolution (NCHW) as GEMM over output pixels: y[g][m][p] = w[g][m][k] . col[g][k][p].
 *
 * col is never materialised whole: output pixels are processed in chunks of `pchunk` and each chunk
 * is written straight into the GEMM's packed-panel layout ([chunk/8][K][8], see f32-gemm), so the
 * scratch area stays near 512 KiB whatever the layer size. 1D convolutions run with H = 1.
 */

/* Pack output pixels [p0, p0+pc) of one group's im2col matrix into panels (zero padded). */
KERNEL void f32_im2col_packed(const float* x, int C, int H, int W, int kh, int kw, int sh, int sw,
                              int dh, int dw, int pt, int pl, int OW, int p0, int pc, float* bp) {
  const int K = C * kh * kw;
  for (int j = 0; j < pc; j += 8) {
    const int nr = pc - j < 8 ? pc - j : 8;
    const int p = p0 + j;
    const int oy = p / OW, ox = p % OW;
    /* fast path: 8 pixels on one output row, stride 1, every tap in bounds -> vector copies */
    const int row_ok = nr == 8 && ox + 7 < OW && sw == 1;
    for (int k = 0; k < K; k++) {
      const int c = k / (kh * kw), r = k % (kh * kw), ky = r / kw, kx = r % kw;
      const float* xc = x + (size_t)c * H * W;
      float* dst = bp + (size_t)(j / 8) * K * 8 + (size_t)k * 8;
      const int iy0 = oy * sh - pt + ky * dh;
      const int ix0 = ox * sw - pl + kx * dw;
      if (row_ok && iy0 >= 0 && iy0 < H && ix0 >= 0 && ix0 + 7 < W) {
        const float* src = xc + (size_t)iy0 * W + ix0;
        VSTORE(dst, VLOAD(src)); VSTORE(dst + 4, VLOAD(src + 4));
        continue;
      }
      for (int l = 0; l < 8; l++) {
        float v = 0.0f;
        if (l < nr) {
          const int q = p + l, qy = q / OW, qx = q % OW;
          const int iy = qy * sh - pt + ky * dh, ix = qx * sw - pl + kx * dw;
          if (iy >= 0 && iy < H && ix >= 0 && ix < W) v = xc[(size_t)iy * W + ix];
        }
        dst[l] = v;
      }
    }
  }
}

/* Full convolution: N images, G groups, M output channels (M/G per group), weights [M][C/G*kh*kw]. */
KERNEL void f32_conv2d(const float* x, int N, int C, int H, int W, const float* w, const float* bias,
                       float* y, int M, int OH, int OW, int G, int kh, int kw, int sh, int sw, int dh,
                       int dw, int pt, int pl, int pchunk, float* scratch, Act act) {
  const int Cg = C / G, Mg = M / G, K = Cg * kh * kw, P = OH * OW;
  for (int n = 0; n < N; n++) {
    for (int g = 0; g < G; g++) {
      const float* xg = x + ((size_t)n * C + (size_t)g * Cg) * H * W;
      const float* wg = w + (size_t)g * Mg * K;
      float* yg = y + ((size_t)n * M + (size_t)g * Mg) * P;
      for (int p0 = 0; p0 < P; p0 += pchunk) {
        const int pc = P - p0 < pchunk ? P - p0 : pchunk;
        f32_im2col_packed(xg, Cg, H, W, kh, kw, sh, sw, dh, dw, pt, pl, OW, p0, pc, scratch);
        f32_gemm(Mg, pc, K, wg, K, scratch, yg + p0, P, bias ? bias + g * Mg : 0, 0, act);
      }
    }
  }
}
