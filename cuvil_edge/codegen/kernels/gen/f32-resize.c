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

/* Bicubic over the last two dims of each plane, separable through one scratch row of W floats: per
 * output row, the 4 input rows (offsets iy, already times W) weighted by wy (both [OH][4]) are summed
 * into the row, then each output column gathers 4 taps of it: indices ix and weights wx, tap-major
 * ([4][OW]) so four output columns load as one vector per tap. */
KERNEL void f32_resize_bicubic(const float* x, float* y, int planes, int H, int W, int OH, int OW,
                               const int32_t* iy, const float* wy, const int32_t* ix, const float* wx,
                               float* row) {
  for (int p = 0; p < planes; p++, x += (size_t)H * W) {
    for (int oh = 0; oh < OH; oh++, y += OW) {
      const float* r0 = x + iy[4 * oh];
      const float* r1 = x + iy[4 * oh + 1];
      const float* r2 = x + iy[4 * oh + 2];
      const float* r3 = x + iy[4 * oh + 3];
      const float a0 = wy[4 * oh], a1 = wy[4 * oh + 1], a2 = wy[4 * oh + 2], a3 = wy[4 * oh + 3];
      int w = 0;
      for (; w + 4 <= W; w += 4) {
        v128_t s = wasm_f32x4_mul(VLOAD(r0 + w), VSPLAT(a0));
        s = VFMA(VLOAD(r1 + w), VSPLAT(a1), s);
        s = VFMA(VLOAD(r2 + w), VSPLAT(a2), s);
        VSTORE(row + w, VFMA(VLOAD(r3 + w), VSPLAT(a3), s));
      }
      for (; w < W; w++) row[w] = r0[w] * a0 + r1[w] * a1 + r2[w] * a2 + r3[w] * a3;
      int ow = 0;
      for (; ow + 4 <= OW; ow += 4) {
        v128_t s = wasm_f32x4_mul(f32_gather4(row, ix + ow), VLOAD(wx + ow));
        s = VFMA(f32_gather4(row, ix + OW + ow), VLOAD(wx + OW + ow), s);
        s = VFMA(f32_gather4(row, ix + 2 * OW + ow), VLOAD(wx + 2 * OW + ow), s);
        VSTORE(y + ow, VFMA(f32_gather4(row, ix + 3 * OW + ow), VLOAD(wx + 3 * OW + ow), s));
      }
      for (; ow < OW; ow++) {
        float s = 0.0f;
        for (int j = 0; j < 4; j++) s += row[ix[j * OW + ow]] * wx[j * OW + ow];
        y[ow] = s;
      }
    }
  }
}
