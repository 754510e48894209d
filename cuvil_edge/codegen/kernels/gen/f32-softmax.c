/* generated from templates/f32-softmax.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* Softmax / LogSoftmax over the middle axis of x[outer][n][inner] (numerically safe: x - max first).
 * inner == 1 runs along contiguous rows; otherwise 4 columns at a time, so a channel softmax of NCHW data
 * is as vectorised as a row softmax. y may equal x. Needs f32-unary. */

INLINE v128_t tail_mask(int k) {
  return wasm_i32x4_lt(wasm_i32x4_make(0, 1, 2, 3), wasm_i32x4_splat(k));
}

KERNEL void f32_softmax_rows(int outer, int n, const float* x, float* y, int log) {
  for (int o = 0; o < outer; o++) {
    const float* xp = x + (size_t)o * n;
    float* yp = y + (size_t)o * n;
    v128_t vm = VSPLAT(-__builtin_inff());
    int j = 0;
    for (; j + 4 <= n; j += 4) vm = VMAX(vm, VLOAD(xp + j));  /* a NaN makes the row NaN either way (the sum) */
    float t[4], m;
    VSTORE(t, vm);
    m = t[0];
    for (int l = 1; l < 4; l++) m = t[l] > m ? t[l] : m;
    for (; j < n; j++) m = xp[j] > m ? xp[j] : m;
    vm = VSPLAT(m);
    v128_t vs = VSPLAT(0.0f);
    for (j = 0; j + 4 <= n; j += 4) {
      v128_t e = v_exp(wasm_f32x4_sub(VLOAD(xp + j), vm));
      if (!log) VSTORE(yp + j, e);
      vs = wasm_f32x4_add(vs, e);
    }
    if (j < n) {
      v128_t e = wasm_v128_and(v_exp(wasm_f32x4_sub(load_tail(xp + j, n - j), vm)), tail_mask(n - j));
      if (!log) store_tail(yp + j, e, n - j);
      vs = wasm_f32x4_add(vs, e);
    }
    vs = VSPLAT(hsum(vs));
    if (log) {
      v128_t shift = wasm_f32x4_add(vm, v_log(vs));
      for (j = 0; j + 4 <= n; j += 4) VSTORE(yp + j, wasm_f32x4_sub(VLOAD(xp + j), shift));
      if (j < n) store_tail(yp + j, wasm_f32x4_sub(load_tail(xp + j, n - j), shift), n - j);
    } else {
      v128_t r = wasm_f32x4_div(VSPLAT(1.0f), vs);
      for (j = 0; j + 4 <= n; j += 4) VSTORE(yp + j, wasm_f32x4_mul(VLOAD(yp + j), r));
      if (j < n) store_tail(yp + j, wasm_f32x4_mul(load_tail(yp + j, n - j), r), n - j);
    }
  }
}

KERNEL void f32_softmax_cols(int outer, int n, int inner, const float* x, float* y, int log) {
  for (int o = 0; o < outer; o++) {
    for (int c = 0; c < inner; c += 4) {
      const int k = inner - c < 4 ? inner - c : 4;
      const float* xp = x + (size_t)o * n * inner + c;
      float* yp = y + (size_t)o * n * inner + c;
      v128_t vm = VSPLAT(-__builtin_inff()), vs = VSPLAT(0.0f);
      for (int j = 0; j < n; j++) vm = VMAX(vm, load_k(xp + (size_t)j * inner, k));
      for (int j = 0; j < n; j++) {
        v128_t e = v_exp(wasm_f32x4_sub(load_k(xp + (size_t)j * inner, k), vm));
        if (!log) store_k(yp + (size_t)j * inner, e, k);
        vs = wasm_f32x4_add(vs, e);
      }
      if (log) {
        v128_t shift = wasm_f32x4_add(vm, v_log(vs));
        for (int j = 0; j < n; j++)
          store_k(yp + (size_t)j * inner, wasm_f32x4_sub(load_k(xp + (size_t)j * inner, k), shift), k);
      } else {
        v128_t r = wasm_f32x4_div(VSPLAT(1.0f), vs);
        for (int j = 0; j < n; j++)
          store_k(yp + (size_t)j * inner, wasm_f32x4_mul(load_k(yp + (size_t)j * inner, k), r), k);
      }
    }
  }
}
