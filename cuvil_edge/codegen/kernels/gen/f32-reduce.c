/* generated from templates/f32-reduce.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* Reductions over the middle axis of x[outer][r][inner] -> y[outer][inner]: f32_r<kind>.
 * inner == 1 reduces contiguous rows (vector accumulator, then its 4 lanes); otherwise 4 columns are
 * reduced at a time. Sums are multiplied by scale (1/r for a mean). Needs f32-unary. */
KERNEL void f32_rsum(int outer, int r, int inner, const float* x, float* y, float scale) {
  if (inner == 1) {
    for (int o = 0; o < outer; o++) {
      const float* xp = x + (size_t)o * r;
      v128_t acc = VSPLAT(0.0f);
      int j = 0;
      for (; j + 4 <= r; j += 4) {
        v128_t v = VLOAD(xp + j);
        acc = wasm_f32x4_add(acc, v);
      }
      float t[4], s = 0.0f;
      VSTORE(t, acc);
      for (int l = 0; l < 4; l++) {
        float v = t[l];
        s = s + v;
      }
      for (; j < r; j++) {
        float v = xp[j];
        s = s + v;
      }
      y[o] = s * scale;
    }
    return;
  }
  for (int o = 0; o < outer; o++) {
    for (int c = 0; c < inner; c += 4) {
      const int k = inner - c < 4 ? inner - c : 4;
      const float* xp = x + (size_t)o * r * inner + c;
      v128_t acc = VSPLAT(0.0f);
      for (int j = 0; j < r; j++) {
        v128_t v = load_k(xp + (size_t)j * inner, k);
        acc = wasm_f32x4_add(acc, v);
      }
      acc = wasm_f32x4_mul(acc, VSPLAT(scale));
      store_k(y + (size_t)o * inner + c, acc, k);
    }
  }
}

KERNEL void f32_rsumsq(int outer, int r, int inner, const float* x, float* y, float scale) {
  if (inner == 1) {
    for (int o = 0; o < outer; o++) {
      const float* xp = x + (size_t)o * r;
      v128_t acc = VSPLAT(0.0f);
      int j = 0;
      for (; j + 4 <= r; j += 4) {
        v128_t v = VLOAD(xp + j);
        v = wasm_f32x4_mul(v, v);
        acc = wasm_f32x4_add(acc, v);
      }
      float t[4], s = 0.0f;
      VSTORE(t, acc);
      for (int l = 0; l < 4; l++) {
        float v = t[l];
        s = s + v;
      }
      for (; j < r; j++) {
        float v = xp[j];
        v = v * v;
        s = s + v;
      }
      y[o] = s * scale;
    }
    return;
  }
  for (int o = 0; o < outer; o++) {
    for (int c = 0; c < inner; c += 4) {
      const int k = inner - c < 4 ? inner - c : 4;
      const float* xp = x + (size_t)o * r * inner + c;
      v128_t acc = VSPLAT(0.0f);
      for (int j = 0; j < r; j++) {
        v128_t v = load_k(xp + (size_t)j * inner, k);
        v = wasm_f32x4_mul(v, v);
        acc = wasm_f32x4_add(acc, v);
      }
      acc = wasm_f32x4_mul(acc, VSPLAT(scale));
      store_k(y + (size_t)o * inner + c, acc, k);
    }
  }
}

KERNEL void f32_rsumabs(int outer, int r, int inner, const float* x, float* y, float scale) {
  if (inner == 1) {
    for (int o = 0; o < outer; o++) {
      const float* xp = x + (size_t)o * r;
      v128_t acc = VSPLAT(0.0f);
      int j = 0;
      for (; j + 4 <= r; j += 4) {
        v128_t v = VLOAD(xp + j);
        v = wasm_f32x4_abs(v);
        acc = wasm_f32x4_add(acc, v);
      }
      float t[4], s = 0.0f;
      VSTORE(t, acc);
      for (int l = 0; l < 4; l++) {
        float v = t[l];
        s = s + v;
      }
      for (; j < r; j++) {
        float v = xp[j];
        v = __builtin_fabsf(v);
        s = s + v;
      }
      y[o] = s * scale;
    }
    return;
  }
  for (int o = 0; o < outer; o++) {
    for (int c = 0; c < inner; c += 4) {
      const int k = inner - c < 4 ? inner - c : 4;
      const float* xp = x + (size_t)o * r * inner + c;
      v128_t acc = VSPLAT(0.0f);
      for (int j = 0; j < r; j++) {
        v128_t v = load_k(xp + (size_t)j * inner, k);
        v = wasm_f32x4_abs(v);
        acc = wasm_f32x4_add(acc, v);
      }
      acc = wasm_f32x4_mul(acc, VSPLAT(scale));
      store_k(y + (size_t)o * inner + c, acc, k);
    }
  }
}

KERNEL void f32_rmax(int outer, int r, int inner, const float* x, float* y, float scale) {
  (void)scale;
  if (inner == 1) {
    for (int o = 0; o < outer; o++) {
      const float* xp = x + (size_t)o * r;
      v128_t acc = VSPLAT(-__builtin_inff());
      int j = 0;
      for (; j + 4 <= r; j += 4) {
        v128_t v = VLOAD(xp + j);
        acc = wasm_f32x4_max(acc, v);
      }
      float t[4], s = -__builtin_inff();
      VSTORE(t, acc);
      for (int l = 0; l < 4; l++) {
        float v = t[l];
        s = v > s ? v : s;
      }
      for (; j < r; j++) {
        float v = xp[j];
        s = v > s ? v : s;
      }
      y[o] = s;
    }
    return;
  }
  for (int o = 0; o < outer; o++) {
    for (int c = 0; c < inner; c += 4) {
      const int k = inner - c < 4 ? inner - c : 4;
      const float* xp = x + (size_t)o * r * inner + c;
      v128_t acc = VSPLAT(-__builtin_inff());
      for (int j = 0; j < r; j++) {
        v128_t v = load_k(xp + (size_t)j * inner, k);
        acc = wasm_f32x4_max(acc, v);
      }
      store_k(y + (size_t)o * inner + c, acc, k);
    }
  }
}

KERNEL void f32_rmin(int outer, int r, int inner, const float* x, float* y, float scale) {
  (void)scale;
  if (inner == 1) {
    for (int o = 0; o < outer; o++) {
      const float* xp = x + (size_t)o * r;
      v128_t acc = VSPLAT(__builtin_inff());
      int j = 0;
      for (; j + 4 <= r; j += 4) {
        v128_t v = VLOAD(xp + j);
        acc = wasm_f32x4_min(acc, v);
      }
      float t[4], s = __builtin_inff();
      VSTORE(t, acc);
      for (int l = 0; l < 4; l++) {
        float v = t[l];
        s = v < s ? v : s;
      }
      for (; j < r; j++) {
        float v = xp[j];
        s = v < s ? v : s;
      }
      y[o] = s;
    }
    return;
  }
  for (int o = 0; o < outer; o++) {
    for (int c = 0; c < inner; c += 4) {
      const int k = inner - c < 4 ? inner - c : 4;
      const float* xp = x + (size_t)o * r * inner + c;
      v128_t acc = VSPLAT(__builtin_inff());
      for (int j = 0; j < r; j++) {
        v128_t v = load_k(xp + (size_t)j * inner, k);
        acc = wasm_f32x4_min(acc, v);
      }
      store_k(y + (size_t)o * inner + c, acc, k);
    }
  }
}

KERNEL void f32_rprod(int outer, int r, int inner, const float* x, float* y, float scale) {
  (void)scale;
  if (inner == 1) {
    for (int o = 0; o < outer; o++) {
      const float* xp = x + (size_t)o * r;
      v128_t acc = VSPLAT(1.0f);
      int j = 0;
      for (; j + 4 <= r; j += 4) {
        v128_t v = VLOAD(xp + j);
        acc = wasm_f32x4_mul(acc, v);
      }
      float t[4], s = 1.0f;
      VSTORE(t, acc);
      for (int l = 0; l < 4; l++) {
        float v = t[l];
        s = s * v;
      }
      for (; j < r; j++) {
        float v = xp[j];
        s = s * v;
      }
      y[o] = s;
    }
    return;
  }
  for (int o = 0; o < outer; o++) {
    for (int c = 0; c < inner; c += 4) {
      const int k = inner - c < 4 ? inner - c : 4;
      const float* xp = x + (size_t)o * r * inner + c;
      v128_t acc = VSPLAT(1.0f);
      for (int j = 0; j < r; j++) {
        v128_t v = load_k(xp + (size_t)j * inner, k);
        acc = wasm_f32x4_mul(acc, v);
      }
      store_k(y + (size_t)o * inner + c, acc, k);
    }
  }
}

