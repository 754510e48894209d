/* generated from templates/f32-pool.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* Pooling kernels (NCHW; 1D runs with H = 1).
 *
 * One output row is the accumulator: each valid kernel tap adds (or maxes) a shifted input row into
 * it. Output columns [ow0, ow1) read only in-bounds taps (computed at build time) and run 4 at a time
 * for strides 1 and 2; the border columns and other strides check bounds per element. Average pools
 * scale by build-time reciprocal counts inv_h[oh] * inv_w[ow] (count_include_pad is in the tables).
 * u8_maxpool2d is the max pool of quantized tensors held as uint8 (int8 + 128 keeps order, so the max of
 * the bytes is the byte of the max: LiteRT's int8 result exactly), 16 columns at a time.
 */

KERNEL void f32_maxpool2d(const float* x, float* y, int planes, int H, int W, int OH, int OW, int kh,
                           int kw, int sh, int sw, int dh, int dw, int pt, int pl, int ow0, int ow1,
                           const float* inv_h, const float* inv_w) {
  for (int p = 0; p < planes; p++, x += (size_t)H * W, y += (size_t)OH * OW) {
    for (int oh = 0; oh < OH; oh++) {
      float* yr = y + (size_t)oh * OW;
      fill_f32(yr, -__builtin_inff(), OW);
      for (int i = 0; i < kh; i++) {
        const int ih = oh * sh - pt + i * dh;
        if (ih < 0 || ih >= H) continue;
        const float* xr = x + (size_t)ih * W;
        for (int j = 0; j < kw; j++) {
          const int off = j * dw - pl; /* input column of output column ow is ow * sw + off */
          int ow = 0;
          for (; ow < ow0; ow++) {
            const int iw = ow * sw + off;
            if (iw >= 0 && iw < W) { const float a = yr[ow], v = xr[iw]; yr[ow] = (v > a ? v : a); }
          }
          const float* xp = xr + off;
          if (sw == 1) {
            for (; ow + 4 <= ow1; ow += 4) VSTORE(yr + ow, VMAX(VLOAD(yr + ow), VLOAD(xp + ow)));
          } else if (sw == 2) {
            for (; ow + 4 <= ow1; ow += 4) {
              const v128_t lo = VLOAD(xp + 2 * ow), hi = VLOAD(xp + 2 * ow + 4);
              VSTORE(yr + ow, VMAX(VLOAD(yr + ow), wasm_i32x4_shuffle(lo, hi, 0, 2, 4, 6)));
            }
          }
          for (; ow < OW; ow++) {
            const int iw = ow * sw + off;
            if (iw >= 0 && iw < W) { const float a = yr[ow], v = xr[iw]; yr[ow] = (v > a ? v : a); }
          }
        }
      }
      (void)inv_h; (void)inv_w;
    }
  }
}

/* one value per plane: the max of its n elements */
KERNEL void f32_global_maxpool(const float* x, float* y, int planes, int n) {
  for (int p = 0; p < planes; p++, x += n) {
    v128_t acc = VSPLAT(-__builtin_inff());
    int i = 0;
    for (; i + 4 <= n; i += 4) acc = VMAX(acc, VLOAD(x + i));
    float t[4];
    VSTORE(t, acc);
    float a = t[0];
    for (int k = 1; k < 4; k++) { const float v = t[k]; a = (v > a ? v : a); }
    for (; i < n; i++) { const float v = x[i]; a = (v > a ? v : a); }
    y[p] = a;
  }
}

KERNEL void f32_avgpool2d(const float* x, float* y, int planes, int H, int W, int OH, int OW, int kh,
                           int kw, int sh, int sw, int dh, int dw, int pt, int pl, int ow0, int ow1,
                           const float* inv_h, const float* inv_w) {
  for (int p = 0; p < planes; p++, x += (size_t)H * W, y += (size_t)OH * OW) {
    for (int oh = 0; oh < OH; oh++) {
      float* yr = y + (size_t)oh * OW;
      fill_f32(yr, 0.0f, OW);
      for (int i = 0; i < kh; i++) {
        const int ih = oh * sh - pt + i * dh;
        if (ih < 0 || ih >= H) continue;
        const float* xr = x + (size_t)ih * W;
        for (int j = 0; j < kw; j++) {
          const int off = j * dw - pl; /* input column of output column ow is ow * sw + off */
          int ow = 0;
          for (; ow < ow0; ow++) {
            const int iw = ow * sw + off;
            if (iw >= 0 && iw < W) { const float a = yr[ow], v = xr[iw]; yr[ow] = (a + v); }
          }
          const float* xp = xr + off;
          if (sw == 1) {
            for (; ow + 4 <= ow1; ow += 4) VSTORE(yr + ow, wasm_f32x4_add(VLOAD(yr + ow), VLOAD(xp + ow)));
          } else if (sw == 2) {
            for (; ow + 4 <= ow1; ow += 4) {
              const v128_t lo = VLOAD(xp + 2 * ow), hi = VLOAD(xp + 2 * ow + 4);
              VSTORE(yr + ow, wasm_f32x4_add(VLOAD(yr + ow), wasm_i32x4_shuffle(lo, hi, 0, 2, 4, 6)));
            }
          }
          for (; ow < OW; ow++) {
            const int iw = ow * sw + off;
            if (iw >= 0 && iw < W) { const float a = yr[ow], v = xr[iw]; yr[ow] = (a + v); }
          }
        }
      }
      const v128_t sh4 = VSPLAT(inv_h[oh]);
      int ow = 0;
      for (; ow + 4 <= OW; ow += 4)
        VSTORE(yr + ow, wasm_f32x4_mul(VLOAD(yr + ow), wasm_f32x4_mul(sh4, VLOAD(inv_w + ow))));
      for (; ow < OW; ow++) yr[ow] *= inv_h[oh] * inv_w[ow];
    }
  }
}

/* one value per plane: the avg of its n elements */
KERNEL void f32_global_avgpool(const float* x, float* y, int planes, int n) {
  for (int p = 0; p < planes; p++, x += n) {
    v128_t acc = VSPLAT(0.0f);
    int i = 0;
    for (; i + 4 <= n; i += 4) acc = wasm_f32x4_add(acc, VLOAD(x + i));
    float t[4];
    VSTORE(t, acc);
    float a = t[0];
    for (int k = 1; k < 4; k++) { const float v = t[k]; a = (a + v); }
    for (; i < n; i++) { const float v = x[i]; a = (a + v); }
    y[p] = a / (float)n;
  }
}

KERNEL void u8_maxpool2d(const uint8_t* x, uint8_t* y, int planes, int H, int W, int OH, int OW, int kh,
                         int kw, int sh, int sw, int dh, int dw, int pt, int pl, int ow0, int ow1,
                         const float* inv_h, const float* inv_w) {
  (void)inv_h; (void)inv_w;
  for (int p = 0; p < planes; p++, x += (size_t)H * W, y += (size_t)OH * OW) {
    for (int oh = 0; oh < OH; oh++) {
      uint8_t* yr = y + (size_t)oh * OW;
      __builtin_memset(yr, 0, (size_t)OW);
      for (int i = 0; i < kh; i++) {
        const int ih = oh * sh - pt + i * dh;
        if (ih < 0 || ih >= H) continue;
        const uint8_t* xr = x + (size_t)ih * W;
        for (int j = 0; j < kw; j++) {
          const int off = j * dw - pl;
          int ow = 0;
          for (; ow < ow0; ow++) {
            const int iw = ow * sw + off;
            if (iw >= 0 && iw < W && xr[iw] > yr[ow]) yr[ow] = xr[iw];
          }
          const uint8_t* xp = xr + off;
          if (sw == 1) {
            for (; ow + 16 <= ow1; ow += 16) VSTORE(yr + ow, wasm_u8x16_max(VLOAD(yr + ow), VLOAD(xp + ow)));
          } else if (sw == 2) {
            for (; ow + 16 <= ow1; ow += 16) {
              const v128_t lo = VLOAD(xp + 2 * ow), hi = VLOAD(xp + 2 * ow + 16);
              const v128_t even = wasm_i8x16_shuffle(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22,
                                                     24, 26, 28, 30);
              VSTORE(yr + ow, wasm_u8x16_max(VLOAD(yr + ow), even));
            }
          }
          for (; ow < OW; ow++) {
            const int iw = ow * sw + off;
            if (iw >= 0 && iw < W && xr[iw] > yr[ow]) yr[ow] = xr[iw];
          }
        }
      }
    }
  }
}
