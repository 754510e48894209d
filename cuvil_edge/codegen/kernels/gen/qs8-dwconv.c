/* generated from templates/qs8-dwconv.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* Quantized depthwise convolution (NCHW, depth multiplier 1): uint8 planes, int8 taps per channel, exact
 * int32 sums, the qs8 GEMM's epilogue (q_dequant); no im2col. Needs qs8-gemm (QDOT7, qdot_widen).
 *
 * Padding: each channel's plane is copied into a scratch plane (Hp x Wp) bordered with the input zero
 * point, the quantized 0.0 that im2col writes for padding taps, so the sums equal the im2col path's and
 * the rows run with no bounds checks or masks. The border is filled once per call; rows are copied 16
 * bytes at a time and the right padding columns the over-copy hit are restored (Wp leaves room for it).
 * f32 input is quantized one channel at a time into the thread's scratch just before its plane is
 * filled (no quantized copy of the whole tensor), so threads, each on its own channels, never meet.
 *
 * Vectorized across output width (NCHW rows): 8 pixels per step, two vectors of 4 int32 sums. Taps go
 * in groups of 4 along a filter row (weights [C][kh][kwg][4], kwg = ceil(kw/4), zero past kw), splatted
 * once per channel; one dot (QDOT7: the relaxed i8 x i7 dot or its widened equal; qdot_widen for 8-bit
 * activations) adds a group's 4 taps to 4 pixels, lane p holding pixel p's 4 bytes:
 *   s1 (width stride 1, dilation 1 across): one 16-byte load per group, two shuffles (pixels 0-3, 4-7);
 *   s2 (width stride 2, dilation 1 across): two loads per group, one shuffle each;
 *   sN (any other stride or dilation): the bytes gathered one by one (slow, but no shape falls back).
 * The 3x3 and 5x5 kernels are these loops with constant taps (unrolled, weights in registers); "kxk"
 * runs them with loop bounds and its splatted weights in scratch. A 3-tap row leaves a quarter of each
 * dot idle: packing taps across filter rows would need two-source shuffles per dot instead.
 * Measured (x86, one thread, the conv alone, 2 ops per tap): relaxed 18-29 GOPS at s1 on 56-224 wide
 * planes, 12-14 at 7-14 wide, 16-24 at s2; SIMD128 13-18 at s1. 16 pixels per step (four sums) ran
 * 1.5-2.5x slower at every width.
 */

/* Copy channel plane xc (H x W) into the interior of the bordered plane at (pt, pl). */
INLINE void qdw_fill_plane(uint8_t* plane, const uint8_t* xc, int H, int W, int pt, int pl, int pr, int Wp,
                           uint8_t zp) {
  for (int iy = 0; iy < H; iy++) {
    uint8_t* dst = plane + (size_t)(iy + pt) * Wp + pl;
    const uint8_t* src = xc + (size_t)iy * W;
    for (int i = 0; i < W; i += 16) VSTORE(dst + i, VLOAD(src + i));
    for (int i = W; i < W + pr; i++) dst[i] = zp;
  }
}

/* The 4-byte tap windows of pixels 0-3 (lo) and 4-7 (hi) in 16 bytes of a row, width stride 1. */
INLINE void qdw_windows_s1(v128_t v, v128_t* lo, v128_t* hi) {
  *lo = wasm_i8x16_shuffle(v, v, 0, 1, 2, 3, 1, 2, 3, 4, 2, 3, 4, 5, 3, 4, 5, 6);
  *hi = wasm_i8x16_shuffle(v, v, 4, 5, 6, 7, 5, 6, 7, 8, 6, 7, 8, 9, 7, 8, 9, 10);
}

/* 8 outputs (f32 epilogue, fused activation; QOut: f32 or requantized), the first n of them stored. */
INLINE void qdw_store8(QOut y, int n, v128_t a0, v128_t a1, v128_t zs, v128_t sc, v128_t b, Act act) {
  const v128_t f0 = act_apply(q_dequant(a0, zs, sc, b), act), f1 = act_apply(q_dequant(a1, zs, sc, b), act);
  if (y.qmax && n >= 8) {  /* both halves quantized, then narrowed together: bytes 0-7 */
    const v128_t q0 = qo_quant4(y, f0), q1 = qo_quant4(y, f1);
    const v128_t q[4] = {q0, q1, q0, q1};
    wasm_v128_store64_lane(y.p, qu8_narrow16(q), 0);
    return;
  }
  qo_store(y, f0, n < 4 ? n : 4);
  if (n > 4) qo_store(qo_at(y, 4), f1, n < 8 ? n - 4 : 4);
}

/* One output row, s1, 7-bit activations: tap row ky of output 0 starts at r + ky * rs (plane
 * bytes); wv[ky * kwg + g] holds tap group g's 4 taps in every lane. */
INLINE void qdw_row_s1_x7(const uint8_t* r, int rs, const v128_t* wv, int kh, int kwg, int sw, int dw,
                          int OW, QOut y, v128_t zs, v128_t sc, v128_t b, Act act) {
  (void)sw; (void)dw;
  for (int ox = 0; ox < OW; ox += 8) {
    v128_t a0 = wasm_i32x4_const_splat(0), a1 = a0;
    const uint8_t* p = r + ox * 1;
    for (int ky = 0; ky < kh; ky++, p += rs) {
      for (int g = 0; g < kwg; g++) {
        const v128_t w = wv[ky * kwg + g];
        v128_t lo, hi;
        qdw_windows_s1(VLOAD(p + 4 * g), &lo, &hi);
        a0 = QDOT7(w, lo, a0);
        a1 = QDOT7(w, hi, a1);
      }
    }
    qdw_store8(qo_at(y, ox), OW - ox, a0, a1, zs, sc, b, act);
  }
}

/* One output row, s2, 7-bit activations: tap row ky of output 0 starts at r + ky * rs (plane
 * bytes); wv[ky * kwg + g] holds tap group g's 4 taps in every lane. */
INLINE void qdw_row_s2_x7(const uint8_t* r, int rs, const v128_t* wv, int kh, int kwg, int sw, int dw,
                          int OW, QOut y, v128_t zs, v128_t sc, v128_t b, Act act) {
  (void)sw; (void)dw;
  for (int ox = 0; ox < OW; ox += 8) {
    v128_t a0 = wasm_i32x4_const_splat(0), a1 = a0;
    const uint8_t* p = r + ox * 2;
    for (int ky = 0; ky < kh; ky++, p += rs) {
      for (int g = 0; g < kwg; g++) {
        const v128_t w = wv[ky * kwg + g];
        const v128_t v0 = VLOAD(p + 4 * g), v1 = VLOAD(p + 4 * g + 8);
        a0 = QDOT7(w, wasm_i8x16_shuffle(v0, v0, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7, 8, 9), a0);
        a1 = QDOT7(w, wasm_i8x16_shuffle(v1, v1, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7, 8, 9), a1);
      }
    }
    qdw_store8(qo_at(y, ox), OW - ox, a0, a1, zs, sc, b, act);
  }
}

/* One output row, sN, 7-bit activations: tap row ky of output 0 starts at r + ky * rs (plane
 * bytes); wv[ky * kwg + g] holds tap group g's 4 taps in every lane. */
INLINE void qdw_row_sN_x7(const uint8_t* r, int rs, const v128_t* wv, int kh, int kwg, int sw, int dw,
                          int OW, QOut y, v128_t zs, v128_t sc, v128_t b, Act act) {
  for (int ox = 0; ox < OW; ox += 8) {
    v128_t a0 = wasm_i32x4_const_splat(0), a1 = a0;
    const uint8_t* p = r + (size_t)ox * sw;
    for (int ky = 0; ky < kh; ky++, p += rs) {
      for (int g = 0; g < kwg; g++) {
        const v128_t w = wv[ky * kwg + g];
        uint8_t t[32] __attribute__((aligned(16)));
        const uint8_t* q = p + (size_t)4 * g * dw;
        for (int l = 0; l < 8; l++)
          for (int j = 0; j < 4; j++) t[4 * l + j] = q[(size_t)l * sw + (size_t)j * dw];
        a0 = QDOT7(w, VLOAD(t), a0);
        a1 = QDOT7(w, VLOAD(t + 16), a1);
      }
    }
    qdw_store8(qo_at(y, ox), OW - ox, a0, a1, zs, sc, b, act);
  }
}

/* Two adjacent output rows, s1, 7-bit activations, vertical stride and dilation 1: the kh - 1 input
 * rows both read are loaded and shuffled once for both (row 0 from r, row 1 from r + rs). */
INLINE void qdw_rows2_s1_x7(const uint8_t* r, int rs, const v128_t* wv, int kh, int kwg, int OW, QOut y0,
                            QOut y1, v128_t zs, v128_t sc, v128_t b, Act act) {
  for (int ox = 0; ox < OW; ox += 8) {
    v128_t a0 = wasm_i32x4_const_splat(0), a1 = a0, c0 = a0, c1 = a0;
    const uint8_t* p = r + ox;
    for (int iy = 0; iy <= kh; iy++, p += rs) {
      for (int g = 0; g < kwg; g++) {
        v128_t lo, hi;
        qdw_windows_s1(VLOAD(p + 4 * g), &lo, &hi);
        if (iy < kh) {
          a0 = QDOT7(wv[iy * kwg + g], lo, a0);
          a1 = QDOT7(wv[iy * kwg + g], hi, a1);
        }
        if (iy > 0) {
          c0 = QDOT7(wv[(iy - 1) * kwg + g], lo, c0);
          c1 = QDOT7(wv[(iy - 1) * kwg + g], hi, c1);
        }
      }
    }
    qdw_store8(qo_at(y0, ox), OW - ox, a0, a1, zs, sc, b, act);
    qdw_store8(qo_at(y1, ox), OW - ox, c0, c1, zs, sc, b, act);
  }
}

/* Whole tensor, 3x3s1, 7-bit activations: uint8 xq [N][C][H][W], or f32 xf quantized here channel by
 * channel (qu8_quantize: scale xs, zero point xz, 0..qmax; xq is then unused); w [C][kh][kwg][4] int8,
 * wsum/ws/bias [C] (the qs8 GEMM's per-row operands), y [N][C][OH][OW] (QOut: f32 or uint8). scratch,
 * the thread's own: the Hp x Wp plane, then (kxk) kh * kwg vectors, then (xf) one channel's bytes and
 * 16. The threads claim the channels (cuvil_chunks). */
INLINE void qs8_dwconv_body_x7_3x3s1(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
  uint8_t* plane = scratch;
  (void)kh; (void)kw;
  const int KH = 3, KWG = 1;
  v128_t wv[3];
  uint8_t* buf = plane + (((size_t)Hp * Wp + 15) & ~(size_t)15);
  const uint8_t zp = (uint8_t)xz[0];
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1, filled = 0; cuvil_chunk(&d, &c0, &c1);) {
    if (!filled++) __builtin_memset(plane, zp, (size_t)Hp * Wp);  /* each thread its own plane */
    for (int nci = c0; nci < c1; nci++) {
      const int n = nci / C, c = nci % C;
      const size_t nc = ((size_t)n * C + c) * H * W;
      if (xf) qu8_quantize(H * W, xf + nc, buf, xs, xz, qmax);
      qdw_fill_plane(plane, xf ? buf : xq + nc, H, W, pt, pl, pr, Wp, zp);
      const int8_t* wc = w + (size_t)c * KH * KWG * 4;
      for (int i = 0; i < KH * KWG; i++) wv[i] = wasm_v128_load32_splat(wc + 4 * i);
      const v128_t zs = wasm_i32x4_splat(xz[0] * wsum[c]), sc = VSPLAT(ws[c] * xs[0]), b = VSPLAT(bias[c]);
      const QOut yc = qo_at(y, ((size_t)n * C + c) * OH * OW);
      int oy = 0;
      if (sh == 1 && dh == 1)  /* rows in pairs, each input row read once for both */
        for (; oy + 2 <= OH; oy += 2)
          qdw_rows2_s1_x7(plane + (size_t)oy * Wp, Wp, wv, KH, KWG, OW, qo_at(yc, (size_t)oy * OW),
                          qo_at(yc, (size_t)(oy + 1) * OW), zs, sc, b, act);
      for (; oy < OH; oy++)
        qdw_row_s1_x7(plane + (size_t)oy * sh * Wp, dh * Wp, wv, KH, KWG, sw, dw, OW,
                      qo_at(yc, (size_t)oy * OW), zs, sc, b, act);
    }
  }
}

/* 3x3s1, 7-bit activations: qs8_dwconv_body with the common activations' kinds constant (ACT_SPECIALIZED). */
KERNEL void qs8_dwconv_x7_3x3s1(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
#define QS8_DW(a) qs8_dwconv_body_x7_3x3s1(xf, xq, N, C, H, W, w, wsum, ws, bias, xs, xz, qmax, y, OH, OW, kh, kw, \
                                           sh, sw, dh, dw, pt, pl, pr, Hp, Wp, scratch, a, tid, nt)
  ACT_SPECIALIZED(act, QS8_DW);
#undef QS8_DW
}
/* Whole tensor, 3x3s2, 7-bit activations: uint8 xq [N][C][H][W], or f32 xf quantized here channel by
 * channel (qu8_quantize: scale xs, zero point xz, 0..qmax; xq is then unused); w [C][kh][kwg][4] int8,
 * wsum/ws/bias [C] (the qs8 GEMM's per-row operands), y [N][C][OH][OW] (QOut: f32 or uint8). scratch,
 * the thread's own: the Hp x Wp plane, then (kxk) kh * kwg vectors, then (xf) one channel's bytes and
 * 16. The threads claim the channels (cuvil_chunks). */
INLINE void qs8_dwconv_body_x7_3x3s2(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
  uint8_t* plane = scratch;
  (void)kh; (void)kw;
  const int KH = 3, KWG = 1;
  v128_t wv[3];
  uint8_t* buf = plane + (((size_t)Hp * Wp + 15) & ~(size_t)15);
  const uint8_t zp = (uint8_t)xz[0];
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1, filled = 0; cuvil_chunk(&d, &c0, &c1);) {
    if (!filled++) __builtin_memset(plane, zp, (size_t)Hp * Wp);  /* each thread its own plane */
    for (int nci = c0; nci < c1; nci++) {
      const int n = nci / C, c = nci % C;
      const size_t nc = ((size_t)n * C + c) * H * W;
      if (xf) qu8_quantize(H * W, xf + nc, buf, xs, xz, qmax);
      qdw_fill_plane(plane, xf ? buf : xq + nc, H, W, pt, pl, pr, Wp, zp);
      const int8_t* wc = w + (size_t)c * KH * KWG * 4;
      for (int i = 0; i < KH * KWG; i++) wv[i] = wasm_v128_load32_splat(wc + 4 * i);
      const v128_t zs = wasm_i32x4_splat(xz[0] * wsum[c]), sc = VSPLAT(ws[c] * xs[0]), b = VSPLAT(bias[c]);
      const QOut yc = qo_at(y, ((size_t)n * C + c) * OH * OW);
      int oy = 0;
      for (; oy < OH; oy++)
        qdw_row_s2_x7(plane + (size_t)oy * sh * Wp, dh * Wp, wv, KH, KWG, sw, dw, OW,
                      qo_at(yc, (size_t)oy * OW), zs, sc, b, act);
    }
  }
}

/* 3x3s2, 7-bit activations: qs8_dwconv_body with the common activations' kinds constant (ACT_SPECIALIZED). */
KERNEL void qs8_dwconv_x7_3x3s2(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
#define QS8_DW(a) qs8_dwconv_body_x7_3x3s2(xf, xq, N, C, H, W, w, wsum, ws, bias, xs, xz, qmax, y, OH, OW, kh, kw, \
                                           sh, sw, dh, dw, pt, pl, pr, Hp, Wp, scratch, a, tid, nt)
  ACT_SPECIALIZED(act, QS8_DW);
#undef QS8_DW
}
/* Whole tensor, 5x5s1, 7-bit activations: uint8 xq [N][C][H][W], or f32 xf quantized here channel by
 * channel (qu8_quantize: scale xs, zero point xz, 0..qmax; xq is then unused); w [C][kh][kwg][4] int8,
 * wsum/ws/bias [C] (the qs8 GEMM's per-row operands), y [N][C][OH][OW] (QOut: f32 or uint8). scratch,
 * the thread's own: the Hp x Wp plane, then (kxk) kh * kwg vectors, then (xf) one channel's bytes and
 * 16. The threads claim the channels (cuvil_chunks). */
INLINE void qs8_dwconv_body_x7_5x5s1(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
  uint8_t* plane = scratch;
  (void)kh; (void)kw;
  const int KH = 5, KWG = 2;
  v128_t wv[10];
  uint8_t* buf = plane + (((size_t)Hp * Wp + 15) & ~(size_t)15);
  const uint8_t zp = (uint8_t)xz[0];
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1, filled = 0; cuvil_chunk(&d, &c0, &c1);) {
    if (!filled++) __builtin_memset(plane, zp, (size_t)Hp * Wp);  /* each thread its own plane */
    for (int nci = c0; nci < c1; nci++) {
      const int n = nci / C, c = nci % C;
      const size_t nc = ((size_t)n * C + c) * H * W;
      if (xf) qu8_quantize(H * W, xf + nc, buf, xs, xz, qmax);
      qdw_fill_plane(plane, xf ? buf : xq + nc, H, W, pt, pl, pr, Wp, zp);
      const int8_t* wc = w + (size_t)c * KH * KWG * 4;
      for (int i = 0; i < KH * KWG; i++) wv[i] = wasm_v128_load32_splat(wc + 4 * i);
      const v128_t zs = wasm_i32x4_splat(xz[0] * wsum[c]), sc = VSPLAT(ws[c] * xs[0]), b = VSPLAT(bias[c]);
      const QOut yc = qo_at(y, ((size_t)n * C + c) * OH * OW);
      int oy = 0;
      if (sh == 1 && dh == 1)  /* rows in pairs, each input row read once for both */
        for (; oy + 2 <= OH; oy += 2)
          qdw_rows2_s1_x7(plane + (size_t)oy * Wp, Wp, wv, KH, KWG, OW, qo_at(yc, (size_t)oy * OW),
                          qo_at(yc, (size_t)(oy + 1) * OW), zs, sc, b, act);
      for (; oy < OH; oy++)
        qdw_row_s1_x7(plane + (size_t)oy * sh * Wp, dh * Wp, wv, KH, KWG, sw, dw, OW,
                      qo_at(yc, (size_t)oy * OW), zs, sc, b, act);
    }
  }
}

/* 5x5s1, 7-bit activations: qs8_dwconv_body with the common activations' kinds constant (ACT_SPECIALIZED). */
KERNEL void qs8_dwconv_x7_5x5s1(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
#define QS8_DW(a) qs8_dwconv_body_x7_5x5s1(xf, xq, N, C, H, W, w, wsum, ws, bias, xs, xz, qmax, y, OH, OW, kh, kw, \
                                           sh, sw, dh, dw, pt, pl, pr, Hp, Wp, scratch, a, tid, nt)
  ACT_SPECIALIZED(act, QS8_DW);
#undef QS8_DW
}
/* Whole tensor, 5x5s2, 7-bit activations: uint8 xq [N][C][H][W], or f32 xf quantized here channel by
 * channel (qu8_quantize: scale xs, zero point xz, 0..qmax; xq is then unused); w [C][kh][kwg][4] int8,
 * wsum/ws/bias [C] (the qs8 GEMM's per-row operands), y [N][C][OH][OW] (QOut: f32 or uint8). scratch,
 * the thread's own: the Hp x Wp plane, then (kxk) kh * kwg vectors, then (xf) one channel's bytes and
 * 16. The threads claim the channels (cuvil_chunks). */
INLINE void qs8_dwconv_body_x7_5x5s2(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
  uint8_t* plane = scratch;
  (void)kh; (void)kw;
  const int KH = 5, KWG = 2;
  v128_t wv[10];
  uint8_t* buf = plane + (((size_t)Hp * Wp + 15) & ~(size_t)15);
  const uint8_t zp = (uint8_t)xz[0];
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1, filled = 0; cuvil_chunk(&d, &c0, &c1);) {
    if (!filled++) __builtin_memset(plane, zp, (size_t)Hp * Wp);  /* each thread its own plane */
    for (int nci = c0; nci < c1; nci++) {
      const int n = nci / C, c = nci % C;
      const size_t nc = ((size_t)n * C + c) * H * W;
      if (xf) qu8_quantize(H * W, xf + nc, buf, xs, xz, qmax);
      qdw_fill_plane(plane, xf ? buf : xq + nc, H, W, pt, pl, pr, Wp, zp);
      const int8_t* wc = w + (size_t)c * KH * KWG * 4;
      for (int i = 0; i < KH * KWG; i++) wv[i] = wasm_v128_load32_splat(wc + 4 * i);
      const v128_t zs = wasm_i32x4_splat(xz[0] * wsum[c]), sc = VSPLAT(ws[c] * xs[0]), b = VSPLAT(bias[c]);
      const QOut yc = qo_at(y, ((size_t)n * C + c) * OH * OW);
      int oy = 0;
      for (; oy < OH; oy++)
        qdw_row_s2_x7(plane + (size_t)oy * sh * Wp, dh * Wp, wv, KH, KWG, sw, dw, OW,
                      qo_at(yc, (size_t)oy * OW), zs, sc, b, act);
    }
  }
}

/* 5x5s2, 7-bit activations: qs8_dwconv_body with the common activations' kinds constant (ACT_SPECIALIZED). */
KERNEL void qs8_dwconv_x7_5x5s2(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
#define QS8_DW(a) qs8_dwconv_body_x7_5x5s2(xf, xq, N, C, H, W, w, wsum, ws, bias, xs, xz, qmax, y, OH, OW, kh, kw, \
                                           sh, sw, dh, dw, pt, pl, pr, Hp, Wp, scratch, a, tid, nt)
  ACT_SPECIALIZED(act, QS8_DW);
#undef QS8_DW
}
/* Whole tensor, kxks1, 7-bit activations: uint8 xq [N][C][H][W], or f32 xf quantized here channel by
 * channel (qu8_quantize: scale xs, zero point xz, 0..qmax; xq is then unused); w [C][kh][kwg][4] int8,
 * wsum/ws/bias [C] (the qs8 GEMM's per-row operands), y [N][C][OH][OW] (QOut: f32 or uint8). scratch,
 * the thread's own: the Hp x Wp plane, then (kxk) kh * kwg vectors, then (xf) one channel's bytes and
 * 16. The threads claim the channels (cuvil_chunks). */
INLINE void qs8_dwconv_body_x7_kxks1(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
  uint8_t* plane = scratch;
  const int KH = kh, KWG = (kw + 3) / 4;
  v128_t* wv = (v128_t*)(plane + (((size_t)Hp * Wp + 15) & ~(size_t)15));
  uint8_t* buf = (uint8_t*)(wv + KH * KWG);
  const uint8_t zp = (uint8_t)xz[0];
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1, filled = 0; cuvil_chunk(&d, &c0, &c1);) {
    if (!filled++) __builtin_memset(plane, zp, (size_t)Hp * Wp);  /* each thread its own plane */
    for (int nci = c0; nci < c1; nci++) {
      const int n = nci / C, c = nci % C;
      const size_t nc = ((size_t)n * C + c) * H * W;
      if (xf) qu8_quantize(H * W, xf + nc, buf, xs, xz, qmax);
      qdw_fill_plane(plane, xf ? buf : xq + nc, H, W, pt, pl, pr, Wp, zp);
      const int8_t* wc = w + (size_t)c * KH * KWG * 4;
      for (int i = 0; i < KH * KWG; i++) wv[i] = wasm_v128_load32_splat(wc + 4 * i);
      const v128_t zs = wasm_i32x4_splat(xz[0] * wsum[c]), sc = VSPLAT(ws[c] * xs[0]), b = VSPLAT(bias[c]);
      const QOut yc = qo_at(y, ((size_t)n * C + c) * OH * OW);
      int oy = 0;
      if (sh == 1 && dh == 1)  /* rows in pairs, each input row read once for both */
        for (; oy + 2 <= OH; oy += 2)
          qdw_rows2_s1_x7(plane + (size_t)oy * Wp, Wp, wv, KH, KWG, OW, qo_at(yc, (size_t)oy * OW),
                          qo_at(yc, (size_t)(oy + 1) * OW), zs, sc, b, act);
      for (; oy < OH; oy++)
        qdw_row_s1_x7(plane + (size_t)oy * sh * Wp, dh * Wp, wv, KH, KWG, sw, dw, OW,
                      qo_at(yc, (size_t)oy * OW), zs, sc, b, act);
    }
  }
}

/* kxks1, 7-bit activations: qs8_dwconv_body with the common activations' kinds constant (ACT_SPECIALIZED). */
KERNEL void qs8_dwconv_x7_kxks1(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
#define QS8_DW(a) qs8_dwconv_body_x7_kxks1(xf, xq, N, C, H, W, w, wsum, ws, bias, xs, xz, qmax, y, OH, OW, kh, kw, \
                                           sh, sw, dh, dw, pt, pl, pr, Hp, Wp, scratch, a, tid, nt)
  ACT_SPECIALIZED(act, QS8_DW);
#undef QS8_DW
}
/* Whole tensor, kxks2, 7-bit activations: uint8 xq [N][C][H][W], or f32 xf quantized here channel by
 * channel (qu8_quantize: scale xs, zero point xz, 0..qmax; xq is then unused); w [C][kh][kwg][4] int8,
 * wsum/ws/bias [C] (the qs8 GEMM's per-row operands), y [N][C][OH][OW] (QOut: f32 or uint8). scratch,
 * the thread's own: the Hp x Wp plane, then (kxk) kh * kwg vectors, then (xf) one channel's bytes and
 * 16. The threads claim the channels (cuvil_chunks). */
INLINE void qs8_dwconv_body_x7_kxks2(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
  uint8_t* plane = scratch;
  const int KH = kh, KWG = (kw + 3) / 4;
  v128_t* wv = (v128_t*)(plane + (((size_t)Hp * Wp + 15) & ~(size_t)15));
  uint8_t* buf = (uint8_t*)(wv + KH * KWG);
  const uint8_t zp = (uint8_t)xz[0];
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1, filled = 0; cuvil_chunk(&d, &c0, &c1);) {
    if (!filled++) __builtin_memset(plane, zp, (size_t)Hp * Wp);  /* each thread its own plane */
    for (int nci = c0; nci < c1; nci++) {
      const int n = nci / C, c = nci % C;
      const size_t nc = ((size_t)n * C + c) * H * W;
      if (xf) qu8_quantize(H * W, xf + nc, buf, xs, xz, qmax);
      qdw_fill_plane(plane, xf ? buf : xq + nc, H, W, pt, pl, pr, Wp, zp);
      const int8_t* wc = w + (size_t)c * KH * KWG * 4;
      for (int i = 0; i < KH * KWG; i++) wv[i] = wasm_v128_load32_splat(wc + 4 * i);
      const v128_t zs = wasm_i32x4_splat(xz[0] * wsum[c]), sc = VSPLAT(ws[c] * xs[0]), b = VSPLAT(bias[c]);
      const QOut yc = qo_at(y, ((size_t)n * C + c) * OH * OW);
      int oy = 0;
      for (; oy < OH; oy++)
        qdw_row_s2_x7(plane + (size_t)oy * sh * Wp, dh * Wp, wv, KH, KWG, sw, dw, OW,
                      qo_at(yc, (size_t)oy * OW), zs, sc, b, act);
    }
  }
}

/* kxks2, 7-bit activations: qs8_dwconv_body with the common activations' kinds constant (ACT_SPECIALIZED). */
KERNEL void qs8_dwconv_x7_kxks2(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
#define QS8_DW(a) qs8_dwconv_body_x7_kxks2(xf, xq, N, C, H, W, w, wsum, ws, bias, xs, xz, qmax, y, OH, OW, kh, kw, \
                                           sh, sw, dh, dw, pt, pl, pr, Hp, Wp, scratch, a, tid, nt)
  ACT_SPECIALIZED(act, QS8_DW);
#undef QS8_DW
}
/* Whole tensor, kxksN, 7-bit activations: uint8 xq [N][C][H][W], or f32 xf quantized here channel by
 * channel (qu8_quantize: scale xs, zero point xz, 0..qmax; xq is then unused); w [C][kh][kwg][4] int8,
 * wsum/ws/bias [C] (the qs8 GEMM's per-row operands), y [N][C][OH][OW] (QOut: f32 or uint8). scratch,
 * the thread's own: the Hp x Wp plane, then (kxk) kh * kwg vectors, then (xf) one channel's bytes and
 * 16. The threads claim the channels (cuvil_chunks). */
INLINE void qs8_dwconv_body_x7_kxksN(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
  uint8_t* plane = scratch;
  const int KH = kh, KWG = (kw + 3) / 4;
  v128_t* wv = (v128_t*)(plane + (((size_t)Hp * Wp + 15) & ~(size_t)15));
  uint8_t* buf = (uint8_t*)(wv + KH * KWG);
  const uint8_t zp = (uint8_t)xz[0];
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1, filled = 0; cuvil_chunk(&d, &c0, &c1);) {
    if (!filled++) __builtin_memset(plane, zp, (size_t)Hp * Wp);  /* each thread its own plane */
    for (int nci = c0; nci < c1; nci++) {
      const int n = nci / C, c = nci % C;
      const size_t nc = ((size_t)n * C + c) * H * W;
      if (xf) qu8_quantize(H * W, xf + nc, buf, xs, xz, qmax);
      qdw_fill_plane(plane, xf ? buf : xq + nc, H, W, pt, pl, pr, Wp, zp);
      const int8_t* wc = w + (size_t)c * KH * KWG * 4;
      for (int i = 0; i < KH * KWG; i++) wv[i] = wasm_v128_load32_splat(wc + 4 * i);
      const v128_t zs = wasm_i32x4_splat(xz[0] * wsum[c]), sc = VSPLAT(ws[c] * xs[0]), b = VSPLAT(bias[c]);
      const QOut yc = qo_at(y, ((size_t)n * C + c) * OH * OW);
      int oy = 0;
      for (; oy < OH; oy++)
        qdw_row_sN_x7(plane + (size_t)oy * sh * Wp, dh * Wp, wv, KH, KWG, sw, dw, OW,
                      qo_at(yc, (size_t)oy * OW), zs, sc, b, act);
    }
  }
}

/* kxksN, 7-bit activations: qs8_dwconv_body with the common activations' kinds constant (ACT_SPECIALIZED). */
KERNEL void qs8_dwconv_x7_kxksN(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
#define QS8_DW(a) qs8_dwconv_body_x7_kxksN(xf, xq, N, C, H, W, w, wsum, ws, bias, xs, xz, qmax, y, OH, OW, kh, kw, \
                                           sh, sw, dh, dw, pt, pl, pr, Hp, Wp, scratch, a, tid, nt)
  ACT_SPECIALIZED(act, QS8_DW);
#undef QS8_DW
}
/* One output row, s1, 8-bit activations: tap row ky of output 0 starts at r + ky * rs (plane
 * bytes); wv[ky * kwg + g] holds tap group g's 4 taps in every lane. */
INLINE void qdw_row_s1_x8(const uint8_t* r, int rs, const v128_t* wv, int kh, int kwg, int sw, int dw,
                          int OW, QOut y, v128_t zs, v128_t sc, v128_t b, Act act) {
  (void)sw; (void)dw;
  for (int ox = 0; ox < OW; ox += 8) {
    v128_t a0 = wasm_i32x4_const_splat(0), a1 = a0;
    const uint8_t* p = r + ox * 1;
    for (int ky = 0; ky < kh; ky++, p += rs) {
      for (int g = 0; g < kwg; g++) {
        const v128_t w = wv[ky * kwg + g];
        v128_t lo, hi;
        qdw_windows_s1(VLOAD(p + 4 * g), &lo, &hi);
        a0 = qdot_widen(w, lo, a0);
        a1 = qdot_widen(w, hi, a1);
      }
    }
    qdw_store8(qo_at(y, ox), OW - ox, a0, a1, zs, sc, b, act);
  }
}

/* One output row, s2, 8-bit activations: tap row ky of output 0 starts at r + ky * rs (plane
 * bytes); wv[ky * kwg + g] holds tap group g's 4 taps in every lane. */
INLINE void qdw_row_s2_x8(const uint8_t* r, int rs, const v128_t* wv, int kh, int kwg, int sw, int dw,
                          int OW, QOut y, v128_t zs, v128_t sc, v128_t b, Act act) {
  (void)sw; (void)dw;
  for (int ox = 0; ox < OW; ox += 8) {
    v128_t a0 = wasm_i32x4_const_splat(0), a1 = a0;
    const uint8_t* p = r + ox * 2;
    for (int ky = 0; ky < kh; ky++, p += rs) {
      for (int g = 0; g < kwg; g++) {
        const v128_t w = wv[ky * kwg + g];
        const v128_t v0 = VLOAD(p + 4 * g), v1 = VLOAD(p + 4 * g + 8);
        a0 = qdot_widen(w, wasm_i8x16_shuffle(v0, v0, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7, 8, 9), a0);
        a1 = qdot_widen(w, wasm_i8x16_shuffle(v1, v1, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7, 8, 9), a1);
      }
    }
    qdw_store8(qo_at(y, ox), OW - ox, a0, a1, zs, sc, b, act);
  }
}

/* One output row, sN, 8-bit activations: tap row ky of output 0 starts at r + ky * rs (plane
 * bytes); wv[ky * kwg + g] holds tap group g's 4 taps in every lane. */
INLINE void qdw_row_sN_x8(const uint8_t* r, int rs, const v128_t* wv, int kh, int kwg, int sw, int dw,
                          int OW, QOut y, v128_t zs, v128_t sc, v128_t b, Act act) {
  for (int ox = 0; ox < OW; ox += 8) {
    v128_t a0 = wasm_i32x4_const_splat(0), a1 = a0;
    const uint8_t* p = r + (size_t)ox * sw;
    for (int ky = 0; ky < kh; ky++, p += rs) {
      for (int g = 0; g < kwg; g++) {
        const v128_t w = wv[ky * kwg + g];
        uint8_t t[32] __attribute__((aligned(16)));
        const uint8_t* q = p + (size_t)4 * g * dw;
        for (int l = 0; l < 8; l++)
          for (int j = 0; j < 4; j++) t[4 * l + j] = q[(size_t)l * sw + (size_t)j * dw];
        a0 = qdot_widen(w, VLOAD(t), a0);
        a1 = qdot_widen(w, VLOAD(t + 16), a1);
      }
    }
    qdw_store8(qo_at(y, ox), OW - ox, a0, a1, zs, sc, b, act);
  }
}

/* Two adjacent output rows, s1, 8-bit activations, vertical stride and dilation 1: the kh - 1 input
 * rows both read are loaded and shuffled once for both (row 0 from r, row 1 from r + rs). */
INLINE void qdw_rows2_s1_x8(const uint8_t* r, int rs, const v128_t* wv, int kh, int kwg, int OW, QOut y0,
                            QOut y1, v128_t zs, v128_t sc, v128_t b, Act act) {
  for (int ox = 0; ox < OW; ox += 8) {
    v128_t a0 = wasm_i32x4_const_splat(0), a1 = a0, c0 = a0, c1 = a0;
    const uint8_t* p = r + ox;
    for (int iy = 0; iy <= kh; iy++, p += rs) {
      for (int g = 0; g < kwg; g++) {
        v128_t lo, hi;
        qdw_windows_s1(VLOAD(p + 4 * g), &lo, &hi);
        if (iy < kh) {
          a0 = qdot_widen(wv[iy * kwg + g], lo, a0);
          a1 = qdot_widen(wv[iy * kwg + g], hi, a1);
        }
        if (iy > 0) {
          c0 = qdot_widen(wv[(iy - 1) * kwg + g], lo, c0);
          c1 = qdot_widen(wv[(iy - 1) * kwg + g], hi, c1);
        }
      }
    }
    qdw_store8(qo_at(y0, ox), OW - ox, a0, a1, zs, sc, b, act);
    qdw_store8(qo_at(y1, ox), OW - ox, c0, c1, zs, sc, b, act);
  }
}

/* Whole tensor, 3x3s1, 8-bit activations: uint8 xq [N][C][H][W], or f32 xf quantized here channel by
 * channel (qu8_quantize: scale xs, zero point xz, 0..qmax; xq is then unused); w [C][kh][kwg][4] int8,
 * wsum/ws/bias [C] (the qs8 GEMM's per-row operands), y [N][C][OH][OW] (QOut: f32 or uint8). scratch,
 * the thread's own: the Hp x Wp plane, then (kxk) kh * kwg vectors, then (xf) one channel's bytes and
 * 16. The threads claim the channels (cuvil_chunks). */
INLINE void qs8_dwconv_body_x8_3x3s1(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
  uint8_t* plane = scratch;
  (void)kh; (void)kw;
  const int KH = 3, KWG = 1;
  v128_t wv[3];
  uint8_t* buf = plane + (((size_t)Hp * Wp + 15) & ~(size_t)15);
  const uint8_t zp = (uint8_t)xz[0];
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1, filled = 0; cuvil_chunk(&d, &c0, &c1);) {
    if (!filled++) __builtin_memset(plane, zp, (size_t)Hp * Wp);  /* each thread its own plane */
    for (int nci = c0; nci < c1; nci++) {
      const int n = nci / C, c = nci % C;
      const size_t nc = ((size_t)n * C + c) * H * W;
      if (xf) qu8_quantize(H * W, xf + nc, buf, xs, xz, qmax);
      qdw_fill_plane(plane, xf ? buf : xq + nc, H, W, pt, pl, pr, Wp, zp);
      const int8_t* wc = w + (size_t)c * KH * KWG * 4;
      for (int i = 0; i < KH * KWG; i++) wv[i] = wasm_v128_load32_splat(wc + 4 * i);
      const v128_t zs = wasm_i32x4_splat(xz[0] * wsum[c]), sc = VSPLAT(ws[c] * xs[0]), b = VSPLAT(bias[c]);
      const QOut yc = qo_at(y, ((size_t)n * C + c) * OH * OW);
      int oy = 0;
      if (sh == 1 && dh == 1)  /* rows in pairs, each input row read once for both */
        for (; oy + 2 <= OH; oy += 2)
          qdw_rows2_s1_x8(plane + (size_t)oy * Wp, Wp, wv, KH, KWG, OW, qo_at(yc, (size_t)oy * OW),
                          qo_at(yc, (size_t)(oy + 1) * OW), zs, sc, b, act);
      for (; oy < OH; oy++)
        qdw_row_s1_x8(plane + (size_t)oy * sh * Wp, dh * Wp, wv, KH, KWG, sw, dw, OW,
                      qo_at(yc, (size_t)oy * OW), zs, sc, b, act);
    }
  }
}

/* 3x3s1, 8-bit activations: qs8_dwconv_body with the common activations' kinds constant (ACT_SPECIALIZED). */
KERNEL void qs8_dwconv_x8_3x3s1(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
#define QS8_DW(a) qs8_dwconv_body_x8_3x3s1(xf, xq, N, C, H, W, w, wsum, ws, bias, xs, xz, qmax, y, OH, OW, kh, kw, \
                                           sh, sw, dh, dw, pt, pl, pr, Hp, Wp, scratch, a, tid, nt)
  ACT_SPECIALIZED(act, QS8_DW);
#undef QS8_DW
}
/* Whole tensor, 3x3s2, 8-bit activations: uint8 xq [N][C][H][W], or f32 xf quantized here channel by
 * channel (qu8_quantize: scale xs, zero point xz, 0..qmax; xq is then unused); w [C][kh][kwg][4] int8,
 * wsum/ws/bias [C] (the qs8 GEMM's per-row operands), y [N][C][OH][OW] (QOut: f32 or uint8). scratch,
 * the thread's own: the Hp x Wp plane, then (kxk) kh * kwg vectors, then (xf) one channel's bytes and
 * 16. The threads claim the channels (cuvil_chunks). */
INLINE void qs8_dwconv_body_x8_3x3s2(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
  uint8_t* plane = scratch;
  (void)kh; (void)kw;
  const int KH = 3, KWG = 1;
  v128_t wv[3];
  uint8_t* buf = plane + (((size_t)Hp * Wp + 15) & ~(size_t)15);
  const uint8_t zp = (uint8_t)xz[0];
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1, filled = 0; cuvil_chunk(&d, &c0, &c1);) {
    if (!filled++) __builtin_memset(plane, zp, (size_t)Hp * Wp);  /* each thread its own plane */
    for (int nci = c0; nci < c1; nci++) {
      const int n = nci / C, c = nci % C;
      const size_t nc = ((size_t)n * C + c) * H * W;
      if (xf) qu8_quantize(H * W, xf + nc, buf, xs, xz, qmax);
      qdw_fill_plane(plane, xf ? buf : xq + nc, H, W, pt, pl, pr, Wp, zp);
      const int8_t* wc = w + (size_t)c * KH * KWG * 4;
      for (int i = 0; i < KH * KWG; i++) wv[i] = wasm_v128_load32_splat(wc + 4 * i);
      const v128_t zs = wasm_i32x4_splat(xz[0] * wsum[c]), sc = VSPLAT(ws[c] * xs[0]), b = VSPLAT(bias[c]);
      const QOut yc = qo_at(y, ((size_t)n * C + c) * OH * OW);
      int oy = 0;
      for (; oy < OH; oy++)
        qdw_row_s2_x8(plane + (size_t)oy * sh * Wp, dh * Wp, wv, KH, KWG, sw, dw, OW,
                      qo_at(yc, (size_t)oy * OW), zs, sc, b, act);
    }
  }
}

/* 3x3s2, 8-bit activations: qs8_dwconv_body with the common activations' kinds constant (ACT_SPECIALIZED). */
KERNEL void qs8_dwconv_x8_3x3s2(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
#define QS8_DW(a) qs8_dwconv_body_x8_3x3s2(xf, xq, N, C, H, W, w, wsum, ws, bias, xs, xz, qmax, y, OH, OW, kh, kw, \
                                           sh, sw, dh, dw, pt, pl, pr, Hp, Wp, scratch, a, tid, nt)
  ACT_SPECIALIZED(act, QS8_DW);
#undef QS8_DW
}
/* Whole tensor, 5x5s1, 8-bit activations: uint8 xq [N][C][H][W], or f32 xf quantized here channel by
 * channel (qu8_quantize: scale xs, zero point xz, 0..qmax; xq is then unused); w [C][kh][kwg][4] int8,
 * wsum/ws/bias [C] (the qs8 GEMM's per-row operands), y [N][C][OH][OW] (QOut: f32 or uint8). scratch,
 * the thread's own: the Hp x Wp plane, then (kxk) kh * kwg vectors, then (xf) one channel's bytes and
 * 16. The threads claim the channels (cuvil_chunks). */
INLINE void qs8_dwconv_body_x8_5x5s1(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
  uint8_t* plane = scratch;
  (void)kh; (void)kw;
  const int KH = 5, KWG = 2;
  v128_t wv[10];
  uint8_t* buf = plane + (((size_t)Hp * Wp + 15) & ~(size_t)15);
  const uint8_t zp = (uint8_t)xz[0];
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1, filled = 0; cuvil_chunk(&d, &c0, &c1);) {
    if (!filled++) __builtin_memset(plane, zp, (size_t)Hp * Wp);  /* each thread its own plane */
    for (int nci = c0; nci < c1; nci++) {
      const int n = nci / C, c = nci % C;
      const size_t nc = ((size_t)n * C + c) * H * W;
      if (xf) qu8_quantize(H * W, xf + nc, buf, xs, xz, qmax);
      qdw_fill_plane(plane, xf ? buf : xq + nc, H, W, pt, pl, pr, Wp, zp);
      const int8_t* wc = w + (size_t)c * KH * KWG * 4;
      for (int i = 0; i < KH * KWG; i++) wv[i] = wasm_v128_load32_splat(wc + 4 * i);
      const v128_t zs = wasm_i32x4_splat(xz[0] * wsum[c]), sc = VSPLAT(ws[c] * xs[0]), b = VSPLAT(bias[c]);
      const QOut yc = qo_at(y, ((size_t)n * C + c) * OH * OW);
      int oy = 0;
      if (sh == 1 && dh == 1)  /* rows in pairs, each input row read once for both */
        for (; oy + 2 <= OH; oy += 2)
          qdw_rows2_s1_x8(plane + (size_t)oy * Wp, Wp, wv, KH, KWG, OW, qo_at(yc, (size_t)oy * OW),
                          qo_at(yc, (size_t)(oy + 1) * OW), zs, sc, b, act);
      for (; oy < OH; oy++)
        qdw_row_s1_x8(plane + (size_t)oy * sh * Wp, dh * Wp, wv, KH, KWG, sw, dw, OW,
                      qo_at(yc, (size_t)oy * OW), zs, sc, b, act);
    }
  }
}

/* 5x5s1, 8-bit activations: qs8_dwconv_body with the common activations' kinds constant (ACT_SPECIALIZED). */
KERNEL void qs8_dwconv_x8_5x5s1(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
#define QS8_DW(a) qs8_dwconv_body_x8_5x5s1(xf, xq, N, C, H, W, w, wsum, ws, bias, xs, xz, qmax, y, OH, OW, kh, kw, \
                                           sh, sw, dh, dw, pt, pl, pr, Hp, Wp, scratch, a, tid, nt)
  ACT_SPECIALIZED(act, QS8_DW);
#undef QS8_DW
}
/* Whole tensor, 5x5s2, 8-bit activations: uint8 xq [N][C][H][W], or f32 xf quantized here channel by
 * channel (qu8_quantize: scale xs, zero point xz, 0..qmax; xq is then unused); w [C][kh][kwg][4] int8,
 * wsum/ws/bias [C] (the qs8 GEMM's per-row operands), y [N][C][OH][OW] (QOut: f32 or uint8). scratch,
 * the thread's own: the Hp x Wp plane, then (kxk) kh * kwg vectors, then (xf) one channel's bytes and
 * 16. The threads claim the channels (cuvil_chunks). */
INLINE void qs8_dwconv_body_x8_5x5s2(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
  uint8_t* plane = scratch;
  (void)kh; (void)kw;
  const int KH = 5, KWG = 2;
  v128_t wv[10];
  uint8_t* buf = plane + (((size_t)Hp * Wp + 15) & ~(size_t)15);
  const uint8_t zp = (uint8_t)xz[0];
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1, filled = 0; cuvil_chunk(&d, &c0, &c1);) {
    if (!filled++) __builtin_memset(plane, zp, (size_t)Hp * Wp);  /* each thread its own plane */
    for (int nci = c0; nci < c1; nci++) {
      const int n = nci / C, c = nci % C;
      const size_t nc = ((size_t)n * C + c) * H * W;
      if (xf) qu8_quantize(H * W, xf + nc, buf, xs, xz, qmax);
      qdw_fill_plane(plane, xf ? buf : xq + nc, H, W, pt, pl, pr, Wp, zp);
      const int8_t* wc = w + (size_t)c * KH * KWG * 4;
      for (int i = 0; i < KH * KWG; i++) wv[i] = wasm_v128_load32_splat(wc + 4 * i);
      const v128_t zs = wasm_i32x4_splat(xz[0] * wsum[c]), sc = VSPLAT(ws[c] * xs[0]), b = VSPLAT(bias[c]);
      const QOut yc = qo_at(y, ((size_t)n * C + c) * OH * OW);
      int oy = 0;
      for (; oy < OH; oy++)
        qdw_row_s2_x8(plane + (size_t)oy * sh * Wp, dh * Wp, wv, KH, KWG, sw, dw, OW,
                      qo_at(yc, (size_t)oy * OW), zs, sc, b, act);
    }
  }
}

/* 5x5s2, 8-bit activations: qs8_dwconv_body with the common activations' kinds constant (ACT_SPECIALIZED). */
KERNEL void qs8_dwconv_x8_5x5s2(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
#define QS8_DW(a) qs8_dwconv_body_x8_5x5s2(xf, xq, N, C, H, W, w, wsum, ws, bias, xs, xz, qmax, y, OH, OW, kh, kw, \
                                           sh, sw, dh, dw, pt, pl, pr, Hp, Wp, scratch, a, tid, nt)
  ACT_SPECIALIZED(act, QS8_DW);
#undef QS8_DW
}
/* Whole tensor, kxks1, 8-bit activations: uint8 xq [N][C][H][W], or f32 xf quantized here channel by
 * channel (qu8_quantize: scale xs, zero point xz, 0..qmax; xq is then unused); w [C][kh][kwg][4] int8,
 * wsum/ws/bias [C] (the qs8 GEMM's per-row operands), y [N][C][OH][OW] (QOut: f32 or uint8). scratch,
 * the thread's own: the Hp x Wp plane, then (kxk) kh * kwg vectors, then (xf) one channel's bytes and
 * 16. The threads claim the channels (cuvil_chunks). */
INLINE void qs8_dwconv_body_x8_kxks1(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
  uint8_t* plane = scratch;
  const int KH = kh, KWG = (kw + 3) / 4;
  v128_t* wv = (v128_t*)(plane + (((size_t)Hp * Wp + 15) & ~(size_t)15));
  uint8_t* buf = (uint8_t*)(wv + KH * KWG);
  const uint8_t zp = (uint8_t)xz[0];
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1, filled = 0; cuvil_chunk(&d, &c0, &c1);) {
    if (!filled++) __builtin_memset(plane, zp, (size_t)Hp * Wp);  /* each thread its own plane */
    for (int nci = c0; nci < c1; nci++) {
      const int n = nci / C, c = nci % C;
      const size_t nc = ((size_t)n * C + c) * H * W;
      if (xf) qu8_quantize(H * W, xf + nc, buf, xs, xz, qmax);
      qdw_fill_plane(plane, xf ? buf : xq + nc, H, W, pt, pl, pr, Wp, zp);
      const int8_t* wc = w + (size_t)c * KH * KWG * 4;
      for (int i = 0; i < KH * KWG; i++) wv[i] = wasm_v128_load32_splat(wc + 4 * i);
      const v128_t zs = wasm_i32x4_splat(xz[0] * wsum[c]), sc = VSPLAT(ws[c] * xs[0]), b = VSPLAT(bias[c]);
      const QOut yc = qo_at(y, ((size_t)n * C + c) * OH * OW);
      int oy = 0;
      if (sh == 1 && dh == 1)  /* rows in pairs, each input row read once for both */
        for (; oy + 2 <= OH; oy += 2)
          qdw_rows2_s1_x8(plane + (size_t)oy * Wp, Wp, wv, KH, KWG, OW, qo_at(yc, (size_t)oy * OW),
                          qo_at(yc, (size_t)(oy + 1) * OW), zs, sc, b, act);
      for (; oy < OH; oy++)
        qdw_row_s1_x8(plane + (size_t)oy * sh * Wp, dh * Wp, wv, KH, KWG, sw, dw, OW,
                      qo_at(yc, (size_t)oy * OW), zs, sc, b, act);
    }
  }
}

/* kxks1, 8-bit activations: qs8_dwconv_body with the common activations' kinds constant (ACT_SPECIALIZED). */
KERNEL void qs8_dwconv_x8_kxks1(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
#define QS8_DW(a) qs8_dwconv_body_x8_kxks1(xf, xq, N, C, H, W, w, wsum, ws, bias, xs, xz, qmax, y, OH, OW, kh, kw, \
                                           sh, sw, dh, dw, pt, pl, pr, Hp, Wp, scratch, a, tid, nt)
  ACT_SPECIALIZED(act, QS8_DW);
#undef QS8_DW
}
/* Whole tensor, kxks2, 8-bit activations: uint8 xq [N][C][H][W], or f32 xf quantized here channel by
 * channel (qu8_quantize: scale xs, zero point xz, 0..qmax; xq is then unused); w [C][kh][kwg][4] int8,
 * wsum/ws/bias [C] (the qs8 GEMM's per-row operands), y [N][C][OH][OW] (QOut: f32 or uint8). scratch,
 * the thread's own: the Hp x Wp plane, then (kxk) kh * kwg vectors, then (xf) one channel's bytes and
 * 16. The threads claim the channels (cuvil_chunks). */
INLINE void qs8_dwconv_body_x8_kxks2(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
  uint8_t* plane = scratch;
  const int KH = kh, KWG = (kw + 3) / 4;
  v128_t* wv = (v128_t*)(plane + (((size_t)Hp * Wp + 15) & ~(size_t)15));
  uint8_t* buf = (uint8_t*)(wv + KH * KWG);
  const uint8_t zp = (uint8_t)xz[0];
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1, filled = 0; cuvil_chunk(&d, &c0, &c1);) {
    if (!filled++) __builtin_memset(plane, zp, (size_t)Hp * Wp);  /* each thread its own plane */
    for (int nci = c0; nci < c1; nci++) {
      const int n = nci / C, c = nci % C;
      const size_t nc = ((size_t)n * C + c) * H * W;
      if (xf) qu8_quantize(H * W, xf + nc, buf, xs, xz, qmax);
      qdw_fill_plane(plane, xf ? buf : xq + nc, H, W, pt, pl, pr, Wp, zp);
      const int8_t* wc = w + (size_t)c * KH * KWG * 4;
      for (int i = 0; i < KH * KWG; i++) wv[i] = wasm_v128_load32_splat(wc + 4 * i);
      const v128_t zs = wasm_i32x4_splat(xz[0] * wsum[c]), sc = VSPLAT(ws[c] * xs[0]), b = VSPLAT(bias[c]);
      const QOut yc = qo_at(y, ((size_t)n * C + c) * OH * OW);
      int oy = 0;
      for (; oy < OH; oy++)
        qdw_row_s2_x8(plane + (size_t)oy * sh * Wp, dh * Wp, wv, KH, KWG, sw, dw, OW,
                      qo_at(yc, (size_t)oy * OW), zs, sc, b, act);
    }
  }
}

/* kxks2, 8-bit activations: qs8_dwconv_body with the common activations' kinds constant (ACT_SPECIALIZED). */
KERNEL void qs8_dwconv_x8_kxks2(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
#define QS8_DW(a) qs8_dwconv_body_x8_kxks2(xf, xq, N, C, H, W, w, wsum, ws, bias, xs, xz, qmax, y, OH, OW, kh, kw, \
                                           sh, sw, dh, dw, pt, pl, pr, Hp, Wp, scratch, a, tid, nt)
  ACT_SPECIALIZED(act, QS8_DW);
#undef QS8_DW
}
/* Whole tensor, kxksN, 8-bit activations: uint8 xq [N][C][H][W], or f32 xf quantized here channel by
 * channel (qu8_quantize: scale xs, zero point xz, 0..qmax; xq is then unused); w [C][kh][kwg][4] int8,
 * wsum/ws/bias [C] (the qs8 GEMM's per-row operands), y [N][C][OH][OW] (QOut: f32 or uint8). scratch,
 * the thread's own: the Hp x Wp plane, then (kxk) kh * kwg vectors, then (xf) one channel's bytes and
 * 16. The threads claim the channels (cuvil_chunks). */
INLINE void qs8_dwconv_body_x8_kxksN(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
  uint8_t* plane = scratch;
  const int KH = kh, KWG = (kw + 3) / 4;
  v128_t* wv = (v128_t*)(plane + (((size_t)Hp * Wp + 15) & ~(size_t)15));
  uint8_t* buf = (uint8_t*)(wv + KH * KWG);
  const uint8_t zp = (uint8_t)xz[0];
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1, filled = 0; cuvil_chunk(&d, &c0, &c1);) {
    if (!filled++) __builtin_memset(plane, zp, (size_t)Hp * Wp);  /* each thread its own plane */
    for (int nci = c0; nci < c1; nci++) {
      const int n = nci / C, c = nci % C;
      const size_t nc = ((size_t)n * C + c) * H * W;
      if (xf) qu8_quantize(H * W, xf + nc, buf, xs, xz, qmax);
      qdw_fill_plane(plane, xf ? buf : xq + nc, H, W, pt, pl, pr, Wp, zp);
      const int8_t* wc = w + (size_t)c * KH * KWG * 4;
      for (int i = 0; i < KH * KWG; i++) wv[i] = wasm_v128_load32_splat(wc + 4 * i);
      const v128_t zs = wasm_i32x4_splat(xz[0] * wsum[c]), sc = VSPLAT(ws[c] * xs[0]), b = VSPLAT(bias[c]);
      const QOut yc = qo_at(y, ((size_t)n * C + c) * OH * OW);
      int oy = 0;
      for (; oy < OH; oy++)
        qdw_row_sN_x8(plane + (size_t)oy * sh * Wp, dh * Wp, wv, KH, KWG, sw, dw, OW,
                      qo_at(yc, (size_t)oy * OW), zs, sc, b, act);
    }
  }
}

/* kxksN, 8-bit activations: qs8_dwconv_body with the common activations' kinds constant (ACT_SPECIALIZED). */
KERNEL void qs8_dwconv_x8_kxksN(const float* xf, const uint8_t* xq, int N, int C, int H, int W,
                             const int8_t* w, const int32_t* wsum, const float* ws, const float* bias,
                             const float* xs, const int32_t* xz, int qmax, QOut y, int OH, int OW, int kh,
                             int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pr, int Hp, int Wp,
                             uint8_t* scratch, Act act, int tid, int nt) {
#define QS8_DW(a) qs8_dwconv_body_x8_kxksN(xf, xq, N, C, H, W, w, wsum, ws, bias, xs, xz, qmax, y, OH, OW, kh, kw, \
                                           sh, sw, dh, dw, pt, pl, pr, Hp, Wp, scratch, a, tid, nt)
  ACT_SPECIALIZED(act, QS8_DW);
#undef QS8_DW
}
