/* generated from templates/f32-norm.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* Normalisation kernels (NCHW). */

/* y[n][c][i] = act(a[c] * x[n][c][i] + b[c]) */
KERNEL void f32_channel_affine(const float* x, float* y, int N, int C, int inner, const float* a,
                               const float* b, Act act) {
  for (int n = 0; n < N; n++) {
    for (int c = 0; c < C; c++) {
      const v128_t va = VSPLAT(a[c]), vb = VSPLAT(b[c]);
      const float* xp = x + ((size_t)n * C + c) * inner;
      float* yp = y + ((size_t)n * C + c) * inner;
      int i = 0;
      for (; i + 4 <= inner; i += 4) VSTORE(yp + i, act_apply(VFMA(VLOAD(xp + i), va, vb), act));
      for (; i < inner; i++) {
        float t[4] = {xp[i] * a[c] + b[c], 0, 0, 0};
        VSTORE(t, act_apply(VLOAD(t), act));
        yp[i] = t[0];
      }
    }
  }
}
