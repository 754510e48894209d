/* generated from templates/f64-pow.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* ONNX Pow off the float32 vector kernels: <code>_pow(a, b) per element, called from the C loops the
 * ``pow_loop`` op emits, on every integer type and float64 (float32 runs v_pow in f32-binary).
 *
 * Integers are exact: square-and-multiply in uint64_t, which wraps as the type does once truncated (as
 * numpy's integer power); a negative exponent gives 1 / a^-b truncated: 1 for a = 1, +-1 for a = -1,
 * else 0. float64: an integral |b| < 2^32 squares and multiplies too, so integer powers of integers are
 * exact while they fit 53 bits (what a following cast to an integer type needs), other b take
 * exp(b log|a|) from f64-math; a negative a takes the sign of an odd b and gives nan for a fraction.
 */
INLINE int8_t i8_pow(int8_t a, int8_t b) {
  if (b < 0) return (int8_t)(a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0);
  uint64_t r = 1, x = (uint64_t)a;
  for (uint64_t n = (uint64_t)b; n; n >>= 1, x *= x)
    if (n & 1) r *= x;
  return (int8_t)r;
}

INLINE uint8_t u8_pow(uint8_t a, uint8_t b) {
  uint64_t r = 1, x = (uint64_t)a;
  for (uint64_t n = (uint64_t)b; n; n >>= 1, x *= x)
    if (n & 1) r *= x;
  return (uint8_t)r;
}

INLINE int16_t i16_pow(int16_t a, int16_t b) {
  if (b < 0) return (int16_t)(a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0);
  uint64_t r = 1, x = (uint64_t)a;
  for (uint64_t n = (uint64_t)b; n; n >>= 1, x *= x)
    if (n & 1) r *= x;
  return (int16_t)r;
}

INLINE uint16_t u16_pow(uint16_t a, uint16_t b) {
  uint64_t r = 1, x = (uint64_t)a;
  for (uint64_t n = (uint64_t)b; n; n >>= 1, x *= x)
    if (n & 1) r *= x;
  return (uint16_t)r;
}

INLINE int32_t i32_pow(int32_t a, int32_t b) {
  if (b < 0) return (int32_t)(a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0);
  uint64_t r = 1, x = (uint64_t)a;
  for (uint64_t n = (uint64_t)b; n; n >>= 1, x *= x)
    if (n & 1) r *= x;
  return (int32_t)r;
}

INLINE uint32_t u32_pow(uint32_t a, uint32_t b) {
  uint64_t r = 1, x = (uint64_t)a;
  for (uint64_t n = (uint64_t)b; n; n >>= 1, x *= x)
    if (n & 1) r *= x;
  return (uint32_t)r;
}

INLINE int64_t i64_pow(int64_t a, int64_t b) {
  if (b < 0) return (int64_t)(a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0);
  uint64_t r = 1, x = (uint64_t)a;
  for (uint64_t n = (uint64_t)b; n; n >>= 1, x *= x)
    if (n & 1) r *= x;
  return (int64_t)r;
}

INLINE uint64_t u64_pow(uint64_t a, uint64_t b) {
  uint64_t r = 1, x = (uint64_t)a;
  for (uint64_t n = (uint64_t)b; n; n >>= 1, x *= x)
    if (n & 1) r *= x;
  return (uint64_t)r;
}

INLINE double f64_pow(double a, double b) {
  if (b == 0 || a == 1) return 1.0;
  const int integral = __builtin_floor(b) == b, odd = integral && __builtin_floor(b * 0.5) != b * 0.5;
  if (a < 0 && !integral) return __builtin_nan("");
  const double x = __builtin_fabs(a);
  double r = 1.0;
  if (integral && __builtin_fabs(b) < 4294967296.0) {
    double p = x;
    for (uint64_t n = (uint64_t)__builtin_fabs(b); n; n >>= 1, p *= p)
      if (n & 1) r *= p;
    if (b < 0) r = 1.0 / r;
  } else if (x != 1) {  /* (-1)^+-inf stays 1 */
    r = f64_exp(b * f64_log(x));
  }
  return __builtin_signbit(a) && odd ? -r : r;
}
