/* generated from templates/f32-mod.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* ONNX Mod: <code>_mod(a, b) per element, called from the C loops the ``mod`` op emits.
 *
 * Floats (fmod=1, C fmod: the sign of the dividend) are exact: r = |a| loses the largest a*2^k <= r
 * each step (Sterbenz: the subtraction is exact), so r halves per step and the loop ends within
 * the exponent range; 2^k scales go through multiplies by exact powers of two (subnormals too).
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

INLINE float f32_mod(float x, float y) {
  float r = __builtin_fabsf(x);
  const float a = __builtin_fabsf(y);
  if (!(a > 0) || !(r < __builtin_inff())) return __builtin_nanf("");
  while (r >= a) {
    int k = f32_ilogb(r) - f32_ilogb(a);
    float d = a;
    for (; k > 100; k -= 100) d *= f32_pow2(100);
    d *= f32_pow2(k);
    if (d > r) d *= (float)0.5;
    r -= d;
  }
  return __builtin_copysignf(r, x);
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

INLINE double f64_mod(double x, double y) {
  double r = __builtin_fabs(x);
  const double a = __builtin_fabs(y);
  if (!(a > 0) || !(r < __builtin_inf())) return __builtin_nan("");
  while (r >= a) {
    int k = f64_ilogb(r) - f64_ilogb(a);
    double d = a;
    for (; k > 100; k -= 100) d *= f64_pow2(100);
    d *= f64_pow2(k);
    if (d > r) d *= (double)0.5;
    r -= d;
  }
  return __builtin_copysign(r, x);
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

INLINE int32_t i32_mod(int32_t a, int32_t b, int floor_mod) {
  if (b == 0) __builtin_trap();
  int32_t r = (int32_t)(a % b);
  if (floor_mod && r != 0 && (r < 0) != (b < 0)) r = (int32_t)(r + b);
  return r;
}

INLINE int64_t i64_mod(int64_t a, int64_t b, int floor_mod) {
  if (b == 0) __builtin_trap();
  int64_t r = (int64_t)(a % b);
  if (floor_mod && r != 0 && (r < 0) != (b < 0)) r = (int64_t)(r + b);
  return r;
}

