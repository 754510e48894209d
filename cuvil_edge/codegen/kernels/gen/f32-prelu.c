/* generated from templates/f32-prelu.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* PReLU with a constant slope per channel: y = x < 0 ? x * slope : x, one multiply per negative element
 * in the vector and the scalar tail alike, so every split between threads gives the same bits.
 * f32_prelu_planes: planes [first, first + rows) of `inner` elements each, plane r using slope[r % C]
 * (the channel outside the plane: NCHW, or one slope for all with C = 1).
 * f32_prelu_rows: rows [first, first + rows) of C elements, element c using slope[c] (the channel
 * innermost). */

KERNEL void f32_prelu_planes(const float* x, float* y, int first, int rows, int C, int inner,
                             const float* slope) {
  for (int r = first; r < first + rows; r++) {
    const float s = slope[r % C];
    const v128_t vs = VSPLAT(s);
    const float* xp = x + (size_t)r * inner;
    float* yp = y + (size_t)r * inner;
    int i = 0;
    for (; i + 4 <= inner; i += 4) {
      const v128_t v = VLOAD(xp + i);
      VSTORE(yp + i, wasm_v128_bitselect(wasm_f32x4_mul(v, vs), v, wasm_f32x4_lt(v, VSPLAT(0.0f))));
    }
    for (; i < inner; i++) yp[i] = xp[i] < 0.0f ? xp[i] * s : xp[i];
  }
}

KERNEL void f32_prelu_rows(const float* x, float* y, int first, int rows, int C, const float* slope) {
  for (int r = first; r < first + rows; r++) {
    const float* xp = x + (size_t)r * C;
    float* yp = y + (size_t)r * C;
    int c = 0;
    for (; c + 4 <= C; c += 4) {
      const v128_t v = VLOAD(xp + c);
      VSTORE(yp + c, wasm_v128_bitselect(wasm_f32x4_mul(v, VLOAD(slope + c)), v,
                                         wasm_f32x4_lt(v, VSPLAT(0.0f))));
    }
    for (; c < C; c++) yp[c] = xp[c] < 0.0f ? xp[c] * slope[c] : xp[c];
  }
}
