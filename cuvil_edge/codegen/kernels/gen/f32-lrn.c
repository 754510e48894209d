/* generated from templates/f32-lrn.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* Local response normalisation across channels (NCHW), 4 pixels at a time:
 * y = x / (bias + alpha/size * sum of x^2 over channels [c - (size-1)/2, c + size/2])^beta. Needs f32-unary. */
KERNEL void f32_lrn(int N, int C, int inner, const float* x, float* y, int size, float alpha_over_size,
                    float beta, float bias) {
  const int lo = (size - 1) / 2, hi = size / 2;
  for (int n = 0; n < N; n++) {
    const float* xn = x + (size_t)n * C * inner;
    float* yn = y + (size_t)n * C * inner;
    for (int c = 0; c < C; c++) {
      const int c0 = c - lo < 0 ? 0 : c - lo, c1 = c + hi >= C ? C - 1 : c + hi;
      for (int i = 0; i < inner; i += 4) {
        const int k = inner - i < 4 ? inner - i : 4;
        v128_t s = VSPLAT(0.0f);
        for (int cc = c0; cc <= c1; cc++) {
          v128_t v = load_k(xn + (size_t)cc * inner + i, k);
          s = VFMA(v, v, s);
        }
        v128_t d = VFMA(s, VSPLAT(alpha_over_size), VSPLAT(bias));
        v128_t scale = v_exp(wasm_f32x4_mul(VSPLAT(-beta), v_log(d)));
        store_k(yn + (size_t)c * inner + i, wasm_f32x4_mul(load_k(xn + (size_t)c * inner + i, k), scale), k);
      }
    }
  }
}
