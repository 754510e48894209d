/* generated from templates/f32-conv.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* f32 convolution (NCHW) as GEMM over output pixels: y[g][m][p] = w[g][m][k] . col[g][k][p].
 *
 * col is never materialised whole: output pixels are processed in chunks of `pchunk` and each chunk
 * is written straight into the GEMM's packed-panel layout ([chunk/8][K][8], see f32-gemm), so the
 * scratch area stays near 512 KiB whatever the layer size. 1D convolutions run with H = 1.
 */

/* Pack output pixels [p0, p0+pc) of one group's im2col matrix into panels (zero padded).
 * Panels whose 8 pixels lie on one output row (the common case) copy each tap as two vectors: stride 1
 * loads a contiguous run, stride 2 de-interleaves 16 floats; taps touching the padding are masked
 * (the loads may read a few floats outside the row, never outside linear memory: regions have guards).
 * Other panels (row wraps, the tail, wider strides) go lane by lane with precomputed bases. */
KERNEL void f32_im2col_packed(const float* x, int C, int H, int W, int kh, int kw, int sh, int sw,
                              int dh, int dw, int pt, int pl, int OW, int p0, int pc, float* bp) {
  const int K = C * kh * kw;
  const v128_t zero = wasm_f32x4_const_splat(0.0f);
  for (int j = 0; j < pc; j += 8) {
    const int nr = pc - j < 8 ? pc - j : 8;
    const int p = p0 + j;
    const int oy = p / OW, ox = p % OW;
    float* dst = bp + (size_t)(j / 8) * K * 8;
    if (nr == 8 && ox + 7 < OW && (sw == 1 || sw == 2)) {
      const int iyb = oy * sh - pt;
      for (int c = 0; c < C; c++) {
        const float* xc = x + (size_t)c * H * W;
        for (int ky = 0; ky < kh; ky++) {
          const int iy = iyb + ky * dh;
          if (iy < 0 || iy >= H) {
            for (int kx = 0; kx < kw; kx++, dst += 8) { VSTORE(dst, zero); VSTORE(dst + 4, zero); }
            continue;
          }
          const float* row = xc + (size_t)iy * W;
          for (int kx = 0; kx < kw; kx++, dst += 8) {
            const int ix0 = ox * sw - pl + kx * dw;
            const float* src = row + ix0;
            v128_t a, b;
            if (sw == 1) {
              a = VLOAD(src); b = VLOAD(src + 4);
            } else {
              a = wasm_i32x4_shuffle(VLOAD(src), VLOAD(src + 4), 0, 2, 4, 6);
              b = wasm_i32x4_shuffle(VLOAD(src + 8), VLOAD(src + 12), 0, 2, 4, 6);
            }
            if (ix0 < 0 || ix0 + 7 * sw >= W) {
              a = mask_columns(a, ix0, sw, W);
              b = mask_columns(b, ix0 + 4 * sw, sw, W);
            }
            VSTORE(dst, a); VSTORE(dst + 4, b);
          }
        }
      }
      continue;
    }
    int iyb[8], ixb[8];
    for (int l = 0; l < 8; l++) {
      const int q = p + l;
      iyb[l] = l < nr ? (q / OW) * sh - pt : -(1 << 28);  /* lanes past the end read nothing */
      ixb[l] = l < nr ? (q % OW) * sw - pl : 0;
    }
    for (int c = 0; c < C; c++) {
      const float* xc = x + (size_t)c * H * W;
      for (int ky = 0; ky < kh; ky++) {
        for (int kx = 0; kx < kw; kx++, dst += 8) {
          for (int l = 0; l < 8; l++) {
            const int iy = iyb[l] + ky * dh, ix = ixb[l] + kx * dw;
            dst[l] = ((unsigned)iy < (unsigned)H && (unsigned)ix < (unsigned)W) ? xc[(size_t)iy * W + ix] : 0.0f;
          }
        }
      }
    }
  }
}

/* 1x1, stride 1, unpadded: each group's input rows (channels x pixels) are the GEMM's B as they are;
 * no im2col, no packing. */
KERNEL void f32_conv1x1(const float* x, int N, int C, int P, const float* w, const float* bias, float* y,
                        int M, int G, Act act) {
  const int Cg = C / G, Mg = M / G;
  for (int n = 0; n < N; n++)
    for (int g = 0; g < G; g++)
      f32_gemm_pa(Mg, P, Cg, w + (size_t)g * ((Mg + 3) & ~3) * Cg, x + ((size_t)n * C + (size_t)g * Cg) * P,
                  8, P, y + ((size_t)n * M + (size_t)g * Mg) * P, P, bias ? bias + g * Mg : 0, 0, act);
}

/* Full convolution: N images, G groups, M output channels (M/G per group); weights per group packed
 * in 4-row panels ([ceil(Mg/4)][K][4], see f32_gemm_pa) at build time. */
KERNEL void f32_conv2d(const float* x, int N, int C, int H, int W, const float* w, const float* bias,
                       float* y, int M, int OH, int OW, int G, int kh, int kw, int sh, int sw, int dh,
                       int dw, int pt, int pl, int pchunk, float* scratch, Act act) {
  const int Cg = C / G, Mg = M / G, K = Cg * kh * kw, P = OH * OW;
  for (int n = 0; n < N; n++) {
    for (int g = 0; g < G; g++) {
      const float* xg = x + ((size_t)n * C + (size_t)g * Cg) * H * W;
      const float* wg = w + (size_t)g * ((Mg + 3) & ~3) * K;
      float* yg = y + ((size_t)n * M + (size_t)g * Mg) * P;
      for (int p0 = 0; p0 < P; p0 += pchunk) {
        const int pc = P - p0 < pchunk ? P - p0 : pchunk;
        f32_im2col_packed(xg, Cg, H, W, kh, kw, sh, sw, dh, dw, pt, pl, OW, p0, pc, scratch);
        f32_gemm_pa(Mg, pc, K, wg, scratch, K * 8, 8, yg + p0, P, bias ? bias + g * Mg : 0, 0, act);
      }
    }
  }
}

/* 3D convolution (NCDHW): the same GEMM over output voxels. The im2col panels are packed lane by lane
 * with precomputed bases (no row fast path: 3D layers are rare and small on the edge). */
KERNEL void f32_im2col3d_packed(const float* x, int C, int D, int H, int W, int kd, int kh, int kw,
                                int sd, int sh, int sw, int dd, int dh, int dw, int pd, int pt, int pl,
                                int OH, int OW, int p0, int pc, float* bp) {
  const int K = C * kd * kh * kw, OP = OH * OW;
  for (int j = 0; j < pc; j += 8) {
    const int nr = pc - j < 8 ? pc - j : 8;
    float* dst = bp + (size_t)(j / 8) * K * 8;
    int izb[8], iyb[8], ixb[8];
    for (int l = 0; l < 8; l++) {
      const int q = p0 + j + l, r = q % OP;
      izb[l] = l < nr ? (q / OP) * sd - pd : -(1 << 28);  /* lanes past the end read nothing */
      iyb[l] = (r / OW) * sh - pt;
      ixb[l] = (r % OW) * sw - pl;
    }
    for (int c = 0; c < C; c++) {
      const float* xc = x + (size_t)c * D * H * W;
      for (int kz = 0; kz < kd; kz++)
        for (int ky = 0; ky < kh; ky++)
          for (int kx = 0; kx < kw; kx++, dst += 8)
            for (int l = 0; l < 8; l++) {
              const int iz = izb[l] + kz * dd, iy = iyb[l] + ky * dh, ix = ixb[l] + kx * dw;
              dst[l] = ((unsigned)iz < (unsigned)D && (unsigned)iy < (unsigned)H && (unsigned)ix < (unsigned)W)
                           ? xc[((size_t)iz * H + iy) * W + ix] : 0.0f;
            }
    }
  }
}

KERNEL void f32_conv3d(const float* x, int N, int C, int D, int H, int W, const float* w, const float* bias,
                       float* y, int M, int OD, int OH, int OW, int G, int kd, int kh, int kw, int sd,
                       int sh, int sw, int dd, int dh, int dw, int pd, int pt, int pl, int pchunk,
                       float* scratch, Act act) {
  const int Cg = C / G, Mg = M / G, K = Cg * kd * kh * kw, P = OD * OH * OW;
  for (int n = 0; n < N; n++) {
    for (int g = 0; g < G; g++) {
      const float* xg = x + ((size_t)n * C + (size_t)g * Cg) * D * H * W;
      const float* wg = w + (size_t)g * ((Mg + 3) & ~3) * K;
      float* yg = y + ((size_t)n * M + (size_t)g * Mg) * P;
      for (int p0 = 0; p0 < P; p0 += pchunk) {
        const int pc = P - p0 < pchunk ? P - p0 : pchunk;
        f32_im2col3d_packed(xg, Cg, D, H, W, kd, kh, kw, sd, sh, sw, dd, dh, dw, pd, pt, pl, OH, OW, p0, pc,
                            scratch);
        f32_gemm_pa(Mg, pc, K, wg, scratch, K * 8, 8, yg + p0, P, bias ? bias + g * Mg : 0, 0, act);
      }
    }
  }
}
