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
 *
 * Two paths (qb4_gemm picks per block of 4 activation rows j, the tokens of a transformer):
 *  - 4x4 tile (4 output rows i x 4 tokens j): each chunk's nibbles are unpacked once, offset by the
 *    group's zero point (q - wz in -15..15 is a valid signed dot operand, so no sum(x) term is needed)
 *    and fed to the dots of all 4 tokens. Same integers as the GEMV path's dot(q, x) - wz * sum(x),
 *    but the epilogue sums whole-group dots: results may differ from the GEMV path by f32 rounding.
 *  - 4x1 GEMV (one token at a time, the rows left over after the 4x4 tiles): unpacking and the
 *    sum(x) dot are paid per token, which only pays off for M < 4.
 */

/* Rows i..i+3 (packed wp, scales sp, zero points zp) for tokens j..j+3 (x rows, stride ldx): out[t]
 * lanes = sum over groups of f32(dot) * ws. Per group the rows go in pairs, so the 8 accumulators, 4
 * unpacked chunks and 2 x chunks fit Cranelift's 16 registers; each pair's accumulators are half
 * reduced (adjacent lanes) right away, the two halves meet in one i32 vector per token. noinline for
 * the same reason as f32-gemm's loop (an epilogue in the same function degrades the allocation). */
static __attribute__((noinline)) void qb4_loop_4x4(int K, int G, const uint8_t* wp, const float* sp,
                                                   const int32_t* zp, const uint8_t* x, int ldx, v128_t* out) {
  const v128_t mask = wasm_i8x16_splat(0x0F);
  const int nc = G / 32, half = G / 2;
  v128_t f0 = wasm_f32x4_const_splat(0.0f);
  v128_t f1 = wasm_f32x4_const_splat(0.0f);
  v128_t f2 = wasm_f32x4_const_splat(0.0f);
  v128_t f3 = wasm_f32x4_const_splat(0.0f);
  for (int g = 0; g < K; g += G, wp += 2 * G, sp += 4, zp += 4) {
    v128_t p0, p1, p2, p3;  /* rows 0, 1 per token: [r0 lanes 0+2, r1 lanes 0+2, r0 lanes 1+3, r1 lanes 1+3] */
    {
      const v128_t z0 = wasm_i8x16_splat((int8_t)zp[0]);
      v128_t a00 = wasm_i32x4_const_splat(0);
      v128_t a01 = wasm_i32x4_const_splat(0);
      v128_t a02 = wasm_i32x4_const_splat(0);
      v128_t a03 = wasm_i32x4_const_splat(0);
      const v128_t z1 = wasm_i8x16_splat((int8_t)zp[1]);
      v128_t a10 = wasm_i32x4_const_splat(0);
      v128_t a11 = wasm_i32x4_const_splat(0);
      v128_t a12 = wasm_i32x4_const_splat(0);
      v128_t a13 = wasm_i32x4_const_splat(0);
      for (int c = 0; c < nc; c++) {
        const v128_t b0 = VLOAD(wp + 0 * half + c * 16);
        const v128_t l0 = wasm_i8x16_sub(wasm_v128_and(b0, mask), z0);
        const v128_t h0 = wasm_i8x16_sub(wasm_u8x16_shr(b0, 4), z0);
        const v128_t b1 = VLOAD(wp + 1 * half + c * 16);
        const v128_t l1 = wasm_i8x16_sub(wasm_v128_and(b1, mask), z1);
        const v128_t h1 = wasm_i8x16_sub(wasm_u8x16_shr(b1, 4), z1);
        {
          const v128_t xl = VLOAD(x + 0 * ldx + g + c * 32), xh = VLOAD(x + 0 * ldx + g + c * 32 + 16);
          a00 = QDOT7(h0, xh, QDOT7(l0, xl, a00));
          a10 = QDOT7(h1, xh, QDOT7(l1, xl, a10));
        }
        {
          const v128_t xl = VLOAD(x + 1 * ldx + g + c * 32), xh = VLOAD(x + 1 * ldx + g + c * 32 + 16);
          a01 = QDOT7(h0, xh, QDOT7(l0, xl, a01));
          a11 = QDOT7(h1, xh, QDOT7(l1, xl, a11));
        }
        {
          const v128_t xl = VLOAD(x + 2 * ldx + g + c * 32), xh = VLOAD(x + 2 * ldx + g + c * 32 + 16);
          a02 = QDOT7(h0, xh, QDOT7(l0, xl, a02));
          a12 = QDOT7(h1, xh, QDOT7(l1, xl, a12));
        }
        {
          const v128_t xl = VLOAD(x + 3 * ldx + g + c * 32), xh = VLOAD(x + 3 * ldx + g + c * 32 + 16);
          a03 = QDOT7(h0, xh, QDOT7(l0, xl, a03));
          a13 = QDOT7(h1, xh, QDOT7(l1, xl, a13));
        }
      }
      p0 = wasm_i32x4_add(wasm_i32x4_shuffle(a00, a10, 0, 4, 1, 5), wasm_i32x4_shuffle(a00, a10, 2, 6, 3, 7));
      p1 = wasm_i32x4_add(wasm_i32x4_shuffle(a01, a11, 0, 4, 1, 5), wasm_i32x4_shuffle(a01, a11, 2, 6, 3, 7));
      p2 = wasm_i32x4_add(wasm_i32x4_shuffle(a02, a12, 0, 4, 1, 5), wasm_i32x4_shuffle(a02, a12, 2, 6, 3, 7));
      p3 = wasm_i32x4_add(wasm_i32x4_shuffle(a03, a13, 0, 4, 1, 5), wasm_i32x4_shuffle(a03, a13, 2, 6, 3, 7));
    }
    {
      const v128_t z0 = wasm_i8x16_splat((int8_t)zp[2]);
      v128_t a00 = wasm_i32x4_const_splat(0);
      v128_t a01 = wasm_i32x4_const_splat(0);
      v128_t a02 = wasm_i32x4_const_splat(0);
      v128_t a03 = wasm_i32x4_const_splat(0);
      const v128_t z1 = wasm_i8x16_splat((int8_t)zp[3]);
      v128_t a10 = wasm_i32x4_const_splat(0);
      v128_t a11 = wasm_i32x4_const_splat(0);
      v128_t a12 = wasm_i32x4_const_splat(0);
      v128_t a13 = wasm_i32x4_const_splat(0);
      for (int c = 0; c < nc; c++) {
        const v128_t b0 = VLOAD(wp + 2 * half + c * 16);
        const v128_t l0 = wasm_i8x16_sub(wasm_v128_and(b0, mask), z0);
        const v128_t h0 = wasm_i8x16_sub(wasm_u8x16_shr(b0, 4), z0);
        const v128_t b1 = VLOAD(wp + 3 * half + c * 16);
        const v128_t l1 = wasm_i8x16_sub(wasm_v128_and(b1, mask), z1);
        const v128_t h1 = wasm_i8x16_sub(wasm_u8x16_shr(b1, 4), z1);
        {
          const v128_t xl = VLOAD(x + 0 * ldx + g + c * 32), xh = VLOAD(x + 0 * ldx + g + c * 32 + 16);
          a00 = QDOT7(h0, xh, QDOT7(l0, xl, a00));
          a10 = QDOT7(h1, xh, QDOT7(l1, xl, a10));
        }
        {
          const v128_t xl = VLOAD(x + 1 * ldx + g + c * 32), xh = VLOAD(x + 1 * ldx + g + c * 32 + 16);
          a01 = QDOT7(h0, xh, QDOT7(l0, xl, a01));
          a11 = QDOT7(h1, xh, QDOT7(l1, xl, a11));
        }
        {
          const v128_t xl = VLOAD(x + 2 * ldx + g + c * 32), xh = VLOAD(x + 2 * ldx + g + c * 32 + 16);
          a02 = QDOT7(h0, xh, QDOT7(l0, xl, a02));
          a12 = QDOT7(h1, xh, QDOT7(l1, xl, a12));
        }
        {
          const v128_t xl = VLOAD(x + 3 * ldx + g + c * 32), xh = VLOAD(x + 3 * ldx + g + c * 32 + 16);
          a03 = QDOT7(h0, xh, QDOT7(l0, xl, a03));
          a13 = QDOT7(h1, xh, QDOT7(l1, xl, a13));
        }
      }
      {
        const v128_t q = wasm_i32x4_add(wasm_i32x4_shuffle(a00, a10, 0, 4, 1, 5), wasm_i32x4_shuffle(a00, a10, 2, 6, 3, 7));
        const v128_t d = wasm_i32x4_add(wasm_i32x4_shuffle(p0, q, 0, 1, 4, 5), wasm_i32x4_shuffle(p0, q, 2, 3, 6, 7));
        f0 = wasm_f32x4_add(f0, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(d), VLOAD(sp)));
      }
      {
        const v128_t q = wasm_i32x4_add(wasm_i32x4_shuffle(a01, a11, 0, 4, 1, 5), wasm_i32x4_shuffle(a01, a11, 2, 6, 3, 7));
        const v128_t d = wasm_i32x4_add(wasm_i32x4_shuffle(p1, q, 0, 1, 4, 5), wasm_i32x4_shuffle(p1, q, 2, 3, 6, 7));
        f1 = wasm_f32x4_add(f1, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(d), VLOAD(sp)));
      }
      {
        const v128_t q = wasm_i32x4_add(wasm_i32x4_shuffle(a02, a12, 0, 4, 1, 5), wasm_i32x4_shuffle(a02, a12, 2, 6, 3, 7));
        const v128_t d = wasm_i32x4_add(wasm_i32x4_shuffle(p2, q, 0, 1, 4, 5), wasm_i32x4_shuffle(p2, q, 2, 3, 6, 7));
        f2 = wasm_f32x4_add(f2, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(d), VLOAD(sp)));
      }
      {
        const v128_t q = wasm_i32x4_add(wasm_i32x4_shuffle(a03, a13, 0, 4, 1, 5), wasm_i32x4_shuffle(a03, a13, 2, 6, 3, 7));
        const v128_t d = wasm_i32x4_add(wasm_i32x4_shuffle(p3, q, 0, 1, 4, 5), wasm_i32x4_shuffle(p3, q, 2, 3, 6, 7));
        f3 = wasm_f32x4_add(f3, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(d), VLOAD(sp)));
      }
    }
  }
  out[0] = f0;
  out[1] = f1;
  out[2] = f2;
  out[3] = f3;
}

/* Output rows i..i+ni-1 for tokens j..j+3: the 4x4 loop, then the epilogue. */
INLINE void qb4_tile_4x4(int K, int G, const uint8_t* wp, const float* sp, const int32_t* zp, v128_t vsc,
                         v128_t vb, const uint8_t* x, int ldx, const float* xs, const int32_t* xz,
                         int xstep, int j, float* y, int si, int sj, int ni, Act act) {
  v128_t f[4];
  qb4_loop_4x4(K, G, wp, sp, zp, x + (size_t)j * ldx, ldx, f);
  for (int t = 0; t < 4; t++) {
    const int jj = (j + t) * xstep;
    const v128_t r4 = wasm_f32x4_add(f[t], wasm_f32x4_mul(vsc, VSPLAT(-(float)xz[jj])));
    q_store4(wasm_f32x4_add(wasm_f32x4_mul(r4, VSPLAT(xs[jj])), vb), y + (size_t)(j + t) * sj, si, ni, act);
  }
}

/* Output rows i..i+ni-1 for the single token j (the GEMV path). */
INLINE void qb4_tile_4x1(int K, int G, const uint8_t* wp, const float* sp, const int32_t* zp, v128_t vsc,
                         v128_t vb, const uint8_t* x, int ldx, const float* xs, const int32_t* xz,
                         int xstep, int j, float* y, int si, int sj, int ni, Act act) {
  const int ng = K / G, nc = G / 32;
  const v128_t ones = wasm_i8x16_splat(1), mask = wasm_i8x16_splat(0x0F);
  const uint8_t* xr = x + (size_t)j * ldx;
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
  q_store4(wasm_f32x4_add(wasm_f32x4_mul(r4, VSPLAT(xs[jj])), vb), y + (size_t)j * sj, si, ni, act);
}

/* y[i*si + j*sj] for i < I, j < J: 4x4 tiles while 4 tokens remain, then the 4x1 GEMV path. */
KERNEL void qb4_gemm(int I, int J, int K, int G, const uint8_t* w, const float* ws, const int32_t* wz,
                     const float* wsc, const uint8_t* x, int ldx, const float* xs, const int32_t* xz,
                     int xstep, const float* bias, float* y, int si, int sj, Act act) {
  const int ng = K / G, J4 = J & ~3;
  for (int i = 0; i < I; i += 4) {
    const int ni = I - i < 4 ? I - i : 4;
    const v128_t vsc = VLOAD(wsc + i), vb = VLOAD(bias + i);
    const uint8_t* wp = w + (size_t)i * K / 2;
    const float* sp = ws + (size_t)i * ng;
    const int32_t* zp = wz + (size_t)i * ng;
    float* yi = y + (size_t)i * si;
    for (int j = 0; j < J4; j += 4)
      qb4_tile_4x4(K, G, wp, sp, zp, vsc, vb, x, ldx, xs, xz, xstep, j, yi, si, sj, ni, act);
    for (int j = J4; j < J; j++)
      qb4_tile_4x1(K, G, wp, sp, zp, vsc, vb, x, ldx, xs, xz, xstep, j, yi, si, sj, ni, act);
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
