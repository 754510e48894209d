/* generated from templates/f32-dwconv.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* f32 depthwise convolution (NCHW, depth multiplier 1): one plane per channel, direct, no im2col.
 *
 * Each output row is split into a left border, an interior where every horizontal tap is in bounds,
 * and a right border. The interior runs 4 output pixels per vector; rows whose vertical tap falls in
 * the padding are skipped, so padding costs nothing there. Input loads per tap, by width stride:
 *   s1: one unaligned vector load;  s2: two loads + even-lane shuffle;  sN: four scalar loads.
 * The 3x3 variants keep their 9 weights in registers (fully unrolled taps, no branches) on rows whose
 * taps are all inside the image; "kxk" (and 3x3 rows at the top/bottom edge) loop over taps.
 * Borders compute one pixel at a time with bounds checks (a few columns per row).
 */

/* One output pixel with full bounds checks (borders). */
INLINE float dw_pixel(const float* xc, int H, int W, const float* wc, int kh, int kw, int iy0, int ix0,
                      int dh, int dw, float acc) {
  for (int ky = 0; ky < kh; ky++) {
    const int iy = iy0 + ky * dh;
    if (iy < 0 || iy >= H) continue;
    for (int kx = 0; kx < kw; kx++) {
      const int ix = ix0 + kx * dw;
      if (ix >= 0 && ix < W) acc += xc[(size_t)iy * W + ix] * wc[ky * kw + kx];
    }
  }
  return acc;
}

INLINE float act_scalar(float v, Act act) {
  return wasm_f32x4_extract_lane(act_apply(VSPLAT(v), act), 0);
}

/* 4 consecutive output pixels' inputs for one tap, starting at input column ix (stride 1). */
INLINE v128_t dw_load_s1(const float* row, int ix, int sw) {
  (void)sw;
  return VLOAD(row + ix);
}

/* 4 consecutive output pixels' inputs for one tap, starting at input column ix (stride 2). */
INLINE v128_t dw_load_s2(const float* row, int ix, int sw) {
  (void)sw;
  return wasm_i32x4_shuffle(VLOAD(row + ix), VLOAD(row + ix + 4), 0, 2, 4, 6);
}

/* 4 consecutive output pixels' inputs for one tap, starting at input column ix (stride sw). */
INLINE v128_t dw_load_s0(const float* row, int ix, int sw) {
  return wasm_f32x4_make(row[ix], row[ix + sw], row[ix + 2 * sw], row[ix + 3 * sw]);
}

/* One tap for 4 outputs at input column ix: plain load inside the row, masked where the group
 * touches the horizontal padding (the load may read a few floats outside the row, never outside
 * linear memory: regions have guards). */
INLINE v128_t dw_taps1(const float* row, int ix, int sw, int W, int edge) {
  const v128_t v = dw_load_s1(row, ix, sw);
  return edge ? mask_columns(v, ix, sw, W) : v;
}

/* Output row oy, any taps (s1): 4 outputs per step, borders masked, taps in vertical padding
 * skipped. */
INLINE void dw_row_kxks1(const float* xc, int H, int W, const float* wc, int kh, int kw, int sw,
                          int dh, int dw, int iy0, int pl, int ox0, int ox1, int OW, float b, float* yr,
                          const Act* act) {
  for (int ox = 0; ox < OW; ox += 4) {
    const int ix0 = ox * sw - pl, edge = ox < ox0 || ox + 4 > ox1;
    v128_t acc = VSPLAT(b);
    for (int ky = 0; ky < kh; ky++) {
      const int iy = iy0 + ky * dh;
      if (iy < 0 || iy >= H) continue;
      const float* row = xc + (size_t)iy * W;
      for (int kx = 0; kx < kw; kx++)
        acc = VFMA(dw_taps1(row, ix0 + kx * dw, sw, W, edge), VSPLAT(wc[ky * kw + kx]), acc);
    }
    acc = act_apply(acc, *act);
    if (ox + 4 <= OW) VSTORE(yr + ox, acc); else store_partial(yr + ox, acc, OW - ox);
  }
}

/* Output row oy whose 3 tap rows are all inside the image (s1): weights in registers, 4 outputs
 * per step, borders masked. */
INLINE void dw_row_3x3s1(const float* xc, int W, const float* wc, int sw, int dh, int dw, int iy0,
                          int pl, int ox0, int ox1, int OW, float b, float* yr, const Act* act) {
  const float* row0 = xc + (size_t)(iy0 + 0 * dh) * W;
  const float* row1 = xc + (size_t)(iy0 + 1 * dh) * W;
  const float* row2 = xc + (size_t)(iy0 + 2 * dh) * W;
  const v128_t w0 = VSPLAT(wc[0]);
  const v128_t w1 = VSPLAT(wc[1]);
  const v128_t w2 = VSPLAT(wc[2]);
  const v128_t w3 = VSPLAT(wc[3]);
  const v128_t w4 = VSPLAT(wc[4]);
  const v128_t w5 = VSPLAT(wc[5]);
  const v128_t w6 = VSPLAT(wc[6]);
  const v128_t w7 = VSPLAT(wc[7]);
  const v128_t w8 = VSPLAT(wc[8]);
  /* groups wholly inside [ox0, ox1) run without masks; the few at the borders with them */
  const int gi0 = (ox0 + 3) & ~3, gi1 = gi0 + ((ox1 - gi0) > 0 ? (ox1 - gi0) & ~3 : 0);
  for (int ox = gi0; ox < gi1; ox += 4) {
    const int ix0 = ox * sw - pl;
    v128_t acc = VSPLAT(b);
    acc = VFMA(dw_load_s1(row0, ix0 + 0 * dw, sw), w0, acc);
    acc = VFMA(dw_load_s1(row0, ix0 + 1 * dw, sw), w1, acc);
    acc = VFMA(dw_load_s1(row0, ix0 + 2 * dw, sw), w2, acc);
    acc = VFMA(dw_load_s1(row1, ix0 + 0 * dw, sw), w3, acc);
    acc = VFMA(dw_load_s1(row1, ix0 + 1 * dw, sw), w4, acc);
    acc = VFMA(dw_load_s1(row1, ix0 + 2 * dw, sw), w5, acc);
    acc = VFMA(dw_load_s1(row2, ix0 + 0 * dw, sw), w6, acc);
    acc = VFMA(dw_load_s1(row2, ix0 + 1 * dw, sw), w7, acc);
    acc = VFMA(dw_load_s1(row2, ix0 + 2 * dw, sw), w8, acc);
    VSTORE(yr + ox, act_apply(acc, *act));
  }
  for (int ox = 0; ox < OW; ox += 4) {
    if (ox == gi0 && gi1 > gi0) { ox = gi1 - 4; continue; }
    const int ix0 = ox * sw - pl;
    v128_t acc = VSPLAT(b);
    acc = VFMA(dw_taps1(row0, ix0 + 0 * dw, sw, W, 1), w0, acc);
    acc = VFMA(dw_taps1(row0, ix0 + 1 * dw, sw, W, 1), w1, acc);
    acc = VFMA(dw_taps1(row0, ix0 + 2 * dw, sw, W, 1), w2, acc);
    acc = VFMA(dw_taps1(row1, ix0 + 0 * dw, sw, W, 1), w3, acc);
    acc = VFMA(dw_taps1(row1, ix0 + 1 * dw, sw, W, 1), w4, acc);
    acc = VFMA(dw_taps1(row1, ix0 + 2 * dw, sw, W, 1), w5, acc);
    acc = VFMA(dw_taps1(row2, ix0 + 0 * dw, sw, W, 1), w6, acc);
    acc = VFMA(dw_taps1(row2, ix0 + 1 * dw, sw, W, 1), w7, acc);
    acc = VFMA(dw_taps1(row2, ix0 + 2 * dw, sw, W, 1), w8, acc);
    acc = act_apply(acc, *act);
    if (ox + 4 <= OW) VSTORE(yr + ox, acc); else store_partial(yr + ox, acc, OW - ox);
  }
}

/* One tap for 4 outputs at input column ix: plain load inside the row, masked where the group
 * touches the horizontal padding (the load may read a few floats outside the row, never outside
 * linear memory: regions have guards). */
INLINE v128_t dw_taps2(const float* row, int ix, int sw, int W, int edge) {
  const v128_t v = dw_load_s2(row, ix, sw);
  return edge ? mask_columns(v, ix, sw, W) : v;
}

/* Output row oy, any taps (s2): 4 outputs per step, borders masked, taps in vertical padding
 * skipped. */
INLINE void dw_row_kxks2(const float* xc, int H, int W, const float* wc, int kh, int kw, int sw,
                          int dh, int dw, int iy0, int pl, int ox0, int ox1, int OW, float b, float* yr,
                          const Act* act) {
  for (int ox = 0; ox < OW; ox += 4) {
    const int ix0 = ox * sw - pl, edge = ox < ox0 || ox + 4 > ox1;
    v128_t acc = VSPLAT(b);
    for (int ky = 0; ky < kh; ky++) {
      const int iy = iy0 + ky * dh;
      if (iy < 0 || iy >= H) continue;
      const float* row = xc + (size_t)iy * W;
      for (int kx = 0; kx < kw; kx++)
        acc = VFMA(dw_taps2(row, ix0 + kx * dw, sw, W, edge), VSPLAT(wc[ky * kw + kx]), acc);
    }
    acc = act_apply(acc, *act);
    if (ox + 4 <= OW) VSTORE(yr + ox, acc); else store_partial(yr + ox, acc, OW - ox);
  }
}

/* Output row oy whose 3 tap rows are all inside the image (s2): weights in registers, 4 outputs
 * per step, borders masked. */
INLINE void dw_row_3x3s2(const float* xc, int W, const float* wc, int sw, int dh, int dw, int iy0,
                          int pl, int ox0, int ox1, int OW, float b, float* yr, const Act* act) {
  const float* row0 = xc + (size_t)(iy0 + 0 * dh) * W;
  const float* row1 = xc + (size_t)(iy0 + 1 * dh) * W;
  const float* row2 = xc + (size_t)(iy0 + 2 * dh) * W;
  const v128_t w0 = VSPLAT(wc[0]);
  const v128_t w1 = VSPLAT(wc[1]);
  const v128_t w2 = VSPLAT(wc[2]);
  const v128_t w3 = VSPLAT(wc[3]);
  const v128_t w4 = VSPLAT(wc[4]);
  const v128_t w5 = VSPLAT(wc[5]);
  const v128_t w6 = VSPLAT(wc[6]);
  const v128_t w7 = VSPLAT(wc[7]);
  const v128_t w8 = VSPLAT(wc[8]);
  /* groups wholly inside [ox0, ox1) run without masks; the few at the borders with them */
  const int gi0 = (ox0 + 3) & ~3, gi1 = gi0 + ((ox1 - gi0) > 0 ? (ox1 - gi0) & ~3 : 0);
  for (int ox = gi0; ox < gi1; ox += 4) {
    const int ix0 = ox * sw - pl;
    v128_t acc = VSPLAT(b);
    acc = VFMA(dw_load_s2(row0, ix0 + 0 * dw, sw), w0, acc);
    acc = VFMA(dw_load_s2(row0, ix0 + 1 * dw, sw), w1, acc);
    acc = VFMA(dw_load_s2(row0, ix0 + 2 * dw, sw), w2, acc);
    acc = VFMA(dw_load_s2(row1, ix0 + 0 * dw, sw), w3, acc);
    acc = VFMA(dw_load_s2(row1, ix0 + 1 * dw, sw), w4, acc);
    acc = VFMA(dw_load_s2(row1, ix0 + 2 * dw, sw), w5, acc);
    acc = VFMA(dw_load_s2(row2, ix0 + 0 * dw, sw), w6, acc);
    acc = VFMA(dw_load_s2(row2, ix0 + 1 * dw, sw), w7, acc);
    acc = VFMA(dw_load_s2(row2, ix0 + 2 * dw, sw), w8, acc);
    VSTORE(yr + ox, act_apply(acc, *act));
  }
  for (int ox = 0; ox < OW; ox += 4) {
    if (ox == gi0 && gi1 > gi0) { ox = gi1 - 4; continue; }
    const int ix0 = ox * sw - pl;
    v128_t acc = VSPLAT(b);
    acc = VFMA(dw_taps2(row0, ix0 + 0 * dw, sw, W, 1), w0, acc);
    acc = VFMA(dw_taps2(row0, ix0 + 1 * dw, sw, W, 1), w1, acc);
    acc = VFMA(dw_taps2(row0, ix0 + 2 * dw, sw, W, 1), w2, acc);
    acc = VFMA(dw_taps2(row1, ix0 + 0 * dw, sw, W, 1), w3, acc);
    acc = VFMA(dw_taps2(row1, ix0 + 1 * dw, sw, W, 1), w4, acc);
    acc = VFMA(dw_taps2(row1, ix0 + 2 * dw, sw, W, 1), w5, acc);
    acc = VFMA(dw_taps2(row2, ix0 + 0 * dw, sw, W, 1), w6, acc);
    acc = VFMA(dw_taps2(row2, ix0 + 1 * dw, sw, W, 1), w7, acc);
    acc = VFMA(dw_taps2(row2, ix0 + 2 * dw, sw, W, 1), w8, acc);
    acc = act_apply(acc, *act);
    if (ox + 4 <= OW) VSTORE(yr + ox, acc); else store_partial(yr + ox, acc, OW - ox);
  }
}

/* Output row oy, any taps, any width stride: interior 4 outputs per step, borders per pixel. */
INLINE void dw_row_kxksN(const float* xc, int H, int W, const float* wc, int kh, int kw, int sw,
                          int dh, int dw, int iy0, int pl, int ox0, int ox1, int OW, float b, float* yr,
                          const Act* act) {
  int ox = 0;
  for (; ox < ox0; ox++)
    yr[ox] = act_scalar(dw_pixel(xc, H, W, wc, kh, kw, iy0, ox * sw - pl, dh, dw, b), *act);
  for (; ox + 4 <= ox1; ox += 4) {
    const int ix0 = ox * sw - pl;
    v128_t acc = VSPLAT(b);
    for (int ky = 0; ky < kh; ky++) {
      const int iy = iy0 + ky * dh;
      if (iy < 0 || iy >= H) continue;
      const float* row = xc + (size_t)iy * W;
      for (int kx = 0; kx < kw; kx++)
        acc = VFMA(dw_load_s0(row, ix0 + kx * dw, sw), VSPLAT(wc[ky * kw + kx]), acc);
    }
    VSTORE(yr + ox, act_apply(acc, *act));
  }
  for (; ox < OW; ox++)
    yr[ox] = act_scalar(dw_pixel(xc, H, W, wc, kh, kw, iy0, ox * sw - pl, dh, dw, b), *act);
}

/* Whole tensor, 3x3s1. w: [C][kh*kw]; bias: [C] or null. */
KERNEL void f32_dwconv_3x3s1(const float* x, int N, int C, int H, int W, const float* w,
                                 const float* bias, float* y, int OH, int OW, int kh, int kw, int sh,
                                 int sw, int dh, int dw, int pt, int pl, Act act, int tid, int nt) {
  /* interior columns [ox0, ox1): every tap of the pixel inside the row */
  const int span = (kw - 1) * dw + 1;
  int ox0 = (pl + sw - 1) / sw, ox1 = W - span + pl >= 0 ? (W - span + pl) / sw + 1 : 0;
  if (ox1 > OW) ox1 = OW;
  if (ox0 > ox1) ox0 = ox1;
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1; cuvil_chunk(&d, &c0, &c1);) {
    for (int nc = c0; nc < c1; nc++) {
      const int n = nc / C, c = nc % C;
      const float* xc = x + ((size_t)n * C + c) * H * W;
      const float* wc = w + (size_t)c * kh * kw;
      float* yc = y + ((size_t)n * C + c) * OH * OW;
      const float b = bias ? bias[c] : 0.0f;
      for (int oy = 0; oy < OH; oy++) {
        const int iy0 = oy * sh - pt;
        float* yr = yc + (size_t)oy * OW;
        if (iy0 >= 0 && iy0 + 2 * dh < H)
          dw_row_3x3s1(xc, W, wc, sw, dh, dw, iy0, pl, ox0, ox1, OW, b, yr, &act);
        else
        dw_row_kxks1(xc, H, W, wc, kh, kw, sw, dh, dw, iy0, pl, ox0, ox1, OW, b, yr, &act);
      }
    }
  }
}

/* Whole tensor, kxks1. w: [C][kh*kw]; bias: [C] or null. */
KERNEL void f32_dwconv_kxks1(const float* x, int N, int C, int H, int W, const float* w,
                                 const float* bias, float* y, int OH, int OW, int kh, int kw, int sh,
                                 int sw, int dh, int dw, int pt, int pl, Act act, int tid, int nt) {
  /* interior columns [ox0, ox1): every tap of the pixel inside the row */
  const int span = (kw - 1) * dw + 1;
  int ox0 = (pl + sw - 1) / sw, ox1 = W - span + pl >= 0 ? (W - span + pl) / sw + 1 : 0;
  if (ox1 > OW) ox1 = OW;
  if (ox0 > ox1) ox0 = ox1;
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1; cuvil_chunk(&d, &c0, &c1);) {
    for (int nc = c0; nc < c1; nc++) {
      const int n = nc / C, c = nc % C;
      const float* xc = x + ((size_t)n * C + c) * H * W;
      const float* wc = w + (size_t)c * kh * kw;
      float* yc = y + ((size_t)n * C + c) * OH * OW;
      const float b = bias ? bias[c] : 0.0f;
      for (int oy = 0; oy < OH; oy++) {
        const int iy0 = oy * sh - pt;
        float* yr = yc + (size_t)oy * OW;
        dw_row_kxks1(xc, H, W, wc, kh, kw, sw, dh, dw, iy0, pl, ox0, ox1, OW, b, yr, &act);
      }
    }
  }
}

/* Whole tensor, 3x3s2. w: [C][kh*kw]; bias: [C] or null. */
KERNEL void f32_dwconv_3x3s2(const float* x, int N, int C, int H, int W, const float* w,
                                 const float* bias, float* y, int OH, int OW, int kh, int kw, int sh,
                                 int sw, int dh, int dw, int pt, int pl, Act act, int tid, int nt) {
  /* interior columns [ox0, ox1): every tap of the pixel inside the row */
  const int span = (kw - 1) * dw + 1;
  int ox0 = (pl + sw - 1) / sw, ox1 = W - span + pl >= 0 ? (W - span + pl) / sw + 1 : 0;
  if (ox1 > OW) ox1 = OW;
  if (ox0 > ox1) ox0 = ox1;
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1; cuvil_chunk(&d, &c0, &c1);) {
    for (int nc = c0; nc < c1; nc++) {
      const int n = nc / C, c = nc % C;
      const float* xc = x + ((size_t)n * C + c) * H * W;
      const float* wc = w + (size_t)c * kh * kw;
      float* yc = y + ((size_t)n * C + c) * OH * OW;
      const float b = bias ? bias[c] : 0.0f;
      for (int oy = 0; oy < OH; oy++) {
        const int iy0 = oy * sh - pt;
        float* yr = yc + (size_t)oy * OW;
        if (iy0 >= 0 && iy0 + 2 * dh < H)
          dw_row_3x3s2(xc, W, wc, sw, dh, dw, iy0, pl, ox0, ox1, OW, b, yr, &act);
        else
        dw_row_kxks2(xc, H, W, wc, kh, kw, sw, dh, dw, iy0, pl, ox0, ox1, OW, b, yr, &act);
      }
    }
  }
}

/* Whole tensor, kxks2. w: [C][kh*kw]; bias: [C] or null. */
KERNEL void f32_dwconv_kxks2(const float* x, int N, int C, int H, int W, const float* w,
                                 const float* bias, float* y, int OH, int OW, int kh, int kw, int sh,
                                 int sw, int dh, int dw, int pt, int pl, Act act, int tid, int nt) {
  /* interior columns [ox0, ox1): every tap of the pixel inside the row */
  const int span = (kw - 1) * dw + 1;
  int ox0 = (pl + sw - 1) / sw, ox1 = W - span + pl >= 0 ? (W - span + pl) / sw + 1 : 0;
  if (ox1 > OW) ox1 = OW;
  if (ox0 > ox1) ox0 = ox1;
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1; cuvil_chunk(&d, &c0, &c1);) {
    for (int nc = c0; nc < c1; nc++) {
      const int n = nc / C, c = nc % C;
      const float* xc = x + ((size_t)n * C + c) * H * W;
      const float* wc = w + (size_t)c * kh * kw;
      float* yc = y + ((size_t)n * C + c) * OH * OW;
      const float b = bias ? bias[c] : 0.0f;
      for (int oy = 0; oy < OH; oy++) {
        const int iy0 = oy * sh - pt;
        float* yr = yc + (size_t)oy * OW;
        dw_row_kxks2(xc, H, W, wc, kh, kw, sw, dh, dw, iy0, pl, ox0, ox1, OW, b, yr, &act);
      }
    }
  }
}

/* Whole tensor, 3x3sN. w: [C][kh*kw]; bias: [C] or null. */
KERNEL void f32_dwconv_3x3sN(const float* x, int N, int C, int H, int W, const float* w,
                                 const float* bias, float* y, int OH, int OW, int kh, int kw, int sh,
                                 int sw, int dh, int dw, int pt, int pl, Act act, int tid, int nt) {
  /* interior columns [ox0, ox1): every tap of the pixel inside the row */
  const int span = (kw - 1) * dw + 1;
  int ox0 = (pl + sw - 1) / sw, ox1 = W - span + pl >= 0 ? (W - span + pl) / sw + 1 : 0;
  if (ox1 > OW) ox1 = OW;
  if (ox0 > ox1) ox0 = ox1;
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1; cuvil_chunk(&d, &c0, &c1);) {
    for (int nc = c0; nc < c1; nc++) {
      const int n = nc / C, c = nc % C;
      const float* xc = x + ((size_t)n * C + c) * H * W;
      const float* wc = w + (size_t)c * kh * kw;
      float* yc = y + ((size_t)n * C + c) * OH * OW;
      const float b = bias ? bias[c] : 0.0f;
      for (int oy = 0; oy < OH; oy++) {
        const int iy0 = oy * sh - pt;
        float* yr = yc + (size_t)oy * OW;
        dw_row_kxksN(xc, H, W, wc, kh, kw, sw, dh, dw, iy0, pl, ox0, ox1, OW, b, yr, &act);
      }
    }
  }
}

/* Whole tensor, kxksN. w: [C][kh*kw]; bias: [C] or null. */
KERNEL void f32_dwconv_kxksN(const float* x, int N, int C, int H, int W, const float* w,
                                 const float* bias, float* y, int OH, int OW, int kh, int kw, int sh,
                                 int sw, int dh, int dw, int pt, int pl, Act act, int tid, int nt) {
  /* interior columns [ox0, ox1): every tap of the pixel inside the row */
  const int span = (kw - 1) * dw + 1;
  int ox0 = (pl + sw - 1) / sw, ox1 = W - span + pl >= 0 ? (W - span + pl) / sw + 1 : 0;
  if (ox1 > OW) ox1 = OW;
  if (ox0 > ox1) ox0 = ox1;
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1; cuvil_chunk(&d, &c0, &c1);) {
    for (int nc = c0; nc < c1; nc++) {
      const int n = nc / C, c = nc % C;
      const float* xc = x + ((size_t)n * C + c) * H * W;
      const float* wc = w + (size_t)c * kh * kw;
      float* yc = y + ((size_t)n * C + c) * OH * OW;
      const float b = bias ? bias[c] : 0.0f;
      for (int oy = 0; oy < OH; oy++) {
        const int iy0 = oy * sh - pt;
        float* yr = yc + (size_t)oy * OW;
        dw_row_kxksN(xc, H, W, wc, kh, kw, sw, dh, dw, iy0, pl, ox0, ox1, OW, b, yr, &act);
      }
    }
  }
}

/* 3x3, dilation 1, width stride 1: each channel plane is first copied into a zero-bordered scratch
 * plane (Hp x Wp, Wp a multiple of 4), so every output row runs unmasked with its 9 weights in
 * registers; the borders are zeroed once and stay zero (each channel rewrites only the interior). */
INLINE void f32_dwconv_body_3x3p_s1(const float* x, int N, int C, int H, int W, const float* w,
                                       const float* bias, float* y, int OH, int OW, int sh, int pt, int pl,
                                       int Hp, int Wp, float* plane, Act act, int tid, int nt) {
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1, filled = 0; cuvil_chunk(&d, &c0, &c1);) {
    if (!filled++) fill_f32(plane, 0.0f, Hp * Wp);  /* each thread its own plane */
    for (int nc = c0; nc < c1; nc++) {
      const int n = nc / C, c = nc % C;
      const float* xc = x + ((size_t)n * C + c) * H * W;
      float* yc = y + ((size_t)n * C + c) * OH * OW;
      for (int iy = 0; iy < H; iy++) copy_f32(plane + (size_t)(iy + pt) * Wp + pl, xc + (size_t)iy * W, W);
      const float* wc = w + (size_t)c * 9;
      const v128_t w0 = VSPLAT(wc[0]);
      const v128_t w1 = VSPLAT(wc[1]);
      const v128_t w2 = VSPLAT(wc[2]);
      const v128_t w3 = VSPLAT(wc[3]);
      const v128_t w4 = VSPLAT(wc[4]);
      const v128_t w5 = VSPLAT(wc[5]);
      const v128_t w6 = VSPLAT(wc[6]);
      const v128_t w7 = VSPLAT(wc[7]);
      const v128_t w8 = VSPLAT(wc[8]);
      const v128_t b = VSPLAT(bias ? bias[c] : 0.0f);
      for (int oy = 0; oy < OH; oy++) {
        const float* row0 = plane + (size_t)oy * sh * Wp;
        const float* row1 = row0 + Wp;
        const float* row2 = row1 + Wp;
        float* yr = yc + (size_t)oy * OW;
        for (int ox = 0; ox < OW; ox += 4) {
          const int ix = ox * 1;
          /* one accumulator per tap row: three short FMA chains instead of one chain of nine (the
           * FMA latency, not the loads, bounds this loop) */
          v128_t a0 = b;
          v128_t a1 = wasm_f32x4_const_splat(0.0f);
          v128_t a2 = wasm_f32x4_const_splat(0.0f);
          a0 = VFMA(dw_load_s1(row0, ix + 0, 1), w0, a0);
          a1 = VFMA(dw_load_s1(row1, ix + 0, 1), w3, a1);
          a2 = VFMA(dw_load_s1(row2, ix + 0, 1), w6, a2);
          a0 = VFMA(dw_load_s1(row0, ix + 1, 1), w1, a0);
          a1 = VFMA(dw_load_s1(row1, ix + 1, 1), w4, a1);
          a2 = VFMA(dw_load_s1(row2, ix + 1, 1), w7, a2);
          a0 = VFMA(dw_load_s1(row0, ix + 2, 1), w2, a0);
          a1 = VFMA(dw_load_s1(row1, ix + 2, 1), w5, a1);
          a2 = VFMA(dw_load_s1(row2, ix + 2, 1), w8, a2);
          v128_t acc = act_apply(wasm_f32x4_add(wasm_f32x4_add(a0, a1), a2), act);
          if (ox + 4 <= OW) VSTORE(yr + ox, acc); else store_partial(yr + ox, acc, OW - ox);
        }
      }
    }
  }
}

/* f32_dwconv_body_3x3p_s1 with the common activations' kinds constant (ACT_SPECIALIZED): a switch per 4
 * outputs was 3.5% of fp32 MobileNetV2. */
KERNEL void f32_dwconv_3x3p_s1(const float* x, int N, int C, int H, int W, const float* w,
                                  const float* bias, float* y, int OH, int OW, int sh, int pt, int pl,
                                  int Hp, int Wp, float* plane, Act act, int tid, int nt) {
#define F32_DW(a) f32_dwconv_body_3x3p_s1(x, N, C, H, W, w, bias, y, OH, OW, sh, pt, pl, Hp, Wp, plane, a, \
                                             tid, nt)
  ACT_SPECIALIZED(act, F32_DW);
#undef F32_DW
}

/* 3x3, dilation 1, width stride 2: each channel plane is first copied into a zero-bordered scratch
 * plane (Hp x Wp, Wp a multiple of 4), so every output row runs unmasked with its 9 weights in
 * registers; the borders are zeroed once and stay zero (each channel rewrites only the interior). */
INLINE void f32_dwconv_body_3x3p_s2(const float* x, int N, int C, int H, int W, const float* w,
                                       const float* bias, float* y, int OH, int OW, int sh, int pt, int pl,
                                       int Hp, int Wp, float* plane, Act act, int tid, int nt) {
  CuvilChunks d = cuvil_chunks(N * C, 1, tid, nt);  /* threads claim the (image, channel) planes */
  for (int c0, c1, filled = 0; cuvil_chunk(&d, &c0, &c1);) {
    if (!filled++) fill_f32(plane, 0.0f, Hp * Wp);  /* each thread its own plane */
    for (int nc = c0; nc < c1; nc++) {
      const int n = nc / C, c = nc % C;
      const float* xc = x + ((size_t)n * C + c) * H * W;
      float* yc = y + ((size_t)n * C + c) * OH * OW;
      for (int iy = 0; iy < H; iy++) copy_f32(plane + (size_t)(iy + pt) * Wp + pl, xc + (size_t)iy * W, W);
      const float* wc = w + (size_t)c * 9;
      const v128_t w0 = VSPLAT(wc[0]);
      const v128_t w1 = VSPLAT(wc[1]);
      const v128_t w2 = VSPLAT(wc[2]);
      const v128_t w3 = VSPLAT(wc[3]);
      const v128_t w4 = VSPLAT(wc[4]);
      const v128_t w5 = VSPLAT(wc[5]);
      const v128_t w6 = VSPLAT(wc[6]);
      const v128_t w7 = VSPLAT(wc[7]);
      const v128_t w8 = VSPLAT(wc[8]);
      const v128_t b = VSPLAT(bias ? bias[c] : 0.0f);
      for (int oy = 0; oy < OH; oy++) {
        const float* row0 = plane + (size_t)oy * sh * Wp;
        const float* row1 = row0 + Wp;
        const float* row2 = row1 + Wp;
        float* yr = yc + (size_t)oy * OW;
        for (int ox = 0; ox < OW; ox += 4) {
          const int ix = ox * 2;
          /* one accumulator per tap row: three short FMA chains instead of one chain of nine (the
           * FMA latency, not the loads, bounds this loop) */
          v128_t a0 = b;
          v128_t a1 = wasm_f32x4_const_splat(0.0f);
          v128_t a2 = wasm_f32x4_const_splat(0.0f);
          a0 = VFMA(dw_load_s2(row0, ix + 0, 2), w0, a0);
          a1 = VFMA(dw_load_s2(row1, ix + 0, 2), w3, a1);
          a2 = VFMA(dw_load_s2(row2, ix + 0, 2), w6, a2);
          a0 = VFMA(dw_load_s2(row0, ix + 1, 2), w1, a0);
          a1 = VFMA(dw_load_s2(row1, ix + 1, 2), w4, a1);
          a2 = VFMA(dw_load_s2(row2, ix + 1, 2), w7, a2);
          a0 = VFMA(dw_load_s2(row0, ix + 2, 2), w2, a0);
          a1 = VFMA(dw_load_s2(row1, ix + 2, 2), w5, a1);
          a2 = VFMA(dw_load_s2(row2, ix + 2, 2), w8, a2);
          v128_t acc = act_apply(wasm_f32x4_add(wasm_f32x4_add(a0, a1), a2), act);
          if (ox + 4 <= OW) VSTORE(yr + ox, acc); else store_partial(yr + ox, acc, OW - ox);
        }
      }
    }
  }
}

/* f32_dwconv_body_3x3p_s2 with the common activations' kinds constant (ACT_SPECIALIZED): a switch per 4
 * outputs was 3.5% of fp32 MobileNetV2. */
KERNEL void f32_dwconv_3x3p_s2(const float* x, int N, int C, int H, int W, const float* w,
                                  const float* bias, float* y, int OH, int OW, int sh, int pt, int pl,
                                  int Hp, int Wp, float* plane, Act act, int tid, int nt) {
#define F32_DW(a) f32_dwconv_body_3x3p_s2(x, N, C, H, W, w, bias, y, OH, OW, sh, pt, pl, Hp, Wp, plane, a, \
                                             tid, nt)
  ACT_SPECIALIZED(act, F32_DW);
#undef F32_DW
}

