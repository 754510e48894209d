/* generated from templates/qb4-gemm.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* 4-bit weight GEMM/GEMV (group-wise asymmetric weights, int8-dynamic or static 7-bit activations).
 *
 * Weights are unsigned nibbles q in 0..15 with one f32 scale ws and integer zero point wz per group
 * of G consecutive k (G a multiple of 32): w = ws * (q - wz). Packed [I/4][K/G][4 rows][G/2 bytes];
 * in each 16-byte chunk, byte t holds k = 32c + t (low nibble) and 32c + 16 + t (high nibble), so
 * unpacking is one AND and one unsigned shift per 32 weights, fused into the dot loop (the unpacked q
 * feeds the dot as its signed operand; activations are the 7-bit one: see qs8-gemm's header).
 * Per group: facc += f32(dot(q, x) - wz * sum(x)) * ws  (sum(x) from one extra dot with ones, shared by
 * the 4 rows); at the end y = (hsum(facc) - xz * wsc[i]) * xs + bias, wsc[i] = sum_g ws*(sum q - G*wz).
 * K must be a multiple of G (no over-read: non-zero zero points make padding bytes count).
 */
KERNEL void qb4_gemm(int I, int J, int K, int G, const uint8_t* w, const float* ws, const int32_t* wz,
                     const float* wsc, const uint8_t* x, int ldx, const float* xs, const int32_t* xz,
                     int xstep, const float* bias, float* y, int si, int sj, Act act) {
  const int ng = K / G, nc = G / 32;
  const v128_t ones = wasm_i8x16_splat(1), mask = wasm_i8x16_splat(0x0F);
  for (int i = 0; i < I; i += 4) {
    const int ni = I - i < 4 ? I - i : 4;
    const v128_t vsc = VLOAD(wsc + i), vb = VLOAD(bias + i);
    for (int j = 0; j < J; j++) {
      const uint8_t* xr = x + (size_t)j * ldx;
      const uint8_t* wp = w + (size_t)i * K / 2;
      const float* sp = ws + (size_t)i * ng;
      const int32_t* zp = wz + (size_t)i * ng;
      v128_t f0 = wasm_f32x4_const_splat(0.0f);
      v128_t f1 = wasm_f32x4_const_splat(0.0f);
      v128_t f2 = wasm_f32x4_const_splat(0.0f);
      v128_t f3 = wasm_f32x4_const_splat(0.0f);
      for (int g = 0; g < ng; g++) {
        v128_t xsum = wasm_i32x4_const_splat(0);
        v128_t a0 = xsum;
        v128_t a1 = xsum;
        v128_t a2 = xsum;
        v128_t a3 = xsum;
        for (int c = 0; c < nc; c++) {
          const int k = g * G + c * 32;
          const v128_t xl = VLOAD(xr + k), xh = VLOAD(xr + k + 16);
          xsum = QDOT7(ones, xl, xsum);
          xsum = QDOT7(ones, xh, xsum);
          {
            const v128_t b = VLOAD(wp + 0 * (G / 2) + c * 16);
            a0 = QDOT7(wasm_v128_and(b, mask), xl, a0);
            a0 = QDOT7(wasm_u8x16_shr(b, 4), xh, a0);
          }
          {
            const v128_t b = VLOAD(wp + 1 * (G / 2) + c * 16);
            a1 = QDOT7(wasm_v128_and(b, mask), xl, a1);
            a1 = QDOT7(wasm_u8x16_shr(b, 4), xh, a1);
          }
          {
            const v128_t b = VLOAD(wp + 2 * (G / 2) + c * 16);
            a2 = QDOT7(wasm_v128_and(b, mask), xl, a2);
            a2 = QDOT7(wasm_u8x16_shr(b, 4), xh, a2);
          }
          {
            const v128_t b = VLOAD(wp + 3 * (G / 2) + c * 16);
            a3 = QDOT7(wasm_v128_and(b, mask), xl, a3);
            a3 = QDOT7(wasm_u8x16_shr(b, 4), xh, a3);
          }
        }
        wp += 2 * G;
        const v128_t vs = VLOAD(sp + g * 4), vz = VLOAD(zp + g * 4);
        {
          const v128_t d = wasm_i32x4_sub(a0, wasm_i32x4_mul(xsum, wasm_i32x4_shuffle(vz, vz, 0, 0, 0, 0)));
          f0 = wasm_f32x4_add(f0, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(d), wasm_i32x4_shuffle(vs, vs, 0, 0, 0, 0)));
        }
        {
          const v128_t d = wasm_i32x4_sub(a1, wasm_i32x4_mul(xsum, wasm_i32x4_shuffle(vz, vz, 1, 1, 1, 1)));
          f1 = wasm_f32x4_add(f1, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(d), wasm_i32x4_shuffle(vs, vs, 1, 1, 1, 1)));
        }
        {
          const v128_t d = wasm_i32x4_sub(a2, wasm_i32x4_mul(xsum, wasm_i32x4_shuffle(vz, vz, 2, 2, 2, 2)));
          f2 = wasm_f32x4_add(f2, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(d), wasm_i32x4_shuffle(vs, vs, 2, 2, 2, 2)));
        }
        {
          const v128_t d = wasm_i32x4_sub(a3, wasm_i32x4_mul(xsum, wasm_i32x4_shuffle(vz, vz, 3, 3, 3, 3)));
          f3 = wasm_f32x4_add(f3, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(d), wasm_i32x4_shuffle(vs, vs, 3, 3, 3, 3)));
        }
      }
      const int jj = j * xstep;
      const v128_t r4 = wasm_f32x4_add(hsum4_f32(f0, f1, f2, f3), wasm_f32x4_mul(vsc, VSPLAT(-(float)xz[jj])));
      q_store4(wasm_f32x4_add(wasm_f32x4_mul(r4, VSPLAT(xs[jj])), vb), y + (size_t)i * si + (size_t)j * sj, si, ni, act);
    }
  }
}

/* Group-1 NCHW convolution with 4-bit weights ([M][C*kh*kw], K a multiple of G): im2col rows, then
 * qb4_gemm with output channels as i. */
KERNEL void qb4_conv2d(const uint8_t* xq, int N, int C, int H, int W, const uint8_t* w, const float* ws,
                       const int32_t* wz, const float* wsc, const float* bias, const float* xs,
                       const int32_t* xz, float* y, int M, int OH, int OW, int kh, int kw, int sh, int sw,
                       int dh, int dw, int pt, int pl, int G, int pchunk, uint8_t* col, Act act) {
  const int K = C * kh * kw, P = OH * OW;
  for (int n = 0; n < N; n++)
    for (int p0 = 0; p0 < P; p0 += pchunk) {
      const int pc = P - p0 < pchunk ? P - p0 : pchunk;
      qu8_im2col_rows(xq + (size_t)n * C * H * W, C, H, W, kh, kw, sh, sw, dh, dw, pt, pl, OW, p0, pc,
                      xz[0], col);
      qb4_gemm(M, pc, K, G, w, ws, wz, wsc, col, K, xs, xz, 0, bias, y + (size_t)n * M * P + p0, P, 1, act);
    }
}
