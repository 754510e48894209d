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

/* Direct convolution, width stride 1: the B operand of the packed-A GEMM is read straight from the
 * input, 8 consecutive output pixels of one row per panel, tap k at offset koff[k] from the panel's
 * first input pixel. Padding is materialised once per group as a zero-bordered copy of the input
 * (C x H x W floats, against C*kh*kw per output pixel for im2col), so every panel, borders included,
 * runs the same loop; an unpadded input is read in place. The loop mirrors f32_gemm_loop_4x8 (own
 * noinline function, accumulators handed over through memory) with one offset load per k step.
 * A last panel narrower than 8 reads a few floats past its row (lanes never stored). */
static __attribute__((noinline)) void f32_conv_loop_4x8(int K, const float* ap, const float* xb, const int* koff,
                                                        v128_t* acc) {
  v128_t c00 = wasm_f32x4_const_splat(0.0f), c01 = c00;
  v128_t c10 = wasm_f32x4_const_splat(0.0f), c11 = c10;
  v128_t c20 = wasm_f32x4_const_splat(0.0f), c21 = c20;
  v128_t c30 = wasm_f32x4_const_splat(0.0f), c31 = c30;
  const float* aend = ap + (size_t)4 * K;
  while (ap < aend) {
    const float* b = xb + *koff++;
    const v128_t b0 = VLOAD(b), b1 = VLOAD(b + 4);
    const v128_t a = VLOAD(ap);
    ap += 4;
    {
      const v128_t s = wasm_i32x4_shuffle(a, a, 0, 0, 0, 0);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(a, a, 1, 1, 1, 1);
      c10 = VFMA(s, b0, c10);
      c11 = VFMA(s, b1, c11);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(a, a, 2, 2, 2, 2);
      c20 = VFMA(s, b0, c20);
      c21 = VFMA(s, b1, c21);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(a, a, 3, 3, 3, 3);
      c30 = VFMA(s, b0, c30);
      c31 = VFMA(s, b1, c31);
    }
  }
  acc[0] = c00; acc[1] = c01;
  acc[2] = c10; acc[3] = c11;
  acc[4] = c20; acc[5] = c21;
  acc[6] = c30; acc[7] = c31;
}

/* Copy one group's C planes [H][W] into zero-bordered planes [Hp][Wp] (pt rows above, pl columns left)
 * followed by 8 zero floats that the last narrow panel may read. */
KERNEL void f32_pad_planes(const float* x, int C, int H, int W, int pt, int pl, int Hp, int Wp, float* xp) {
  for (int c = 0; c < C; c++) {
    const float* xc = x + (size_t)c * H * W;
    float* pc = xp + (size_t)c * Hp * Wp;
    fill_f32(pc, 0.0f, pt * Wp);
    for (int iy = 0; iy < H; iy++) {
      float* row = pc + (size_t)(pt + iy) * Wp;
      fill_f32(row, 0.0f, pl);
      copy_f32(row + pl, xc + (size_t)iy * W, W);
      fill_f32(row + pl + W, 0.0f, Wp - pl - W);
    }
    fill_f32(pc + (size_t)(pt + H) * Wp, 0.0f, (Hp - pt - H) * Wp);
  }
  fill_f32(xp + (size_t)C * Hp * Wp, 0.0f, 8);
}

/* Full direct convolution (width stride 1): N images, G groups; weights packed as for f32_conv2d.
 * Hp x Wp: the padded plane (H x W when unpadded: read in place). scratch: K tap offsets, then the
 * padded copy of one group's input. */
KERNEL void f32_conv2d_direct(const float* x, int N, int C, int H, int W, const float* w, const float* bias,
                              float* y, int M, int OH, int OW, int G, int kh, int kw, int sh, int dh, int dw,
                              int pt, int pl, int Hp, int Wp, float* scratch, Act act) {
  const int Cg = C / G, Mg = M / G, K = Cg * kh * kw, P = OH * OW;
  const v128_t zero = wasm_f32x4_const_splat(0.0f);
  int* koff = (int*)scratch;
  float* xp = scratch + ((K + 3) & ~3);
  for (int c = 0, k = 0; c < Cg; c++)
    for (int ky = 0; ky < kh; ky++)
      for (int kx = 0; kx < kw; kx++, k++) koff[k] = (c * Hp + ky * dh) * Wp + kx * dw;
  for (int n = 0; n < N; n++) {
    for (int g = 0; g < G; g++) {
      const float* xg = x + ((size_t)n * C + (size_t)g * Cg) * H * W;
      const float* wg = w + (size_t)g * ((Mg + 3) & ~3) * K;
      float* yg = y + ((size_t)n * M + (size_t)g * Mg) * P;
      const float* src = xg;
      if (Hp != H || Wp != W) {
        f32_pad_planes(xg, Cg, H, W, pt, pl, Hp, Wp, xp);
        src = xp;
      }
      for (int oy = 0; oy < OH; oy++) {
        for (int ox = 0; ox < OW; ox += 8) {
          const float* xb = src + (size_t)oy * sh * Wp + ox;
          const int nr = OW - ox < 8 ? OW - ox : 8;
          float* yb = yg + (size_t)oy * OW + ox;
          for (int i = 0; i < Mg; i += 4) {
            v128_t acc[8];
            f32_conv_loop_4x8(K, wg + (size_t)i * K, xb, koff, acc);
            f32_gemm_tile_4x8(acc, yb + (size_t)i * P, P, Mg - i < 4 ? Mg - i : 4, nr,
                              bias ? bias + g * Mg + i : 0, zero, zero, act);
          }
        }
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
