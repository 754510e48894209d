/* generated from templates/qs8-gemm.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* Integer GEMM for quantized conv/gemm: y[i][j] = dequant(sum_k w[i][k] * x[j][k]), int32 accumulation.
 *
 * Operands: w is int8 (signed, per-output-channel symmetric; rows padded to a multiple of 4, each row
 * ldw >= ceil16(K) bytes, zero padded), x is uint8 activations, row stride ldx, quantized per tensor
 * or per row j (scale xs, zero point xz; xstep 0 = one pair for all rows, 1 = one pair per row).
 * Zero points are compensated at the end, not in the loop: sum w (x - xz) = sum w x - xz * wsum[i],
 * with wsum the build-time row sums of w.
 *
 * Dot products (16 int8 x 16 uint8 -> 4 int32 partial sums):
 *  - x7 kernels (our quantizer: activations on a 0..127 grid) use i32x4.relaxed_dot_i8x16_i7x16_add_s
 *    under CUVIL_RELAXED with w as the signed operand and x as the 7-bit one, which x86 (pmaddubsw) and
 *    ARM (sdot) lower to the same exact answer; without relaxed SIMD they widen to i16 and use
 *    i32x4.dot_i16x8_s. Both sum the same products exactly, so the tiers agree bit for bit.
 *  - x8 kernels (imported uint8 activations, 0..255) always widen: the relaxed dot is not exact there.
 * The K loop reads whole 16-byte chunks: bytes past K meet zero weights (rows over-read into the next
 * row or the 64-byte region guard), so they add nothing.
 *
 * Dequantize / requantize (documented rounding): acc is exact int32; y = f32(acc - xz*wsum[i]) *
 * (ws[i] * xs[j]) + bias[i], each step one IEEE f32 operation rounded to nearest even (mul then add, no
 * FMA, so every tier gives identical floats), then the fused activation. Quantization of activations
 * (qu8_quantize*) is ONNX QuantizeLinear's: round(x / scale) half to even, + zero point, saturated.
 */

/* Lane l sums bytes 4l..4l+3, as the relaxed dot does: per-lane partial sums (which qb4 scales per
 * group before the horizontal sum) are then identical in both tiers, not just their totals. */
INLINE v128_t qdot_widen(v128_t w, v128_t x, v128_t acc) {
  const v128_t lo = wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(w), wasm_u16x8_extend_low_u8x16(x));
  const v128_t hi = wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(w), wasm_u16x8_extend_high_u8x16(x));
  return wasm_i32x4_add(acc, wasm_i32x4_add(wasm_i32x4_shuffle(lo, hi, 0, 2, 4, 6),
                                            wasm_i32x4_shuffle(lo, hi, 1, 3, 5, 7)));
}
#if CUVIL_RELAXED
#define QDOT7(w, x, acc) wasm_i32x4_relaxed_dot_i8x16_i7x16_add((w), (x), (acc))
#else
#define QDOT7(w, x, acc) qdot_widen((w), (x), (acc))
#endif
#define QDOT8(w, x, acc) qdot_widen((w), (x), (acc))

/* [sum(a0), sum(a1), sum(a2), sum(a3)] (i32 lanes) */
INLINE v128_t hsum4_i32(v128_t a0, v128_t a1, v128_t a2, v128_t a3) {
  const v128_t t0 = wasm_i32x4_add(wasm_i32x4_shuffle(a0, a1, 0, 4, 1, 5), wasm_i32x4_shuffle(a0, a1, 2, 6, 3, 7));
  const v128_t t1 = wasm_i32x4_add(wasm_i32x4_shuffle(a2, a3, 0, 4, 1, 5), wasm_i32x4_shuffle(a2, a3, 2, 6, 3, 7));
  return wasm_i32x4_add(wasm_i32x4_shuffle(t0, t1, 0, 1, 4, 5), wasm_i32x4_shuffle(t0, t1, 2, 3, 6, 7));
}

/* [sum(a0), sum(a1), sum(a2), sum(a3)] (f32 lanes) */
INLINE v128_t hsum4_f32(v128_t a0, v128_t a1, v128_t a2, v128_t a3) {
  const v128_t t0 = wasm_f32x4_add(wasm_i32x4_shuffle(a0, a1, 0, 4, 1, 5), wasm_i32x4_shuffle(a0, a1, 2, 6, 3, 7));
  const v128_t t1 = wasm_f32x4_add(wasm_i32x4_shuffle(a2, a3, 0, 4, 1, 5), wasm_i32x4_shuffle(a2, a3, 2, 6, 3, 7));
  return wasm_f32x4_add(wasm_i32x4_shuffle(t0, t1, 0, 1, 4, 5), wasm_i32x4_shuffle(t0, t1, 2, 3, 6, 7));
}

/* Store the first ni of 4 consecutive outputs i..i+3 (stride si) after the f32 epilogue. */
INLINE void q_store4(v128_t f, float* y, int si, int ni, Act act) {
  f = act_apply(f, act);
  if (si == 1 && ni == 4) { VSTORE(y, f); return; }
  float t[4] __attribute__((aligned(16)));
  VSTORE(t, f);
  for (int l = 0; l < ni; l++) y[(size_t)l * si] = t[l];
}

/* x -> clamp(round_half_even(x / scale) + zp, 0, qmax) as uint8, n values. */
KERNEL void qu8_quantize(int n, const float* x, uint8_t* y, const float* scale, const int32_t* zp, int qmax) {
  const v128_t vs = VSPLAT(scale[0]), vz = VSPLAT((float)zp[0]), vmax = VSPLAT((float)qmax);
  const v128_t vmin = wasm_f32x4_const_splat(0.0f);
  int i = 0;
  for (;; i += 16) {
    float t[16] __attribute__((aligned(16)));
    const float* src = x + i;
    const int left = n - i;
    if (left <= 0) break;
    if (left < 16) {
      for (int l = 0; l < 16; l++) t[l] = l < left ? x[i + l] : 0.0f;
      src = t;
    }
    v128_t q[4];
    for (int l = 0; l < 4; l++) {
      v128_t v = wasm_f32x4_add(wasm_f32x4_nearest(wasm_f32x4_div(VLOAD(src + 4 * l), vs)), vz);
      q[l] = wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_min(wasm_f32x4_max(v, vmin), vmax));
    }
    const v128_t b = wasm_u8x16_narrow_i16x8(wasm_i16x8_narrow_i32x4(q[0], q[1]),
                                             wasm_i16x8_narrow_i32x4(q[2], q[3]));
    if (left >= 16) {
      VSTORE(y + i, b);
    } else {
      uint8_t tb[16] __attribute__((aligned(16)));
      VSTORE(tb, b);
      for (int l = 0; l < left; l++) y[i + l] = tb[l];
    }
  }
}

/* Dynamic quantization: per row, range [min(0, x), max(0, x)] onto 0..qmax (ONNX DynamicQuantizeLinear
 * for qmax 255 and one row); scale and zero point written to scale[r], zp[r]. */
KERNEL void qu8_quantize_dyn(int rows, int K, const float* x, uint8_t* y, float* scale, int32_t* zp,
                             int qmax) {
  for (int r = 0; r < rows; r++) {
    const float* xr = x + (size_t)r * K;
    v128_t vmn = wasm_f32x4_const_splat(0.0f), vmx = vmn;
    int k = 0;
    for (; k + 4 <= K; k += 4) {
      const v128_t v = VLOAD(xr + k);
      vmn = wasm_f32x4_min(vmn, v);
      vmx = wasm_f32x4_max(vmx, v);
    }
    float tmn[4] __attribute__((aligned(16))), tmx[4] __attribute__((aligned(16)));
    VSTORE(tmn, vmn);
    VSTORE(tmx, vmx);
    float mn = 0.0f, mx = 0.0f;
    for (int l = 0; l < 4; l++) {
      mn = tmn[l] < mn ? tmn[l] : mn;
      mx = tmx[l] > mx ? tmx[l] : mx;
    }
    for (; k < K; k++) { mn = xr[k] < mn ? xr[k] : mn; mx = xr[k] > mx ? xr[k] : mx; }
    float s = (mx - mn) / (float)qmax;
    if (!(s > 0.0f)) s = 1.0f;
    float z = wasm_f32x4_extract_lane(wasm_f32x4_nearest(VSPLAT(-mn / s)), 0);
    z = z < 0.0f ? 0.0f : (z > (float)qmax ? (float)qmax : z);
    scale[r] = s;
    zp[r] = (int32_t)z;
    qu8_quantize(K, xr, y + (size_t)r * K, scale + r, zp + r, qmax);
  }
}

/* im2col on quantized NCHW input: output pixels [p0, p0+pc) as rows of K = C*kh*kw bytes; taps in the
 * padding read the zero point `pad` (the quantized 0.0). */
KERNEL void qu8_im2col_rows(const uint8_t* x, int C, int H, int W, int kh, int kw, int sh, int sw, int dh,
                            int dw, int pt, int pl, int OW, int p0, int pc, int pad, uint8_t* col) {
  const int K = C * kh * kw;
  for (int j = 0; j < pc; j++) {
    const int p = p0 + j, oy = p / OW, ox = p % OW;
    uint8_t* dst = col + (size_t)j * K;
    for (int c = 0; c < C; c++) {
      const uint8_t* xc = x + (size_t)c * H * W;
      for (int ky = 0; ky < kh; ky++) {
        const int iy = oy * sh - pt + ky * dh;
        for (int kx = 0; kx < kw; kx++) {
          const int ix = ox * sw - pl + kx * dw;
          *dst++ = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? xc[(size_t)iy * W + ix] : (uint8_t)pad;
        }
      }
    }
  }
}

/* 4 weight rows x 2 activation row(s), 7-bit activations. */
INLINE void qs8_ukernel_x7_4x2(int K, const int8_t* w, int ldw, const uint8_t* x, int ldx,
                                    v128_t* out) {
  const int8_t* w0 = w + 0 * ldw;
  v128_t a00 = wasm_i32x4_const_splat(0);
  v128_t a01 = wasm_i32x4_const_splat(0);
  const int8_t* w1 = w + 1 * ldw;
  v128_t a10 = wasm_i32x4_const_splat(0);
  v128_t a11 = wasm_i32x4_const_splat(0);
  const int8_t* w2 = w + 2 * ldw;
  v128_t a20 = wasm_i32x4_const_splat(0);
  v128_t a21 = wasm_i32x4_const_splat(0);
  const int8_t* w3 = w + 3 * ldw;
  v128_t a30 = wasm_i32x4_const_splat(0);
  v128_t a31 = wasm_i32x4_const_splat(0);
  for (int k = 0; k < K; k += 16) {
    const v128_t x0 = VLOAD(x + 0 * ldx + k);
    const v128_t x1 = VLOAD(x + 1 * ldx + k);
    {
      const v128_t q = VLOAD(w0 + k);
      a00 = QDOT7(q, x0, a00);
      a01 = QDOT7(q, x1, a01);
    }
    {
      const v128_t q = VLOAD(w1 + k);
      a10 = QDOT7(q, x0, a10);
      a11 = QDOT7(q, x1, a11);
    }
    {
      const v128_t q = VLOAD(w2 + k);
      a20 = QDOT7(q, x0, a20);
      a21 = QDOT7(q, x1, a21);
    }
    {
      const v128_t q = VLOAD(w3 + k);
      a30 = QDOT7(q, x0, a30);
      a31 = QDOT7(q, x1, a31);
    }
  }
  out[0] = hsum4_i32(a00, a10, a20, a30);
  out[1] = hsum4_i32(a01, a11, a21, a31);
}

/* 4 weight rows x 1 activation row(s), 7-bit activations. */
INLINE void qs8_ukernel_x7_4x1(int K, const int8_t* w, int ldw, const uint8_t* x, int ldx,
                                    v128_t* out) {
  const int8_t* w0 = w + 0 * ldw;
  v128_t a00 = wasm_i32x4_const_splat(0);
  const int8_t* w1 = w + 1 * ldw;
  v128_t a10 = wasm_i32x4_const_splat(0);
  const int8_t* w2 = w + 2 * ldw;
  v128_t a20 = wasm_i32x4_const_splat(0);
  const int8_t* w3 = w + 3 * ldw;
  v128_t a30 = wasm_i32x4_const_splat(0);
  for (int k = 0; k < K; k += 16) {
    const v128_t x0 = VLOAD(x + 0 * ldx + k);
    {
      const v128_t q = VLOAD(w0 + k);
      a00 = QDOT7(q, x0, a00);
    }
    {
      const v128_t q = VLOAD(w1 + k);
      a10 = QDOT7(q, x0, a10);
    }
    {
      const v128_t q = VLOAD(w2 + k);
      a20 = QDOT7(q, x0, a20);
    }
    {
      const v128_t q = VLOAD(w3 + k);
      a30 = QDOT7(q, x0, a30);
    }
  }
  out[0] = hsum4_i32(a00, a10, a20, a30);
}

/* y[i*si + j*sj] for i < I, j < J (see the header for operands and the epilogue). */
KERNEL void qs8_gemm_x7(int I, int J, int K, const int8_t* w, int ldw, const uint8_t* x, int ldx,
                          const float* xs, const int32_t* xz, int xstep, const int32_t* wsum,
                          const float* ws, const float* bias, float* y, int si, int sj, Act act) {
  for (int i = 0; i < I; i += 4) {
    const int ni = I - i < 4 ? I - i : 4;
    const v128_t vsum = VLOAD(wsum + i), vws = VLOAD(ws + i), vb = VLOAD(bias + i);
    const int8_t* wi = w + (size_t)i * ldw;
    int j = 0;
    v128_t acc[2];
    for (; j < J; j += 2) {
      const int nj = J - j < 2 ? J - j : 2;
      if (nj == 2) qs8_ukernel_x7_4x2(K, wi, ldw, x + (size_t)j * ldx, ldx, acc);
      else qs8_ukernel_x7_4x1(K, wi, ldw, x + (size_t)j * ldx, ldx, acc);
      for (int t = 0; t < nj; t++) {
        const int jj = (j + t) * xstep;
        const v128_t c = wasm_i32x4_sub(acc[t], wasm_i32x4_mul(vsum, wasm_i32x4_splat(xz[jj])));
        const v128_t f = wasm_f32x4_add(wasm_f32x4_mul(wasm_f32x4_convert_i32x4(c), wasm_f32x4_mul(vws, VSPLAT(xs[jj]))),
                                         vb);
        q_store4(f, y + (size_t)i * si + (size_t)(j + t) * sj, si, ni, act);
      }
    }
  }
}

/* NCHW convolution on quantized input xq: im2col rows per chunk of output pixels, then the GEMM with
 * output channels as i (rows padded to 4 per group: w [G][Mgp][ldw], wsum/ws/bias [G][Mgp]). */
KERNEL void qs8_conv2d_x7(const uint8_t* xq, int N, int C, int H, int W, const int8_t* w, int ldw,
                            const int32_t* wsum, const float* ws, const float* bias, const float* xs,
                            const int32_t* xz, float* y, int M, int OH, int OW, int G, int kh, int kw,
                            int sh, int sw, int dh, int dw, int pt, int pl, int pchunk, uint8_t* col,
                            Act act) {
  const int Cg = C / G, Mg = M / G, Mgp = (Mg + 3) & ~3, K = Cg * kh * kw, P = OH * OW;
  for (int n = 0; n < N; n++)
    for (int g = 0; g < G; g++)
      for (int p0 = 0; p0 < P; p0 += pchunk) {
        const int pc = P - p0 < pchunk ? P - p0 : pchunk;
        qu8_im2col_rows(xq + ((size_t)n * C + (size_t)g * Cg) * H * W, Cg, H, W, kh, kw, sh, sw, dh, dw,
                        pt, pl, OW, p0, pc, xz[0], col);
        qs8_gemm_x7(Mg, pc, K, w + (size_t)g * Mgp * ldw, ldw, col, K, xs, xz, 0, wsum + g * Mgp,
                      ws + g * Mgp, bias + g * Mgp, y + ((size_t)n * M + (size_t)g * Mg) * P + p0, P, 1, act);
      }
}

/* 4 weight rows x 2 activation row(s), 8-bit activations. */
INLINE void qs8_ukernel_x8_4x2(int K, const int8_t* w, int ldw, const uint8_t* x, int ldx,
                                    v128_t* out) {
  const int8_t* w0 = w + 0 * ldw;
  v128_t a00 = wasm_i32x4_const_splat(0);
  v128_t a01 = wasm_i32x4_const_splat(0);
  const int8_t* w1 = w + 1 * ldw;
  v128_t a10 = wasm_i32x4_const_splat(0);
  v128_t a11 = wasm_i32x4_const_splat(0);
  const int8_t* w2 = w + 2 * ldw;
  v128_t a20 = wasm_i32x4_const_splat(0);
  v128_t a21 = wasm_i32x4_const_splat(0);
  const int8_t* w3 = w + 3 * ldw;
  v128_t a30 = wasm_i32x4_const_splat(0);
  v128_t a31 = wasm_i32x4_const_splat(0);
  for (int k = 0; k < K; k += 16) {
    const v128_t x0 = VLOAD(x + 0 * ldx + k);
    const v128_t x1 = VLOAD(x + 1 * ldx + k);
    {
      const v128_t q = VLOAD(w0 + k);
      a00 = QDOT8(q, x0, a00);
      a01 = QDOT8(q, x1, a01);
    }
    {
      const v128_t q = VLOAD(w1 + k);
      a10 = QDOT8(q, x0, a10);
      a11 = QDOT8(q, x1, a11);
    }
    {
      const v128_t q = VLOAD(w2 + k);
      a20 = QDOT8(q, x0, a20);
      a21 = QDOT8(q, x1, a21);
    }
    {
      const v128_t q = VLOAD(w3 + k);
      a30 = QDOT8(q, x0, a30);
      a31 = QDOT8(q, x1, a31);
    }
  }
  out[0] = hsum4_i32(a00, a10, a20, a30);
  out[1] = hsum4_i32(a01, a11, a21, a31);
}

/* 4 weight rows x 1 activation row(s), 8-bit activations. */
INLINE void qs8_ukernel_x8_4x1(int K, const int8_t* w, int ldw, const uint8_t* x, int ldx,
                                    v128_t* out) {
  const int8_t* w0 = w + 0 * ldw;
  v128_t a00 = wasm_i32x4_const_splat(0);
  const int8_t* w1 = w + 1 * ldw;
  v128_t a10 = wasm_i32x4_const_splat(0);
  const int8_t* w2 = w + 2 * ldw;
  v128_t a20 = wasm_i32x4_const_splat(0);
  const int8_t* w3 = w + 3 * ldw;
  v128_t a30 = wasm_i32x4_const_splat(0);
  for (int k = 0; k < K; k += 16) {
    const v128_t x0 = VLOAD(x + 0 * ldx + k);
    {
      const v128_t q = VLOAD(w0 + k);
      a00 = QDOT8(q, x0, a00);
    }
    {
      const v128_t q = VLOAD(w1 + k);
      a10 = QDOT8(q, x0, a10);
    }
    {
      const v128_t q = VLOAD(w2 + k);
      a20 = QDOT8(q, x0, a20);
    }
    {
      const v128_t q = VLOAD(w3 + k);
      a30 = QDOT8(q, x0, a30);
    }
  }
  out[0] = hsum4_i32(a00, a10, a20, a30);
}

/* y[i*si + j*sj] for i < I, j < J (see the header for operands and the epilogue). */
KERNEL void qs8_gemm_x8(int I, int J, int K, const int8_t* w, int ldw, const uint8_t* x, int ldx,
                          const float* xs, const int32_t* xz, int xstep, const int32_t* wsum,
                          const float* ws, const float* bias, float* y, int si, int sj, Act act) {
  for (int i = 0; i < I; i += 4) {
    const int ni = I - i < 4 ? I - i : 4;
    const v128_t vsum = VLOAD(wsum + i), vws = VLOAD(ws + i), vb = VLOAD(bias + i);
    const int8_t* wi = w + (size_t)i * ldw;
    int j = 0;
    v128_t acc[2];
    for (; j < J; j += 2) {
      const int nj = J - j < 2 ? J - j : 2;
      if (nj == 2) qs8_ukernel_x8_4x2(K, wi, ldw, x + (size_t)j * ldx, ldx, acc);
      else qs8_ukernel_x8_4x1(K, wi, ldw, x + (size_t)j * ldx, ldx, acc);
      for (int t = 0; t < nj; t++) {
        const int jj = (j + t) * xstep;
        const v128_t c = wasm_i32x4_sub(acc[t], wasm_i32x4_mul(vsum, wasm_i32x4_splat(xz[jj])));
        const v128_t f = wasm_f32x4_add(wasm_f32x4_mul(wasm_f32x4_convert_i32x4(c), wasm_f32x4_mul(vws, VSPLAT(xs[jj]))),
                                         vb);
        q_store4(f, y + (size_t)i * si + (size_t)(j + t) * sj, si, ni, act);
      }
    }
  }
}

/* NCHW convolution on quantized input xq: im2col rows per chunk of output pixels, then the GEMM with
 * output channels as i (rows padded to 4 per group: w [G][Mgp][ldw], wsum/ws/bias [G][Mgp]). */
KERNEL void qs8_conv2d_x8(const uint8_t* xq, int N, int C, int H, int W, const int8_t* w, int ldw,
                            const int32_t* wsum, const float* ws, const float* bias, const float* xs,
                            const int32_t* xz, float* y, int M, int OH, int OW, int G, int kh, int kw,
                            int sh, int sw, int dh, int dw, int pt, int pl, int pchunk, uint8_t* col,
                            Act act) {
  const int Cg = C / G, Mg = M / G, Mgp = (Mg + 3) & ~3, K = Cg * kh * kw, P = OH * OW;
  for (int n = 0; n < N; n++)
    for (int g = 0; g < G; g++)
      for (int p0 = 0; p0 < P; p0 += pchunk) {
        const int pc = P - p0 < pchunk ? P - p0 : pchunk;
        qu8_im2col_rows(xq + ((size_t)n * C + (size_t)g * Cg) * H * W, Cg, H, W, kh, kw, sh, sw, dh, dw,
                        pt, pl, OW, p0, pc, xz[0], col);
        qs8_gemm_x8(Mg, pc, K, w + (size_t)g * Mgp * ldw, ldw, col, K, xs, xz, 0, wsum + g * Mgp,
                      ws + g * Mgp, bias + g * Mgp, y + ((size_t)n * M + (size_t)g * Mg) * P + p0, P, 1, act);
      }
}

/* y = (x - zp) * scale over n uint8 values (ONNX DequantizeLinear, per tensor). */
KERNEL void qu8_dequantize(int n, const uint8_t* x, float* y, const float* scale, const int32_t* zp) {
  for (int i = 0; i < n; i++) y[i] = (float)((int32_t)x[i] - zp[0]) * scale[0];
}
