/* generated from templates/f32-mod.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* ONNX Mod: <code>_mod(a, b, floor_mod) per element, called from the C loops the ``mod`` op emits.
 *
 * Floats (C fmod: the sign of the dividend) are exact: r = |a| loses the largest a*2^k <= r
 * each step (Sterbenz: the subtraction is exact), so r halves per step and the loop ends within
 * the exponent range; 2^k scales go through multiplies by exact powers of two (subnormals too).
 * floor_mod (fmod=0) takes the sign of the divisor as numpy.mod does: a remainder of the other sign
 * gains the divisor (-3 mod inf = inf), a zero one takes the divisor's sign.
 * Integers: fmod=1 is C's %, fmod=0 takes the sign of the divisor; a zero divisor traps (onnxruntime
 * fails on it too).
 */
INLINE float f32_pow2(int k) {  /* 2^k for |k| <= 126 */
  union { uint32_t u; float f; } v = {(uint32_t)(k + 127) << 23};
  return v.f;
}

INLINE int f32_ilogb(float x) {  /* exponent of a finite x > 0 */
  union { float f; uint32_t u; } v = {x};
  const int e = (int)((v.u >> 23) & 255);
  if (e) return e - 127;
  v.f = x * f32_pow2(64);
  return (int)((v.u >> 23) & 255) - 127 - 64;
}

INLINE float f32_mod(float x, float y, int floor_mod) {
  float r = __builtin_fabsf(x);
  const float a = __builtin_fabsf(y);
  if (!(a > 0) || !(r < __builtin_inff())) return __builtin_nanf("");  /* y 0 or nan, x inf or nan */
  while (r >= a) {
    int k = f32_ilogb(r) - f32_ilogb(a);
    float d = a;
    for (; k > 100; k -= 100) d *= f32_pow2(100);
    d *= f32_pow2(k);
    if (d > r) d *= (float)0.5;
    r -= d;
  }
  r = __builtin_copysignf(r, x);
  if (floor_mod) r = r != 0 ? ((r < 0) != (y < 0) ? r + y : r) : __builtin_copysignf(0, y);
  return r;
}

INLINE double f64_pow2(int k) {  /* 2^k for |k| <= 1022 */
  union { uint64_t u; double f; } v = {(uint64_t)(k + 1023) << 52};
  return v.f;
}

INLINE int f64_ilogb(double x) {  /* exponent of a finite x > 0 */
  union { double f; uint64_t u; } v = {x};
  const int e = (int)((v.u >> 52) & 2047);
  if (e) return e - 1023;
  v.f = x * f64_pow2(64);
  return (int)((v.u >> 52) & 2047) - 1023 - 64;
}

INLINE double f64_mod(double x, double y, int floor_mod) {
  double r = __builtin_fabs(x);
  const double a = __builtin_fabs(y);
  if (!(a > 0) || !(r < __builtin_inf())) return __builtin_nan("");  /* y 0 or nan, x inf or nan */
  while (r >= a) {
    int k = f64_ilogb(r) - f64_ilogb(a);
    double d = a;
    for (; k > 100; k -= 100) d *= f64_pow2(100);
    d *= f64_pow2(k);
    if (d > r) d *= (double)0.5;
    r -= d;
  }
  r = __builtin_copysign(r, x);
  if (floor_mod) r = r != 0 ? ((r < 0) != (y < 0) ? r + y : r) : __builtin_copysign(0, y);
  return r;
}

INLINE int8_t i8_mod(int8_t a, int8_t b, int floor_mod) {
  if (b == 0) __builtin_trap();
  int8_t r = (int8_t)(a % b);
  if (floor_mod && r != 0 && (r < 0) != (b < 0)) r = (int8_t)(r + b);
  return r;
}

INLINE uint8_t u8_mod(uint8_t a, uint8_t b, int floor_mod) {
  if (b == 0) __builtin_trap();
  uint8_t r = (uint8_t)(a % b);
  return r;
}

INLINE int16_t i16_mod(int16_t a, int16_t b, int floor_mod) {
  if (b == 0) __builtin_trap();
  int16_t r = (int16_t)(a % b);
  if (floor_mod && r != 0 && (r < 0) != (b < 0)) r = (int16_t)(r + b);
  return r;
}

INLINE uint16_t u16_mod(uint16_t a, uint16_t b, int floor_mod) {
  if (b == 0) __builtin_trap();
  uint16_t r = (uint16_t)(a % b);
  return r;
}

INLINE int32_t i32_mod(int32_t a, int32_t b, int floor_mod) {
  if (b == 0) __builtin_trap();
  int32_t r = (int32_t)(a % b);
  if (floor_mod && r != 0 && (r < 0) != (b < 0)) r = (int32_t)(r + b);
  return r;
}

INLINE uint32_t u32_mod(uint32_t a, uint32_t b, int floor_mod) {
  if (b == 0) __builtin_trap();
  uint32_t r = (uint32_t)(a % b);
  return r;
}

INLINE int64_t i64_mod(int64_t a, int64_t b, int floor_mod) {
  if (b == 0) __builtin_trap();
  int64_t r = (int64_t)(a % b);
  if (floor_mod && r != 0 && (r < 0) != (b < 0)) r = (int64_t)(r + b);
  return r;
}

INLINE uint64_t u64_mod(uint64_t a, uint64_t b, int floor_mod) {
  if (b == 0) __builtin_trap();
  uint64_t r = (uint64_t)(a % b);
  return r;
}

