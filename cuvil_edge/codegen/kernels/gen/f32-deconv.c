/* generated from templates/f32-deconv.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* f32 transposed convolution (NCDHW) as GEMM + col2im: col[g][(m,kz,ky,kx)][p] = wT[g] . x[g][:, p],
 * then y[m][iz*sd - pd + kz*dd][iy*sh - pt + ky*dh][ix*sw - pl + kx*dw] += col[(m,kz,ky,kx)][p] for input
 * pixel p = (iz*H + iy)*W + ix.
 *
 * Input pixels are processed in chunks of `pchunk` (panels for f32_gemm, then the column block) so
 * the scratch area stays near 512 KiB. y starts as the bias; the activation runs once at the end,
 * after every scatter-add has landed. Pads may be negative (an output_shape larger than the natural
 * one): positions no tap reaches keep the bias. 2D runs with D = kd = 1, 1D also with H = kh = 1.
 */

/* Scatter-add one chunk of columns (input pixels [p0, p0+pc)) into the group's output volumes. */
KERNEL void f32_col2im_add(const float* col, int pc, int p0, int H, int W, int Mg, int kd, int kh, int kw,
                           int sd, int sh, int sw, int dd, int dh, int dw, int pd, int pt, int pl, int OD,
                           int OH, int OW, float* y) {
  for (int m = 0; m < Mg; m++) {
    float* ym = y + (size_t)m * OD * OH * OW;
    for (int kz = 0; kz < kd; kz++) {
    for (int ky = 0; ky < kh; ky++) {
      for (int kx = 0; kx < kw; kx++) {
        const float* cr = col + ((size_t)((m * kd + kz) * kh + ky) * kw + kx) * pc;
        const int off = kx * dw - pl;  /* ox = ix * sw + off */
        const int lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
        const int hi = OW - 1 - off >= 0 ? (OW - 1 - off) / sw + 1 : 0;
        for (int p = p0; p < p0 + pc;) {
          const int r = p / W, row_end = (r + 1) * W < p0 + pc ? (r + 1) * W : p0 + pc;
          const int oz = (r / H) * sd - pd + kz * dd, oy = (r % H) * sh - pt + ky * dh;
          if ((unsigned)oz < (unsigned)OD && (unsigned)oy < (unsigned)OH) {
            const float* src = cr + ((size_t)r * W - p0);            /* src[ix] */
            float* dst = ym + ((size_t)oz * OH + oy) * OW + off;     /* dst[ix * sw] */
            int ix = p - r * W > lo ? p - r * W : lo;
            const int ix1 = row_end - r * W < hi ? row_end - r * W : hi;
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
}

/* Full transposed convolution: N images, G groups, C inputs, M outputs; wT: [G][Mg*kd*kh*kw][C/G]. */
KERNEL void f32_deconv(const float* x, int N, int C, int D, int H, int W, const float* wT, const float* bias,
                       float* y, int M, int OD, int OH, int OW, int G, int kd, int kh, int kw, int sd, int sh,
                       int sw, int dd, int dh, int dw, int pd, int pt, int pl, int pchunk, float* scratch,
                       Act act) {
  const int Cg = C / G, Mg = M / G, R = Mg * kd * kh * kw, P = D * H * W, Q = OD * OH * OW;
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
        f32_col2im_add(col, pc, p0, H, W, Mg, kd, kh, kw, sd, sh, sw, dd, dh, dw, pd, pt, pl, OD, OH, OW, yg);
      }
      if (act.kind != ACT_NONE) f32_act(yg, Mg * Q, act);
    }
  }
}
