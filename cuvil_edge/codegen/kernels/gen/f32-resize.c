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
