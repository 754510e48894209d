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

