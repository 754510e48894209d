/* generated from templates/f32-deconv.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* f32 transposed convolution (NCHW) as GEMM + col2im: col[g][(m,ky,kx)][p] = wT[g] . x[g][:, p],
 * then y[m][iy*sh - pt + ky*dh][ix*sw - pl + kx*dw] += col[(m,ky,kx)][iy*W + ix].
 *
 * Input pixels are processed in chunks of `pchunk` (panels for f32_gemm, then the column block) so
 * the scratch area stays near 512 KiB. y starts as the bias; the activation runs once at the end,
 * after every scatter-add has landed. Pads may be negative (an output_shape larger than the natural
 * one): positions no tap reaches keep the bias. 1D runs with H = 1.
 */

/* Scatter-add one chunk of columns (input pixels [p0, p0+pc)) into the group's output planes. */
KERNEL void f32_col2im_add(const float* col, int pc, int p0, int W, int Mg, int kh, int kw, int sh,
                           int sw, int dh, int dw, int pt, int pl, int OH, int OW, float* y) {
  for (int m = 0; m < Mg; m++) {
    float* ym = y + (size_t)m * OH * OW;
    for (int ky = 0; ky < kh; ky++) {
      for (int kx = 0; kx < kw; kx++) {
        const float* cr = col + ((size_t)(m * kh + ky) * kw + kx) * pc;
        const int off = kx * dw - pl;  /* ox = ix * sw + off */
        const int lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
        const int hi = OW - 1 - off >= 0 ? (OW - 1 - off) / sw + 1 : 0;
        for (int p = p0; p < p0 + pc;) {
          const int iy = p / W, row_end = (iy + 1) * W < p0 + pc ? (iy + 1) * W : p0 + pc;
          const int oy = iy * sh - pt + ky * dh;
          if ((unsigned)oy < (unsigned)OH) {
            const float* src = cr + ((size_t)iy * W - p0);  /* src[ix] */
            float* dst = ym + (size_t)oy * OW + off;         /* dst[ix * sw] */
            int ix = p - iy * W > lo ? p - iy * W : lo;
            const int ix1 = row_end - iy * W < hi ? row_end - iy * W : hi;
            if (sw == 1) {
              for (; ix + 4 <= ix1; ix += 4) VSTORE(dst + ix, wasm_f32x4_add(VLOAD(dst + ix), VLOAD(src + ix)));
            } else if (sw == 2) {
              /* interleave 4 columns with zeros: two full-vector adds cover 8 outputs (odd ones + 0) */
              const v128_t z = wasm_f32x4_const_splat(0.0f);
              for (; ix + 4 <= ix1 && 2 * ix + 7 + off < OW; ix += 4) {
                const v128_t s = VLOAD(src + ix);
                float* d = dst + 2 * ix;
                VSTORE(d, wasm_f32x4_add(VLOAD(d), wasm_i32x4_shuffle(s, z, 0, 4, 1, 5)));
                VSTORE(d + 4, wasm_f32x4_add(VLOAD(d + 4), wasm_i32x4_shuffle(s, z, 2, 6, 3, 7)));
              }
            }
            for (; ix < ix1; ix++) dst[ix * sw] += src[ix];
          }
          p = row_end;
        }
      }
    }
  }
}

/* Full transposed convolution: N images, G groups, C inputs, M outputs; wT: [G][Mg*kh*kw][C/G]. */
KERNEL void f32_deconv2d(const float* x, int N, int C, int H, int W, const float* wT, const float* bias,
                         float* y, int M, int OH, int OW, int G, int kh, int kw, int sh, int sw, int dh,
                         int dw, int pt, int pl, int pchunk, float* scratch, Act act) {
  const int Cg = C / G, Mg = M / G, R = Mg * kh * kw, P = H * W, Q = OH * OW;
  float* bp = scratch;                        /* [pchunk/8][Cg][8] packed input pixels */
  float* col = scratch + (size_t)Cg * pchunk; /* [R][pchunk] */
  for (int n = 0; n < N; n++) {
    for (int g = 0; g < G; g++) {
      const float* xg = x + ((size_t)n * C + (size_t)g * Cg) * P;
      const float* wg = wT + (size_t)g * R * Cg;
      float* yg = y + ((size_t)n * M + (size_t)g * Mg) * Q;
      for (int m = 0; m < Mg; m++) fill_f32(yg + (size_t)m * Q, bias ? bias[g * Mg + m] : 0.0f, Q);
      for (int p0 = 0; p0 < P; p0 += pchunk) {
        const int pc = P - p0 < pchunk ? P - p0 : pchunk;
        f32_pack_b(Cg, pc, xg + p0, P, bp);
        f32_gemm(R, pc, Cg, wg, Cg, bp, col, pc, 0, 0, (Act){ACT_NONE, 0.0f, 0.0f});
        f32_col2im_add(col, pc, p0, W, Mg, kh, kw, sh, sw, dh, dw, pt, pl, OH, OW, yg);
      }
      if (act.kind != ACT_NONE) f32_act(yg, Mg * Q, act);
    }
  }
}
