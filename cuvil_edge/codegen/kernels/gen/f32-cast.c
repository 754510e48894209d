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

KERNEL void f32_f64_vcvt(int n, const float* x, double* y) {
  for (int i = 0; i < n; i++) y[i] = (double)x[i];
}

KERNEL void f32_i16_vcvt(int n, const float* x, int16_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int16_t)x[i];
}

KERNEL void f32_u16_vcvt(int n, const float* x, uint16_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint16_t)x[i];
}

KERNEL void f32_u32_vcvt(int n, const float* x, uint32_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint32_t)x[i];
}

KERNEL void f32_u64_vcvt(int n, const float* x, uint64_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint64_t)x[i];
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

KERNEL void i32_f64_vcvt(int n, const int32_t* x, double* y) {
  for (int i = 0; i < n; i++) y[i] = (double)x[i];
}

KERNEL void i32_i16_vcvt(int n, const int32_t* x, int16_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int16_t)x[i];
}

KERNEL void i32_u16_vcvt(int n, const int32_t* x, uint16_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint16_t)x[i];
}

KERNEL void i32_u32_vcvt(int n, const int32_t* x, uint32_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint32_t)x[i];
}

KERNEL void i32_u64_vcvt(int n, const int32_t* x, uint64_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint64_t)x[i];
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

KERNEL void i64_f64_vcvt(int n, const int64_t* x, double* y) {
  for (int i = 0; i < n; i++) y[i] = (double)x[i];
}

KERNEL void i64_i16_vcvt(int n, const int64_t* x, int16_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int16_t)x[i];
}

KERNEL void i64_u16_vcvt(int n, const int64_t* x, uint16_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint16_t)x[i];
}

KERNEL void i64_u32_vcvt(int n, const int64_t* x, uint32_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint32_t)x[i];
}

KERNEL void i64_u64_vcvt(int n, const int64_t* x, uint64_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint64_t)x[i];
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

KERNEL void i8_f64_vcvt(int n, const int8_t* x, double* y) {
  for (int i = 0; i < n; i++) y[i] = (double)x[i];
}

KERNEL void i8_i16_vcvt(int n, const int8_t* x, int16_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int16_t)x[i];
}

KERNEL void i8_u16_vcvt(int n, const int8_t* x, uint16_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint16_t)x[i];
}

KERNEL void i8_u32_vcvt(int n, const int8_t* x, uint32_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint32_t)x[i];
}

KERNEL void i8_u64_vcvt(int n, const int8_t* x, uint64_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint64_t)x[i];
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

KERNEL void u8_f64_vcvt(int n, const uint8_t* x, double* y) {
  for (int i = 0; i < n; i++) y[i] = (double)x[i];
}

KERNEL void u8_i16_vcvt(int n, const uint8_t* x, int16_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int16_t)x[i];
}

KERNEL void u8_u16_vcvt(int n, const uint8_t* x, uint16_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint16_t)x[i];
}

KERNEL void u8_u32_vcvt(int n, const uint8_t* x, uint32_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint32_t)x[i];
}

KERNEL void u8_u64_vcvt(int n, const uint8_t* x, uint64_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint64_t)x[i];
}

KERNEL void u8_b_vcvt(int n, const uint8_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = x[i] != 0;
}

KERNEL void f64_f32_vcvt(int n, const double* x, float* y) {
  for (int i = 0; i < n; i++) y[i] = (float)x[i];
}

KERNEL void f64_i32_vcvt(int n, const double* x, int32_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int32_t)x[i];
}

KERNEL void f64_i64_vcvt(int n, const double* x, int64_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int64_t)x[i];
}

KERNEL void f64_i8_vcvt(int n, const double* x, int8_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int8_t)x[i];
}

KERNEL void f64_u8_vcvt(int n, const double* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint8_t)x[i];
}

KERNEL void f64_i16_vcvt(int n, const double* x, int16_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int16_t)x[i];
}

KERNEL void f64_u16_vcvt(int n, const double* x, uint16_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint16_t)x[i];
}

KERNEL void f64_u32_vcvt(int n, const double* x, uint32_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint32_t)x[i];
}

KERNEL void f64_u64_vcvt(int n, const double* x, uint64_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint64_t)x[i];
}

KERNEL void f64_b_vcvt(int n, const double* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = x[i] != 0;
}

KERNEL void i16_f32_vcvt(int n, const int16_t* x, float* y) {
  for (int i = 0; i < n; i++) y[i] = (float)x[i];
}

KERNEL void i16_i32_vcvt(int n, const int16_t* x, int32_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int32_t)x[i];
}

KERNEL void i16_i64_vcvt(int n, const int16_t* x, int64_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int64_t)x[i];
}

KERNEL void i16_i8_vcvt(int n, const int16_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int8_t)x[i];
}

KERNEL void i16_u8_vcvt(int n, const int16_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint8_t)x[i];
}

KERNEL void i16_f64_vcvt(int n, const int16_t* x, double* y) {
  for (int i = 0; i < n; i++) y[i] = (double)x[i];
}

KERNEL void i16_u16_vcvt(int n, const int16_t* x, uint16_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint16_t)x[i];
}

KERNEL void i16_u32_vcvt(int n, const int16_t* x, uint32_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint32_t)x[i];
}

KERNEL void i16_u64_vcvt(int n, const int16_t* x, uint64_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint64_t)x[i];
}

KERNEL void i16_b_vcvt(int n, const int16_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = x[i] != 0;
}

KERNEL void u16_f32_vcvt(int n, const uint16_t* x, float* y) {
  for (int i = 0; i < n; i++) y[i] = (float)x[i];
}

KERNEL void u16_i32_vcvt(int n, const uint16_t* x, int32_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int32_t)x[i];
}

KERNEL void u16_i64_vcvt(int n, const uint16_t* x, int64_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int64_t)x[i];
}

KERNEL void u16_i8_vcvt(int n, const uint16_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int8_t)x[i];
}

KERNEL void u16_u8_vcvt(int n, const uint16_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint8_t)x[i];
}

KERNEL void u16_f64_vcvt(int n, const uint16_t* x, double* y) {
  for (int i = 0; i < n; i++) y[i] = (double)x[i];
}

KERNEL void u16_i16_vcvt(int n, const uint16_t* x, int16_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int16_t)x[i];
}

KERNEL void u16_u32_vcvt(int n, const uint16_t* x, uint32_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint32_t)x[i];
}

KERNEL void u16_u64_vcvt(int n, const uint16_t* x, uint64_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint64_t)x[i];
}

KERNEL void u16_b_vcvt(int n, const uint16_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = x[i] != 0;
}

KERNEL void u32_f32_vcvt(int n, const uint32_t* x, float* y) {
  for (int i = 0; i < n; i++) y[i] = (float)x[i];
}

KERNEL void u32_i32_vcvt(int n, const uint32_t* x, int32_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int32_t)x[i];
}

KERNEL void u32_i64_vcvt(int n, const uint32_t* x, int64_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int64_t)x[i];
}

KERNEL void u32_i8_vcvt(int n, const uint32_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int8_t)x[i];
}

KERNEL void u32_u8_vcvt(int n, const uint32_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint8_t)x[i];
}

KERNEL void u32_f64_vcvt(int n, const uint32_t* x, double* y) {
  for (int i = 0; i < n; i++) y[i] = (double)x[i];
}

KERNEL void u32_i16_vcvt(int n, const uint32_t* x, int16_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int16_t)x[i];
}

KERNEL void u32_u16_vcvt(int n, const uint32_t* x, uint16_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint16_t)x[i];
}

KERNEL void u32_u64_vcvt(int n, const uint32_t* x, uint64_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint64_t)x[i];
}

KERNEL void u32_b_vcvt(int n, const uint32_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = x[i] != 0;
}

KERNEL void u64_f32_vcvt(int n, const uint64_t* x, float* y) {
  for (int i = 0; i < n; i++) y[i] = (float)x[i];
}

KERNEL void u64_i32_vcvt(int n, const uint64_t* x, int32_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int32_t)x[i];
}

KERNEL void u64_i64_vcvt(int n, const uint64_t* x, int64_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int64_t)x[i];
}

KERNEL void u64_i8_vcvt(int n, const uint64_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int8_t)x[i];
}

KERNEL void u64_u8_vcvt(int n, const uint64_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint8_t)x[i];
}

KERNEL void u64_f64_vcvt(int n, const uint64_t* x, double* y) {
  for (int i = 0; i < n; i++) y[i] = (double)x[i];
}

KERNEL void u64_i16_vcvt(int n, const uint64_t* x, int16_t* y) {
  for (int i = 0; i < n; i++) y[i] = (int16_t)x[i];
}

KERNEL void u64_u16_vcvt(int n, const uint64_t* x, uint16_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint16_t)x[i];
}

KERNEL void u64_u32_vcvt(int n, const uint64_t* x, uint32_t* y) {
  for (int i = 0; i < n; i++) y[i] = (uint32_t)x[i];
}

KERNEL void u64_b_vcvt(int n, const uint64_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = x[i] != 0;
}

/* int4, uint4, int2, uint2 (ONNX packs them; a module holds one per byte, the signed ones sign-extended):
 * any integer, or a float truncated toward zero through int64, wraps to the low bits, as ml_dtypes
 * converts (a float outside int64, NaN included, becomes 0: x86's int64 of it has no low bits set);
 * <t>_<held>_vcvt reads one as the byte type it is held as in between. */
KERNEL void f32_i4_vcvt(int n, const float* x, int8_t* y) {
  for (int i = 0; i < n; i++) {
    const int64_t v = x[i] >= -9223372036854775808.0 && x[i] < 9223372036854775808.0 ? (int64_t)x[i] : 0;
    const uint8_t low = (uint8_t)((uint8_t)v << 4);
    y[i] = (int8_t)((int8_t)low >> 4);
  }
}

KERNEL void f32_u4_vcvt(int n, const float* x, uint8_t* y) {
  for (int i = 0; i < n; i++) {
    const int64_t v = x[i] >= -9223372036854775808.0 && x[i] < 9223372036854775808.0 ? (int64_t)x[i] : 0;
    const uint8_t low = (uint8_t)((uint8_t)v << 4);
    y[i] = (uint8_t)((uint8_t)low >> 4);
  }
}

KERNEL void f32_i2_vcvt(int n, const float* x, int8_t* y) {
  for (int i = 0; i < n; i++) {
    const int64_t v = x[i] >= -9223372036854775808.0 && x[i] < 9223372036854775808.0 ? (int64_t)x[i] : 0;
    const uint8_t low = (uint8_t)((uint8_t)v << 6);
    y[i] = (int8_t)((int8_t)low >> 6);
  }
}

KERNEL void f32_u2_vcvt(int n, const float* x, uint8_t* y) {
  for (int i = 0; i < n; i++) {
    const int64_t v = x[i] >= -9223372036854775808.0 && x[i] < 9223372036854775808.0 ? (int64_t)x[i] : 0;
    const uint8_t low = (uint8_t)((uint8_t)v << 6);
    y[i] = (uint8_t)((uint8_t)low >> 6);
  }
}

KERNEL void i32_i4_vcvt(int n, const int32_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) {
    const int32_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 4);
    y[i] = (int8_t)((int8_t)low >> 4);
  }
}

KERNEL void i32_u4_vcvt(int n, const int32_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) {
    const int32_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 4);
    y[i] = (uint8_t)((uint8_t)low >> 4);
  }
}

KERNEL void i32_i2_vcvt(int n, const int32_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) {
    const int32_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 6);
    y[i] = (int8_t)((int8_t)low >> 6);
  }
}

KERNEL void i32_u2_vcvt(int n, const int32_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) {
    const int32_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 6);
    y[i] = (uint8_t)((uint8_t)low >> 6);
  }
}

KERNEL void i64_i4_vcvt(int n, const int64_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) {
    const int64_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 4);
    y[i] = (int8_t)((int8_t)low >> 4);
  }
}

KERNEL void i64_u4_vcvt(int n, const int64_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) {
    const int64_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 4);
    y[i] = (uint8_t)((uint8_t)low >> 4);
  }
}

KERNEL void i64_i2_vcvt(int n, const int64_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) {
    const int64_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 6);
    y[i] = (int8_t)((int8_t)low >> 6);
  }
}

KERNEL void i64_u2_vcvt(int n, const int64_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) {
    const int64_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 6);
    y[i] = (uint8_t)((uint8_t)low >> 6);
  }
}

KERNEL void i8_i4_vcvt(int n, const int8_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) {
    const int8_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 4);
    y[i] = (int8_t)((int8_t)low >> 4);
  }
}

KERNEL void i8_u4_vcvt(int n, const int8_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) {
    const int8_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 4);
    y[i] = (uint8_t)((uint8_t)low >> 4);
  }
}

KERNEL void i8_i2_vcvt(int n, const int8_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) {
    const int8_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 6);
    y[i] = (int8_t)((int8_t)low >> 6);
  }
}

KERNEL void i8_u2_vcvt(int n, const int8_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) {
    const int8_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 6);
    y[i] = (uint8_t)((uint8_t)low >> 6);
  }
}

KERNEL void u8_i4_vcvt(int n, const uint8_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) {
    const uint8_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 4);
    y[i] = (int8_t)((int8_t)low >> 4);
  }
}

KERNEL void u8_u4_vcvt(int n, const uint8_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) {
    const uint8_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 4);
    y[i] = (uint8_t)((uint8_t)low >> 4);
  }
}

KERNEL void u8_i2_vcvt(int n, const uint8_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) {
    const uint8_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 6);
    y[i] = (int8_t)((int8_t)low >> 6);
  }
}

KERNEL void u8_u2_vcvt(int n, const uint8_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) {
    const uint8_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 6);
    y[i] = (uint8_t)((uint8_t)low >> 6);
  }
}

KERNEL void f64_i4_vcvt(int n, const double* x, int8_t* y) {
  for (int i = 0; i < n; i++) {
    const int64_t v = x[i] >= -9223372036854775808.0 && x[i] < 9223372036854775808.0 ? (int64_t)x[i] : 0;
    const uint8_t low = (uint8_t)((uint8_t)v << 4);
    y[i] = (int8_t)((int8_t)low >> 4);
  }
}

KERNEL void f64_u4_vcvt(int n, const double* x, uint8_t* y) {
  for (int i = 0; i < n; i++) {
    const int64_t v = x[i] >= -9223372036854775808.0 && x[i] < 9223372036854775808.0 ? (int64_t)x[i] : 0;
    const uint8_t low = (uint8_t)((uint8_t)v << 4);
    y[i] = (uint8_t)((uint8_t)low >> 4);
  }
}

KERNEL void f64_i2_vcvt(int n, const double* x, int8_t* y) {
  for (int i = 0; i < n; i++) {
    const int64_t v = x[i] >= -9223372036854775808.0 && x[i] < 9223372036854775808.0 ? (int64_t)x[i] : 0;
    const uint8_t low = (uint8_t)((uint8_t)v << 6);
    y[i] = (int8_t)((int8_t)low >> 6);
  }
}

KERNEL void f64_u2_vcvt(int n, const double* x, uint8_t* y) {
  for (int i = 0; i < n; i++) {
    const int64_t v = x[i] >= -9223372036854775808.0 && x[i] < 9223372036854775808.0 ? (int64_t)x[i] : 0;
    const uint8_t low = (uint8_t)((uint8_t)v << 6);
    y[i] = (uint8_t)((uint8_t)low >> 6);
  }
}

KERNEL void i16_i4_vcvt(int n, const int16_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) {
    const int16_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 4);
    y[i] = (int8_t)((int8_t)low >> 4);
  }
}

KERNEL void i16_u4_vcvt(int n, const int16_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) {
    const int16_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 4);
    y[i] = (uint8_t)((uint8_t)low >> 4);
  }
}

KERNEL void i16_i2_vcvt(int n, const int16_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) {
    const int16_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 6);
    y[i] = (int8_t)((int8_t)low >> 6);
  }
}

KERNEL void i16_u2_vcvt(int n, const int16_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) {
    const int16_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 6);
    y[i] = (uint8_t)((uint8_t)low >> 6);
  }
}

KERNEL void u16_i4_vcvt(int n, const uint16_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) {
    const uint16_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 4);
    y[i] = (int8_t)((int8_t)low >> 4);
  }
}

KERNEL void u16_u4_vcvt(int n, const uint16_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) {
    const uint16_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 4);
    y[i] = (uint8_t)((uint8_t)low >> 4);
  }
}

KERNEL void u16_i2_vcvt(int n, const uint16_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) {
    const uint16_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 6);
    y[i] = (int8_t)((int8_t)low >> 6);
  }
}

KERNEL void u16_u2_vcvt(int n, const uint16_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) {
    const uint16_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 6);
    y[i] = (uint8_t)((uint8_t)low >> 6);
  }
}

KERNEL void u32_i4_vcvt(int n, const uint32_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) {
    const uint32_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 4);
    y[i] = (int8_t)((int8_t)low >> 4);
  }
}

KERNEL void u32_u4_vcvt(int n, const uint32_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) {
    const uint32_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 4);
    y[i] = (uint8_t)((uint8_t)low >> 4);
  }
}

KERNEL void u32_i2_vcvt(int n, const uint32_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) {
    const uint32_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 6);
    y[i] = (int8_t)((int8_t)low >> 6);
  }
}

KERNEL void u32_u2_vcvt(int n, const uint32_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) {
    const uint32_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 6);
    y[i] = (uint8_t)((uint8_t)low >> 6);
  }
}

KERNEL void u64_i4_vcvt(int n, const uint64_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) {
    const uint64_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 4);
    y[i] = (int8_t)((int8_t)low >> 4);
  }
}

KERNEL void u64_u4_vcvt(int n, const uint64_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) {
    const uint64_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 4);
    y[i] = (uint8_t)((uint8_t)low >> 4);
  }
}

KERNEL void u64_i2_vcvt(int n, const uint64_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) {
    const uint64_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 6);
    y[i] = (int8_t)((int8_t)low >> 6);
  }
}

KERNEL void u64_u2_vcvt(int n, const uint64_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) {
    const uint64_t v = x[i];
    const uint8_t low = (uint8_t)((uint8_t)v << 6);
    y[i] = (uint8_t)((uint8_t)low >> 6);
  }
}

KERNEL void i4_i8_vcvt(int n, const int8_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) y[i] = x[i];
}

KERNEL void u4_u8_vcvt(int n, const uint8_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = x[i];
}

KERNEL void i2_i8_vcvt(int n, const int8_t* x, int8_t* y) {
  for (int i = 0; i < n; i++) y[i] = x[i];
}

KERNEL void u2_u8_vcvt(int n, const uint8_t* x, uint8_t* y) {
  for (int i = 0; i < n; i++) y[i] = x[i];
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

/* bfloat16 (bf16): the top half of a float. float -> bf16 rounds to nearest even by integer add (a carry
 * into the exponent is the right result, overflow gives inf), NaN stays NaN (quiet). */
INLINE uint16_t f32_to_bf16(float f) {
  union { float f; uint32_t u; } v = {f};
  if ((v.u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((v.u >> 16) | 0x40u);
  return (uint16_t)((v.u + 0x7FFFu + ((v.u >> 16) & 1u)) >> 16);
}

KERNEL void f32_bf16_vcvt(int n, const float* x, uint16_t* y) {
  for (int i = 0; i < n; i++) y[i] = f32_to_bf16(x[i]);
}

KERNEL void bf16_f32_vcvt(int n, const uint16_t* x, float* y) {
  for (int i = 0; i < n; i++) {
    union { uint32_t u; float f; } v = {(uint32_t)x[i] << 16};
    y[i] = v.f;
  }
}

/* y = x rounded to the nearest bfloat16, kept as float (a NaN as it is): bf16 graphs compute in f32
 * between these, as fp16 ones do with f32_vroundh. */
KERNEL void f32_vroundbf16(int n, const float* x, float* y) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    const v128_t u = VLOAD(x + i);
    const v128_t lsb = wasm_v128_and(wasm_u32x4_shr(u, 16), wasm_i32x4_splat(1));
    const v128_t r = wasm_v128_and(wasm_i32x4_add(u, wasm_i32x4_add(lsb, wasm_i32x4_splat(0x7FFF))),
                                   wasm_i32x4_splat((int32_t)0xFFFF0000u));
    const v128_t nan = wasm_i32x4_gt(wasm_v128_and(u, wasm_i32x4_splat(0x7FFFFFFF)), wasm_i32x4_splat(0x7F800000));
    VSTORE(y + i, wasm_v128_bitselect(u, r, nan));
  }
  for (; i < n; i++) {
    union { uint32_t u; float f; } v = {(uint32_t)f32_to_bf16(x[i]) << 16};
    y[i] = x[i] != x[i] ? x[i] : v.f;
  }
}

/* The 8- and 4-bit floats (ONNX FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ, FLOAT4E2M1),
 * one byte each: float -> them rounds to nearest even on their grid (the magnitude divided by its step, a
 * power of two, so exactly; subnormals kept); a result past the largest finite value is that value when
 * ``sat`` (ONNX Cast's saturate=1, inf included) and otherwise NaN, or inf where the format has one
 * (E5M2); NaN stays NaN. "fn": no inf, S.1111.111 is NaN; "uz": no inf, no -0, 0x80 is NaN; "ieee": inf
 * and NaN as IEEE; FLOAT4E2M1 has neither and always saturates (NaN becomes a zero of the other sign,
 * as ml_dtypes has it). */
INLINE uint8_t f32_to_f8e4m3(float f, int sat) {
  union { float f; uint32_t u; } v = {f};
  const uint32_t sign = v.u >> 31 ? 128u : 0u, a = v.u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return (uint8_t)(sign | 0x7Fu);
  union { uint32_t u; float f; } m = {a};
  float r = m.f;
  if (a < 0x7F800000u) {
    int e = (int)(a >> 23) - 127;
    if (e < -6) e = -6;
    union { uint32_t u; float f; } step = {(uint32_t)(e - 3 + 127) << 23};
    r = __builtin_roundevenf(m.f / step.f) * step.f;
  }
  if (r > 448.0f) {
    if (!sat) return (uint8_t)(sign | 0x7Fu);
    r = 448.0f;
  }
  union { float f; uint32_t u; } q = {r};
  const int e = (int)(q.u >> 23) - 127;
  if (e < -6) return (uint8_t)(sign | (uint32_t)(r * 512.0f));
  return (uint8_t)(sign | (uint32_t)(e + 7) << 3 | ((q.u >> 20) & 7u));
}

INLINE float f8e4m3_to_f32(uint8_t b) {
  const uint32_t e = (b >> 3) & 15u, m = b & 7u;
  if ((b & 0x7Fu) == 0x7Fu) return __builtin_nanf("");
  union { uint32_t u; float f; } v = {(e + 120u) << 23 | m << 20};
  const float mag = e ? v.f : (float)m * 0.001953125f;
  return b & 128u ? -mag : mag;
}

KERNEL void f32_f8e4m3_vcvt(int n, const float* x, uint8_t* y, int sat) {
  for (int i = 0; i < n; i++) y[i] = f32_to_f8e4m3(x[i], sat);
}

KERNEL void f8e4m3_f32_vcvt(int n, const uint8_t* x, float* y) {
  for (int i = 0; i < n; i++) y[i] = f8e4m3_to_f32(x[i]);
}

INLINE uint8_t f32_to_f8e4m3uz(float f, int sat) {
  union { float f; uint32_t u; } v = {f};
  const uint32_t sign = v.u >> 31 ? 128u : 0u, a = v.u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return (uint8_t)(0x80u);
  union { uint32_t u; float f; } m = {a};
  float r = m.f;
  if (a < 0x7F800000u) {
    int e = (int)(a >> 23) - 127;
    if (e < -7) e = -7;
    union { uint32_t u; float f; } step = {(uint32_t)(e - 3 + 127) << 23};
    r = __builtin_roundevenf(m.f / step.f) * step.f;
  }
  if (r > 240.0f) {
    if (!sat) return (uint8_t)(0x80u);
    r = 240.0f;
  }
  union { float f; uint32_t u; } q = {r};
  const int e = (int)(q.u >> 23) - 127;
  if (e < -7) return (uint8_t)((uint32_t)(r * 1024.0f) | (r != 0.0f ? sign : 0u));
  return (uint8_t)(sign | (uint32_t)(e + 8) << 3 | ((q.u >> 20) & 7u));
}

INLINE float f8e4m3uz_to_f32(uint8_t b) {
  const uint32_t e = (b >> 3) & 15u, m = b & 7u;
  if (b == 0x80u) return __builtin_nanf("");
  union { uint32_t u; float f; } v = {(e + 119u) << 23 | m << 20};
  const float mag = e ? v.f : (float)m * 0.0009765625f;
  return b & 128u ? -mag : mag;
}

KERNEL void f32_f8e4m3uz_vcvt(int n, const float* x, uint8_t* y, int sat) {
  for (int i = 0; i < n; i++) y[i] = f32_to_f8e4m3uz(x[i], sat);
}

KERNEL void f8e4m3uz_f32_vcvt(int n, const uint8_t* x, float* y) {
  for (int i = 0; i < n; i++) y[i] = f8e4m3uz_to_f32(x[i]);
}

INLINE uint8_t f32_to_f8e5m2(float f, int sat) {
  union { float f; uint32_t u; } v = {f};
  const uint32_t sign = v.u >> 31 ? 128u : 0u, a = v.u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return (uint8_t)(sign | 0x7Fu);
  union { uint32_t u; float f; } m = {a};
  float r = m.f;
  if (a < 0x7F800000u) {
    int e = (int)(a >> 23) - 127;
    if (e < -14) e = -14;
    union { uint32_t u; float f; } step = {(uint32_t)(e - 2 + 127) << 23};
    r = __builtin_roundevenf(m.f / step.f) * step.f;
  }
  if (r > 57344.0f) {
    if (!sat) return (uint8_t)(sign | 124u);
    r = 57344.0f;
  }
  union { float f; uint32_t u; } q = {r};
  const int e = (int)(q.u >> 23) - 127;
  if (e < -14) return (uint8_t)(sign | (uint32_t)(r * 65536.0f));
  return (uint8_t)(sign | (uint32_t)(e + 15) << 2 | ((q.u >> 21) & 3u));
}

INLINE float f8e5m2_to_f32(uint8_t b) {
  const uint32_t e = (b >> 2) & 31u, m = b & 3u;
  if (e == 31u) return m ? __builtin_nanf("") : (b & 128u ? -__builtin_inff() : __builtin_inff());
  union { uint32_t u; float f; } v = {(e + 112u) << 23 | m << 21};
  const float mag = e ? v.f : (float)m * 1.52587890625e-05f;
  return b & 128u ? -mag : mag;
}

KERNEL void f32_f8e5m2_vcvt(int n, const float* x, uint8_t* y, int sat) {
  for (int i = 0; i < n; i++) y[i] = f32_to_f8e5m2(x[i], sat);
}

KERNEL void f8e5m2_f32_vcvt(int n, const uint8_t* x, float* y) {
  for (int i = 0; i < n; i++) y[i] = f8e5m2_to_f32(x[i]);
}

INLINE uint8_t f32_to_f8e5m2uz(float f, int sat) {
  union { float f; uint32_t u; } v = {f};
  const uint32_t sign = v.u >> 31 ? 128u : 0u, a = v.u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return (uint8_t)(0x80u);
  union { uint32_t u; float f; } m = {a};
  float r = m.f;
  if (a < 0x7F800000u) {
    int e = (int)(a >> 23) - 127;
    if (e < -15) e = -15;
    union { uint32_t u; float f; } step = {(uint32_t)(e - 2 + 127) << 23};
    r = __builtin_roundevenf(m.f / step.f) * step.f;
  }
  if (r > 57344.0f) {
    if (!sat) return (uint8_t)(0x80u);
    r = 57344.0f;
  }
  union { float f; uint32_t u; } q = {r};
  const int e = (int)(q.u >> 23) - 127;
  if (e < -15) return (uint8_t)((uint32_t)(r * 131072.0f) | (r != 0.0f ? sign : 0u));
  return (uint8_t)(sign | (uint32_t)(e + 16) << 2 | ((q.u >> 21) & 3u));
}

INLINE float f8e5m2uz_to_f32(uint8_t b) {
  const uint32_t e = (b >> 2) & 31u, m = b & 3u;
  if (b == 0x80u) return __builtin_nanf("");
  union { uint32_t u; float f; } v = {(e + 111u) << 23 | m << 21};
  const float mag = e ? v.f : (float)m * 7.62939453125e-06f;
  return b & 128u ? -mag : mag;
}

KERNEL void f32_f8e5m2uz_vcvt(int n, const float* x, uint8_t* y, int sat) {
  for (int i = 0; i < n; i++) y[i] = f32_to_f8e5m2uz(x[i], sat);
}

KERNEL void f8e5m2uz_f32_vcvt(int n, const uint8_t* x, float* y) {
  for (int i = 0; i < n; i++) y[i] = f8e5m2uz_to_f32(x[i]);
}

INLINE uint8_t f32_to_f4e2m1(float f, int sat) {
  union { float f; uint32_t u; } v = {f};
  const uint32_t sign = v.u >> 31 ? 8u : 0u, a = v.u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return (uint8_t)(sign ^ 8u);
  union { uint32_t u; float f; } m = {a};
  float r = m.f;
  if (a < 0x7F800000u) {
    int e = (int)(a >> 23) - 127;
    if (e < 0) e = 0;
    union { uint32_t u; float f; } step = {(uint32_t)(e - 1 + 127) << 23};
    r = __builtin_roundevenf(m.f / step.f) * step.f;
  }
  (void)sat;
  if (r > 6.0f) r = 6.0f;
  union { float f; uint32_t u; } q = {r};
  const int e = (int)(q.u >> 23) - 127;
  if (e < 0) return (uint8_t)(sign | (uint32_t)(r * 2.0f));
  return (uint8_t)(sign | (uint32_t)(e + 1) << 1 | ((q.u >> 22) & 1u));
}

INLINE float f4e2m1_to_f32(uint8_t b) {
  const uint32_t e = (b >> 1) & 3u, m = b & 1u;
  union { uint32_t u; float f; } v = {(e + 126u) << 23 | m << 22};
  const float mag = e ? v.f : (float)m * 0.5f;
  return b & 8u ? -mag : mag;
}

KERNEL void f32_f4e2m1_vcvt(int n, const float* x, uint8_t* y, int sat) {
  for (int i = 0; i < n; i++) y[i] = f32_to_f4e2m1(x[i], sat);
}

KERNEL void f4e2m1_f32_vcvt(int n, const uint8_t* x, float* y) {
  for (int i = 0; i < n; i++) y[i] = f4e2m1_to_f32(x[i]);
}

/* FLOAT8E8M0: a bare exponent, 2^(e - 127), 0xFF is NaN. float -> it as onnx's reference does: the f32
 * exponent, plus one when ``mode`` (0 up, 1 down, 2 nearest) rounds up, which ``sat`` stops at the top
 * finite value (else it becomes NaN); the sign is dropped, NaN and inf become NaN. */
INLINE uint8_t f32_to_f8e8m0(float f, int sat, int mode) {
  union { float f; uint32_t u; } v = {f};
  const uint32_t e = (v.u >> 23) & 0xFFu;
  if (e == 0xFFu) return 0xFFu;
  uint32_t up = 0;
  if (mode == 0) up = (v.u & 0x7FFFFFu) != 0;
  else if (mode == 2) up = (v.u & 0x400000u) && ((v.u & 0x200000u) || (v.u & 0x1FFFFFu) || e > 0);
  if (sat && e == 0xFEu) up = 0;
  return (uint8_t)(e + up);
}

KERNEL void f32_f8e8m0_vcvt(int n, const float* x, uint8_t* y, int sat, int mode) {
  for (int i = 0; i < n; i++) y[i] = f32_to_f8e8m0(x[i], sat, mode);
}

KERNEL void f8e8m0_f32_vcvt(int n, const uint8_t* x, float* y) {
  for (int i = 0; i < n; i++) {
    union { uint32_t u; float f; } v = {x[i] ? (uint32_t)x[i] << 23 : 0x400000u};
    y[i] = x[i] == 0xFFu ? __builtin_nanf("") : v.f;
  }
}
