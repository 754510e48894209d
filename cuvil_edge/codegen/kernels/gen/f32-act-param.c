/* generated from templates/f32-act-param.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* Activations that are not fused epilogues: f32_v<kind>(n, x, y, a, b) with two float parameters.
 * mish x*tanh(softplus(x)); softplus log(1+e^x); elu/celu (alpha a); selu (alpha a,
 * gamma b); softsign x/(1+|x|); thresholdedrelu (alpha a); shrink (lambd a, bias b). Needs f32-unary. */

/* log(1 + e^x) without overflow: max(x, 0) + log(1 + e^-|x|) */
INLINE v128_t v_softplus(v128_t v) {
  return wasm_f32x4_add(wasm_f32x4_max(v, VSPLAT(0.0f)),
                        v_log(wasm_f32x4_add(VSPLAT(1.0f), v_exp(wasm_f32x4_neg(wasm_f32x4_abs(v))))));
}
INLINE v128_t v_expm1_neg(v128_t v, v128_t alpha) {  /* alpha * (e^min(v,0) - 1) */
  return wasm_f32x4_mul(alpha, wasm_f32x4_sub(v_exp(wasm_f32x4_min(v, VSPLAT(0.0f))), VSPLAT(1.0f)));
}

KERNEL void f32_vmish(int n, const float* x, float* y, float a, float b) {
  const v128_t va = VSPLAT(a), vb = VSPLAT(b);
  (void)va; (void)vb;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    const v128_t v = VLOAD(x + i);
    VSTORE(y + i, wasm_f32x4_mul(v, v_tanh(v_softplus(v))));
  }
  if (i < n) {
    const v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, wasm_f32x4_mul(v, v_tanh(v_softplus(v))), n - i);
  }
}

KERNEL void f32_vsoftplus(int n, const float* x, float* y, float a, float b) {
  const v128_t va = VSPLAT(a), vb = VSPLAT(b);
  (void)va; (void)vb;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    const v128_t v = VLOAD(x + i);
    VSTORE(y + i, v_softplus(v));
  }
  if (i < n) {
    const v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, v_softplus(v), n - i);
  }
}

KERNEL void f32_velu(int n, const float* x, float* y, float a, float b) {
  const v128_t va = VSPLAT(a), vb = VSPLAT(b);
  (void)va; (void)vb;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    const v128_t v = VLOAD(x + i);
    VSTORE(y + i, wasm_v128_bitselect(v, v_expm1_neg(v, va), wasm_f32x4_gt(v, VSPLAT(0.0f))));
  }
  if (i < n) {
    const v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, wasm_v128_bitselect(v, v_expm1_neg(v, va), wasm_f32x4_gt(v, VSPLAT(0.0f))), n - i);
  }
}

KERNEL void f32_vcelu(int n, const float* x, float* y, float a, float b) {
  const v128_t va = VSPLAT(a), vb = VSPLAT(b);
  (void)va; (void)vb;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    const v128_t v = VLOAD(x + i);
    VSTORE(y + i, wasm_f32x4_add(wasm_f32x4_max(v, VSPLAT(0.0f)), v_expm1_neg(wasm_f32x4_div(v, va), va)));
  }
  if (i < n) {
    const v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, wasm_f32x4_add(wasm_f32x4_max(v, VSPLAT(0.0f)), v_expm1_neg(wasm_f32x4_div(v, va), va)), n - i);
  }
}

KERNEL void f32_vselu(int n, const float* x, float* y, float a, float b) {
  const v128_t va = VSPLAT(a), vb = VSPLAT(b);
  (void)va; (void)vb;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    const v128_t v = VLOAD(x + i);
    VSTORE(y + i, wasm_f32x4_mul(vb, wasm_v128_bitselect(v, v_expm1_neg(v, va), wasm_f32x4_gt(v, VSPLAT(0.0f)))));
  }
  if (i < n) {
    const v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, wasm_f32x4_mul(vb, wasm_v128_bitselect(v, v_expm1_neg(v, va), wasm_f32x4_gt(v, VSPLAT(0.0f)))), n - i);
  }
}

KERNEL void f32_vsoftsign(int n, const float* x, float* y, float a, float b) {
  const v128_t va = VSPLAT(a), vb = VSPLAT(b);
  (void)va; (void)vb;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    const v128_t v = VLOAD(x + i);
    VSTORE(y + i, wasm_f32x4_div(v, wasm_f32x4_add(VSPLAT(1.0f), wasm_f32x4_abs(v))));
  }
  if (i < n) {
    const v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, wasm_f32x4_div(v, wasm_f32x4_add(VSPLAT(1.0f), wasm_f32x4_abs(v))), n - i);
  }
}

KERNEL void f32_vthresholdedrelu(int n, const float* x, float* y, float a, float b) {
  const v128_t va = VSPLAT(a), vb = VSPLAT(b);
  (void)va; (void)vb;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    const v128_t v = VLOAD(x + i);
    VSTORE(y + i, wasm_v128_and(v, wasm_f32x4_gt(v, va)));
  }
  if (i < n) {
    const v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, wasm_v128_and(v, wasm_f32x4_gt(v, va)), n - i);
  }
}

KERNEL void f32_vshrink(int n, const float* x, float* y, float a, float b) {
  const v128_t va = VSPLAT(a), vb = VSPLAT(b);
  (void)va; (void)vb;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    const v128_t v = VLOAD(x + i);
    VSTORE(y + i, wasm_v128_or(wasm_v128_and(wasm_f32x4_add(v, vb), wasm_f32x4_lt(v, wasm_f32x4_neg(va))), wasm_v128_and(wasm_f32x4_sub(v, vb), wasm_f32x4_gt(v, va))));
  }
  if (i < n) {
    const v128_t v = load_tail(x + i, n - i);
    store_tail(y + i, wasm_v128_or(wasm_v128_and(wasm_f32x4_add(v, vb), wasm_f32x4_lt(v, wasm_f32x4_neg(va))), wasm_v128_and(wasm_f32x4_sub(v, vb), wasm_f32x4_gt(v, va))), n - i);
  }
}

