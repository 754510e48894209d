/* generated from templates/f32-resize.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* Resize kernels (nearest runs as x32_gather_nd in x32-movement).
 *
 * Bilinear over the last two dims of each plane from build-time tables: row offsets ih0/ih1
 * (already times W) with weight lh per output row, column indices iw0/iw1 with weight lw per output
 * column. Four output columns at a time: gather the 2x2 neighbours, two horizontal lerps, one vertical.
 */
INLINE v128_t f32_gather4(const float* p, const int32_t* idx) {
  return wasm_f32x4_make(p[idx[0]], p[idx[1]], p[idx[2]], p[idx[3]]);
}

KERNEL void f32_resize_bilinear(const float* x, float* y, int planes, int H, int W, int OH, int OW,
                                const int32_t* ih0, const int32_t* ih1, const float* lh,
                                const int32_t* iw0, const int32_t* iw1, const float* lw) {
  for (int p = 0; p < planes; p++, x += (size_t)H * W) {
    for (int oh = 0; oh < OH; oh++, y += OW) {
      const float* r0 = x + ih0[oh];
      const float* r1 = x + ih1[oh];
      const v128_t a = VSPLAT(lh[oh]);
      int ow = 0;
      for (; ow + 4 <= OW; ow += 4) {
        const v128_t b = VLOAD(lw + ow);
        const v128_t x00 = f32_gather4(r0, iw0 + ow), x01 = f32_gather4(r0, iw1 + ow);
        const v128_t x10 = f32_gather4(r1, iw0 + ow), x11 = f32_gather4(r1, iw1 + ow);
        const v128_t top = VFMA(wasm_f32x4_sub(x01, x00), b, x00);
        const v128_t bot = VFMA(wasm_f32x4_sub(x11, x10), b, x10);
        VSTORE(y + ow, VFMA(wasm_f32x4_sub(bot, top), a, top));
      }
      for (; ow < OW; ow++) {
        const float top = r0[iw0[ow]] + (r0[iw1[ow]] - r0[iw0[ow]]) * lw[ow];
        const float bot = r1[iw0[ow]] + (r1[iw1[ow]] - r1[iw0[ow]]) * lw[ow];
        y[ow] = top + (bot - top) * lh[oh];
      }
    }
  }
}

/* K-tap filters over the last two dims of each plane (bicubic: 4 taps; antialiased linear or cubic:
 * the filter stretched over more), separable through one scratch row of W floats: per output row, the
 * KH input rows (offsets iy, already times W) weighted by wy (both [OH][KH]) are summed into the row,
 * then each output column gathers KW taps of it: indices ix and weights wx, tap-major ([KW][OW]) so
 * four output columns load as one vector per tap. */
KERNEL void f32_resize_taps(const float* x, float* y, int planes, int H, int W, int OH, int OW,
                            int KH, const int32_t* iy, const float* wy,
                            int KW, const int32_t* ix, const float* wx, float* row) {
  for (int p = 0; p < planes; p++, x += (size_t)H * W) {
    for (int oh = 0; oh < OH; oh++, y += OW) {
      const int32_t* ry = iy + (size_t)KH * oh;
      const float* ay = wy + (size_t)KH * oh;
      int w = 0;
      for (; w + 4 <= W; w += 4) {
        v128_t s = wasm_f32x4_mul(VLOAD(x + ry[0] + w), VSPLAT(ay[0]));
        for (int j = 1; j < KH; j++) s = VFMA(VLOAD(x + ry[j] + w), VSPLAT(ay[j]), s);
        VSTORE(row + w, s);
      }
      for (; w < W; w++) {
        float s = 0.0f;
        for (int j = 0; j < KH; j++) s += x[ry[j] + w] * ay[j];
        row[w] = s;
      }
      int ow = 0;
      for (; ow + 4 <= OW; ow += 4) {
        v128_t s = wasm_f32x4_mul(f32_gather4(row, ix + ow), VLOAD(wx + ow));
        for (int j = 1; j < KW; j++) s = VFMA(f32_gather4(row, ix + j * OW + ow), VLOAD(wx + j * OW + ow), s);
        VSTORE(y + ow, s);
      }
      for (; ow < OW; ow++) {
        float s = 0.0f;
        for (int j = 0; j < KW; j++) s += row[ix[j * OW + ow]] * wx[j * OW + ow];
        y[ow] = s;
      }
    }
  }
}
