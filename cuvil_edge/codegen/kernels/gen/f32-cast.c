/* generated from templates/f32-cast.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* Element type conversions at run time: <src>_<dst>_vcvt(n, x, y), C semantics (float -> int truncates
 * toward zero, as ONNX Cast does); bool is one byte, 0 or 1. Plain loops: clang vectorises them. */
KERNEL void f32_i32_vcvt(int n, const float* x, int32_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int32_t)x[i];
}

KERNEL void f32_i64_vcvt(int n, const float* x, int64_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int64_t)x[i];
}

KERNEL void f32_i8_vcvt(int n, const float* x, int8_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int8_t)x[i];
}

KERNEL void f32_u8_vcvt(int n, const float* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint8_t)x[i];
}

KERNEL void f32_b_vcvt(int n, const float* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = x[i] != 0;
}

KERNEL void i32_f32_vcvt(int n, const int32_t* x, float* y) {
  for (int i = 0; i < n; i++) y[i] = (float)x[i];
}

KERNEL void i32_i64_vcvt(int n, const int32_t* x, int64_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int64_t)x[i];
}

KERNEL void i32_i8_vcvt(int n, const int32_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int8_t)x[i];
}

KERNEL void i32_u8_vcvt(int n, const int32_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint8_t)x[i];
}

KERNEL void i32_b_vcvt(int n, const int32_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = x[i] != 0;
}

KERNEL void i64_f32_vcvt(int n, const int64_t* x, float* y) {
  for (int i = 0; i < n; i++) y[i] = (float)x[i];
}

KERNEL void i64_i32_vcvt(int n, const int64_t* x, int32_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int32_t)x[i];
}

KERNEL void i64_i8_vcvt(int n, const int64_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int8_t)x[i];
}

KERNEL void i64_u8_vcvt(int n, const int64_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint8_t)x[i];
}

KERNEL void i64_b_vcvt(int n, const int64_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = x[i] != 0;
}

KERNEL void i8_f32_vcvt(int n, const int8_t* x, float* y) {
  for (int i = 0; i < n; i++) y[i] = (float)x[i];
}

KERNEL void i8_i32_vcvt(int n, const int8_t* x, int32_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int32_t)x[i];
}

KERNEL void i8_i64_vcvt(int n, const int8_t* x, int64_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int64_t)x[i];
}

KERNEL void i8_u8_vcvt(int n, const int8_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint8_t)x[i];
}

KERNEL void i8_b_vcvt(int n, const int8_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = x[i] != 0;
}

KERNEL void u8_f32_vcvt(int n, const uint8_t* x, float* y) {
  for (int i = 0; i < n; i++) y[i] = (float)x[i];
}

KERNEL void u8_i32_vcvt(int n, const uint8_t* x, int32_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int32_t)x[i];
}

KERNEL void u8_i64_vcvt(int n, const uint8_t* x, int64_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int64_t)x[i];
}

KERNEL void u8_i8_vcvt(int n, const uint8_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int8_t)x[i];
}

KERNEL void u8_b_vcvt(int n, const uint8_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = x[i] != 0;
}

/* IEEE half (code h: the ONNX float16 tensors of fp16 graphs; "f16" kernels elsewhere are fp16-stored
 * weights). float -> half rounds to nearest even: the exponent is rebiased and 13 mantissa bits rounded
 * by integer add (a carry into the exponent is the right result), magnitudes from 65520 up become inf,
 * values below 2^-14 round as integer multiples of 2^-24 (subnormals), NaN stays NaN (quiet). */
INLINE uint16_t f32_to_h(float f) {
  union { float f; uint32_t u; } v = {f};
  const uint32_t sign = (v.u >> 16) & 0x8000u, a = v.u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);
  if (a < 0x38800000u) {
    union { uint32_t u; float f; } m = {a};
    return (uint16_t)(sign | (uint32_t)__builtin_roundevenf(m.f * 16777216.0f));
  }
  const uint32_t r = a - 0x38000000u;
  return (uint16_t)(sign | ((r + 0xFFFu + ((r >> 13) & 1u)) >> 13));
}

INLINE float h_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  union { uint32_t u; float f; } v;
  if (e == 0) {
    v.f = (float)m * 5.9604644775390625e-8f;  /* m * 2^-24, exact */
    v.u |= sign;
  } else {
    v.u = sign | (e == 0x1Fu ? 0x7F800000u : (e + 112u) << 23) | (m << 13);
  }
  return v.f;
}

KERNEL void f32_h_vcvt(int n, const float* x, uint16_t* y) {
  for (int i = 0; i < n; i++) y[i] = f32_to_h(x[i]);
}

KERNEL void h_f32_vcvt(int n, const uint16_t* x, float* y) {
  for (int i = 0; i < n; i++) y[i] = h_to_f32(x[i]);
}

/* x rounded to the nearest half, kept as float (the value h_to_f32(f32_to_h(x)) has; a NaN keeps its
 * payload): the mantissa rounds to 10 bits to nearest even in place, magnitudes below 2^-14 to a multiple
 * of 2^-24 by adding and taking away 0.5 (whose ulp that is), from 65520 up to inf. */
INLINE v128_t f32x4_roundh(v128_t x) {
  const v128_t signbit = wasm_i32x4_splat((int32_t)0x80000000u);
  const v128_t a = wasm_v128_andnot(x, signbit);
  const v128_t lsb = wasm_v128_and(wasm_u32x4_shr(a, 13), wasm_i32x4_splat(1));
  v128_t r = wasm_v128_and(wasm_i32x4_add(a, wasm_i32x4_add(lsb, wasm_i32x4_splat(0xFFF))),
                           wasm_i32x4_splat(~0x1FFF));
  const v128_t sub = wasm_f32x4_sub(wasm_f32x4_add(a, VSPLAT(0.5f)), VSPLAT(0.5f));
  r = wasm_v128_bitselect(sub, r, wasm_i32x4_lt(a, wasm_i32x4_splat(0x38800000)));
  r = wasm_v128_bitselect(wasm_i32x4_splat(0x7F800000), r, wasm_i32x4_ge(a, wasm_i32x4_splat(0x477FF000)));
  r = wasm_v128_bitselect(a, r, wasm_i32x4_gt(a, wasm_i32x4_splat(0x7F800000)));
  return wasm_v128_or(r, wasm_v128_and(x, signbit));
}

/* y = x rounded to the nearest half, kept as float: fp16 graphs compute in f32 between these. */
KERNEL void f32_vroundh(int n, const float* x, float* y) {
  int i = 0;
  for (; i + 4 <= n; i += 4) VSTORE(y + i, f32x4_roundh(VLOAD(x + i)));
  for (; i < n; i++) y[i] = wasm_f32x4_extract_lane(f32x4_roundh(VSPLAT(x[i])), 0);
}
