/* generated from templates/qf16-cvt.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* fp16 storage: weights kept as IEEE half in the weights blob, widened to f32 before the f32 kernel.
 *
 * Exact for every finite half (normals and subnormals): the 15 magnitude bits shifted into an f32's
 * exponent/mantissa give 2^-112 times the value (wasm keeps subnormals), and one multiply by 2^112
 * restores it; the sign is or-ed back. Weights never hold inf/NaN, which this does not map.
 */
INLINE v128_t f16x4_to_f32(v128_t h) {
  const v128_t mag = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x7FFF)), 13);
  const v128_t sign = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x8000)), 16);
  return wasm_v128_or(wasm_f32x4_mul(mag, VSPLAT(5.192296858534828e+33f)), sign);
}

KERNEL void f16_f32_vcvt(int n, const uint16_t* x, float* y) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const v128_t h = VLOAD(x + i);
    VSTORE(y + i, f16x4_to_f32(wasm_u32x4_extend_low_u16x8(h)));
    VSTORE(y + i + 4, f16x4_to_f32(wasm_u32x4_extend_high_u16x8(h)));
  }
  for (; i < n; i++) y[i] = wasm_f32x4_extract_lane(f16x4_to_f32(wasm_i32x4_splat(x[i])), 0);
}
