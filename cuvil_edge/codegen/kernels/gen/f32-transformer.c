/* generated from templates/f32-transformer.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* Transformer kernels: layer normalisation, GELU and fused scaled-dot-product attention.
 * Needs f32-unary (v_erf, tails, hsum), f32-gemm and f32-bmm (panel packing). */

/* y[r] = (x[r] - mean) / sqrt(var + eps) * gamma + beta over rows of n; gamma/beta may be NULL. */
KERNEL void f32_layernorm(int rows, int n, const float* x, const float* gamma, const float* beta, float eps,
                          float* y) {
  for (int r = 0; r < rows; r++, x += n, y += n) {
    v128_t vs = VSPLAT(0.0f);
    int j = 0;
    for (; j + 4 <= n; j += 4) vs = wasm_f32x4_add(vs, VLOAD(x + j));
    float s = hsum(vs);
    for (; j < n; j++) s += x[j];
    const float mean = s / (float)n;
    const v128_t vm = VSPLAT(mean);
    vs = VSPLAT(0.0f);
    for (j = 0; j + 4 <= n; j += 4) {
      const v128_t d = wasm_f32x4_sub(VLOAD(x + j), vm);
      vs = VFMA(d, d, vs);
    }
    float q = hsum(vs);
    for (; j < n; j++) q += (x[j] - mean) * (x[j] - mean);
    const float inv = 1.0f / __builtin_sqrtf(q / (float)n + eps);
    const v128_t vi = VSPLAT(inv);
    for (j = 0; j + 4 <= n; j += 4) {
      v128_t v = wasm_f32x4_mul(wasm_f32x4_sub(VLOAD(x + j), vm), vi);
      if (gamma) v = wasm_f32x4_mul(v, VLOAD(gamma + j));
      if (beta) v = wasm_f32x4_add(v, VLOAD(beta + j));
      VSTORE(y + j, v);
    }
    for (; j < n; j++) y[j] = (x[j] - mean) * inv * (gamma ? gamma[j] : 1.0f) + (beta ? beta[j] : 0.0f);
  }
}

INLINE v128_t v_gelu(v128_t v, int tanh_form) {
  v128_t t;
  if (tanh_form) {
    const v128_t u = wasm_f32x4_mul(v, VFMA(wasm_f32x4_mul(v, v), VSPLAT(0.044715f * 0.7978845608f),
                                            VSPLAT(0.7978845608f)));
    t = v_tanh(u);
  } else {
    t = v_erf(wasm_f32x4_mul(v, VSPLAT(0.70710678118654752f)));
  }
  return wasm_f32x4_mul(wasm_f32x4_mul(v, VSPLAT(0.5f)), wasm_f32x4_add(t, VSPLAT(1.0f)));
}

/* y = x * 0.5 * (1 + erf(x / sqrt 2)), or the tanh approximation; y may equal x. */
KERNEL void f32_gelu(int n, const float* x, float* y, int tanh_form) {
  int i = 0;
  for (; i + 4 <= n; i += 4) VSTORE(y + i, v_gelu(VLOAD(x + i), tanh_form));
  if (i < n) store_tail(y + i, v_gelu(load_tail(x + i, n - i), tanh_form), n - i);
}

/* exp(scale * s + mask - max) in place over one row of n scores, returning 1 / their sum: the caller
 * scales the row's P.V output by it (Dv multiplies instead of n); mask may be NULL */
INLINE float attn_exp_row(float* s, int n, float scale, const float* mask) {
  const v128_t vsc = VSPLAT(scale);
  v128_t vm = VSPLAT(-__builtin_inff());
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    v128_t v = wasm_f32x4_mul(VLOAD(s + j), vsc);
    if (mask) v = wasm_f32x4_add(v, VLOAD(mask + j));
    VSTORE(s + j, v);
    vm = VMAX(vm, v);  /* a NaN score makes its row NaN either way (the sum) */
  }
  float t[4], m;
  VSTORE(t, vm);
  m = t[0];
  for (int l = 1; l < 4; l++) m = t[l] > m ? t[l] : m;
  for (; j < n; j++) {
    s[j] = s[j] * scale + (mask ? mask[j] : 0.0f);
    m = s[j] > m ? s[j] : m;
  }
  vm = VSPLAT(m);
  v128_t vs = VSPLAT(0.0f);
  for (j = 0; j + 4 <= n; j += 4) {
    const v128_t e = v_exp(wasm_f32x4_sub(VLOAD(s + j), vm));
    VSTORE(s + j, e);
    vs = wasm_f32x4_add(vs, e);
  }
  float sum = hsum(vs);
  for (; j < n; j++) {
    t[0] = s[j] - m;
    VSTORE(t, v_exp(VLOAD(t)));
    s[j] = t[0];
    sum += t[0];
  }
  return 1.0f / sum;
}

/* y[j] *= r over n */
INLINE void attn_scale_row(float* y, int n, float r) {
  const v128_t vr = VSPLAT(r);
  int j = 0;
  for (; j + 4 <= n; j += 4) VSTORE(y + j, wasm_f32x4_mul(VLOAD(y + j), vr));
  for (; j < n; j++) y[j] *= r;
}

/* Y[b,h] = softmax(scale * Q K^T + mask) V for every batch b and head h, ATTN_ROWS query rows at a time:
 * only one block of scores (ATTN_ROWS x L) is ever materialised. Operands are read through element
 * strides st[] = {Q: b, h, s;  K: b, h, s, d;  V: b, h, s, d;  mask: b, h, s;  Y: b, h, s} (Q, mask and Y
 * rows contiguous), so the head split/merge transposes around attention cost nothing.
 * scratch: K^T panels (D x L), V panels (L x Dv), one score block. */
#define ATTN_ROWS 32
KERNEL void f32_attention(int B, int H, int S, int L, int D, int Dv, const float* Q, const float* K,
                          const float* V, const float* mask, const int* st, float scale, float* Y,
                          float* scratch, int tid, int nt) {
  float* kp = scratch;
  float* vp = kp + (size_t)((L + 7) / 8) * 8 * D;
  float* sc = vp + (size_t)((Dv + 7) / 8) * 8 * L;
  /* threads claim (batch, head) pairs one at a time (cuvil_chunks_of); scratch is the thread's own */
  CuvilChunks d = cuvil_chunks_of(B * H, 1, tid, nt);
  for (int bh, bh1; cuvil_chunk(&d, &bh, &bh1);) {
    {
      const int b = bh / H, h = bh % H;
      const float* q = Q + (size_t)b * st[0] + (size_t)h * st[1];
      f32_pack_panels(D, L, K + (size_t)b * st[3] + (size_t)h * st[4], st[6], st[5], kp);
      f32_pack_panels(L, Dv, V + (size_t)b * st[7] + (size_t)h * st[8], st[9], st[10], vp);
      const float* mk = mask ? mask + (size_t)b * st[11] + (size_t)h * st[12] : 0;
      float* y = Y + (size_t)b * st[14] + (size_t)h * st[15];
      for (int s0 = 0; s0 < S; s0 += ATTN_ROWS) {
        const int mb = S - s0 < ATTN_ROWS ? S - s0 : ATTN_ROWS;
        const Act none = {ACT_NONE, 0.0f, 0.0f};
        float inv[ATTN_ROWS];
        f32_gemm_t(mb, L, D, q + (size_t)s0 * st[2], st[2], kp, sc, L, 0, 0, none, tid);
        for (int r = 0; r < mb; r++)
          inv[r] = attn_exp_row(sc + (size_t)r * L, L, scale, mk ? mk + (size_t)(s0 + r) * st[13] : 0);
        f32_gemm_t(mb, Dv, L, sc, L, vp, y + (size_t)s0 * st[16], st[16], 0, 0, none, tid);
        for (int r = 0; r < mb; r++) attn_scale_row(y + (size_t)(s0 + r) * st[16], Dv, inv[r]);
      }
    }
  }
}
