/* generated from templates/f32-gemm.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* f32 GEMM: C[M,N] = act(A[M,K] . B[K,N] + bias), with B packed in 8-column panels.
 *
 * Packed B layout: panel p holds columns 8p..8p+7 as [K][8] (zero padded past N), so the microkernel
 * streams B contiguously. A is row-major with stride lda and is broadcast one lane at a time with
 * i32x4.shuffle from a 4-float load (v128.load32_splat lowers to a scalar load + shuffle on x86).
 * Tiles: MRx8 for MR in 1..4; 4x8 keeps 8 accumulators + 4 A + 2 B + 1 broadcast in 16 registers
 * (Cranelift uses only xmm0-15 on x86: bigger tiles spill).
 * Bias: bias_row (per output row, conv) or bias_col (per column, padded to 8; gemm), or neither.
 */
INLINE void f32_gemm_ukernel_4x8(int K, const float* a, int lda, const float* bp, float* c, int ldc,
                                     int nr, const float* bias_row, const float* bias_col, Act act) {
  const float* a0 = a + 0 * lda;
  const float* a1 = a + 1 * lda;
  const float* a2 = a + 2 * lda;
  const float* a3 = a + 3 * lda;
  v128_t b0 = wasm_f32x4_const_splat(0.0f), b1 = b0;
  if (bias_col) { b0 = VLOAD(bias_col); b1 = VLOAD(bias_col + 4); }
  v128_t c00 = b0, c01 = b1;
  if (bias_row) { c00 = VSPLAT(bias_row[0]); c01 = c00; }
  v128_t c10 = b0, c11 = b1;
  if (bias_row) { c10 = VSPLAT(bias_row[1]); c11 = c10; }
  v128_t c20 = b0, c21 = b1;
  if (bias_row) { c20 = VSPLAT(bias_row[2]); c21 = c20; }
  v128_t c30 = b0, c31 = b1;
  if (bias_row) { c30 = VSPLAT(bias_row[3]); c31 = c30; }
  int k = 0;
  for (; k + 4 <= K; k += 4) {
    const v128_t va0 = VLOAD(a0 + k);
    const v128_t va1 = VLOAD(a1 + k);
    const v128_t va2 = VLOAD(a2 + k);
    const v128_t va3 = VLOAD(a3 + k);
    b0 = VLOAD(bp + 0); b1 = VLOAD(bp + 4);
    {
      const v128_t s = wasm_i32x4_shuffle(va0, va0, 0, 0, 0, 0);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va1, va1, 0, 0, 0, 0);
      c10 = VFMA(s, b0, c10);
      c11 = VFMA(s, b1, c11);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va2, va2, 0, 0, 0, 0);
      c20 = VFMA(s, b0, c20);
      c21 = VFMA(s, b1, c21);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va3, va3, 0, 0, 0, 0);
      c30 = VFMA(s, b0, c30);
      c31 = VFMA(s, b1, c31);
    }
    b0 = VLOAD(bp + 8); b1 = VLOAD(bp + 12);
    {
      const v128_t s = wasm_i32x4_shuffle(va0, va0, 1, 1, 1, 1);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va1, va1, 1, 1, 1, 1);
      c10 = VFMA(s, b0, c10);
      c11 = VFMA(s, b1, c11);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va2, va2, 1, 1, 1, 1);
      c20 = VFMA(s, b0, c20);
      c21 = VFMA(s, b1, c21);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va3, va3, 1, 1, 1, 1);
      c30 = VFMA(s, b0, c30);
      c31 = VFMA(s, b1, c31);
    }
    b0 = VLOAD(bp + 16); b1 = VLOAD(bp + 20);
    {
      const v128_t s = wasm_i32x4_shuffle(va0, va0, 2, 2, 2, 2);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va1, va1, 2, 2, 2, 2);
      c10 = VFMA(s, b0, c10);
      c11 = VFMA(s, b1, c11);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va2, va2, 2, 2, 2, 2);
      c20 = VFMA(s, b0, c20);
      c21 = VFMA(s, b1, c21);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va3, va3, 2, 2, 2, 2);
      c30 = VFMA(s, b0, c30);
      c31 = VFMA(s, b1, c31);
    }
    b0 = VLOAD(bp + 24); b1 = VLOAD(bp + 28);
    {
      const v128_t s = wasm_i32x4_shuffle(va0, va0, 3, 3, 3, 3);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va1, va1, 3, 3, 3, 3);
      c10 = VFMA(s, b0, c10);
      c11 = VFMA(s, b1, c11);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va2, va2, 3, 3, 3, 3);
      c20 = VFMA(s, b0, c20);
      c21 = VFMA(s, b1, c21);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va3, va3, 3, 3, 3, 3);
      c30 = VFMA(s, b0, c30);
      c31 = VFMA(s, b1, c31);
    }
    bp += 32;
  }
  for (; k < K; k++) {
    b0 = VLOAD(bp); b1 = VLOAD(bp + 4);
    {
      const v128_t s = VSPLAT(a0[k]);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    {
      const v128_t s = VSPLAT(a1[k]);
      c10 = VFMA(s, b0, c10);
      c11 = VFMA(s, b1, c11);
    }
    {
      const v128_t s = VSPLAT(a2[k]);
      c20 = VFMA(s, b0, c20);
      c21 = VFMA(s, b1, c21);
    }
    {
      const v128_t s = VSPLAT(a3[k]);
      c30 = VFMA(s, b0, c30);
      c31 = VFMA(s, b1, c31);
    }
    bp += 8;
  }
  c00 = act_apply(c00, act); c01 = act_apply(c01, act);
  c10 = act_apply(c10, act); c11 = act_apply(c11, act);
  c20 = act_apply(c20, act); c21 = act_apply(c21, act);
  c30 = act_apply(c30, act); c31 = act_apply(c31, act);
  if (nr == 8) {
    VSTORE(c + 0 * ldc, c00); VSTORE(c + 0 * ldc + 4, c01);
    VSTORE(c + 1 * ldc, c10); VSTORE(c + 1 * ldc + 4, c11);
    VSTORE(c + 2 * ldc, c20); VSTORE(c + 2 * ldc + 4, c21);
    VSTORE(c + 3 * ldc, c30); VSTORE(c + 3 * ldc + 4, c31);
  } else {
    float t[8] __attribute__((aligned(16)));
    VSTORE(t, c00); VSTORE(t + 4, c01);
    for (int j = 0; j < nr; j++) c[0 * ldc + j] = t[j];
    VSTORE(t, c10); VSTORE(t + 4, c11);
    for (int j = 0; j < nr; j++) c[1 * ldc + j] = t[j];
    VSTORE(t, c20); VSTORE(t + 4, c21);
    for (int j = 0; j < nr; j++) c[2 * ldc + j] = t[j];
    VSTORE(t, c30); VSTORE(t + 4, c31);
    for (int j = 0; j < nr; j++) c[3 * ldc + j] = t[j];
  }
}

INLINE void f32_gemm_ukernel_3x8(int K, const float* a, int lda, const float* bp, float* c, int ldc,
                                     int nr, const float* bias_row, const float* bias_col, Act act) {
  const float* a0 = a + 0 * lda;
  const float* a1 = a + 1 * lda;
  const float* a2 = a + 2 * lda;
  v128_t b0 = wasm_f32x4_const_splat(0.0f), b1 = b0;
  if (bias_col) { b0 = VLOAD(bias_col); b1 = VLOAD(bias_col + 4); }
  v128_t c00 = b0, c01 = b1;
  if (bias_row) { c00 = VSPLAT(bias_row[0]); c01 = c00; }
  v128_t c10 = b0, c11 = b1;
  if (bias_row) { c10 = VSPLAT(bias_row[1]); c11 = c10; }
  v128_t c20 = b0, c21 = b1;
  if (bias_row) { c20 = VSPLAT(bias_row[2]); c21 = c20; }
  int k = 0;
  for (; k + 4 <= K; k += 4) {
    const v128_t va0 = VLOAD(a0 + k);
    const v128_t va1 = VLOAD(a1 + k);
    const v128_t va2 = VLOAD(a2 + k);
    b0 = VLOAD(bp + 0); b1 = VLOAD(bp + 4);
    {
      const v128_t s = wasm_i32x4_shuffle(va0, va0, 0, 0, 0, 0);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va1, va1, 0, 0, 0, 0);
      c10 = VFMA(s, b0, c10);
      c11 = VFMA(s, b1, c11);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va2, va2, 0, 0, 0, 0);
      c20 = VFMA(s, b0, c20);
      c21 = VFMA(s, b1, c21);
    }
    b0 = VLOAD(bp + 8); b1 = VLOAD(bp + 12);
    {
      const v128_t s = wasm_i32x4_shuffle(va0, va0, 1, 1, 1, 1);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va1, va1, 1, 1, 1, 1);
      c10 = VFMA(s, b0, c10);
      c11 = VFMA(s, b1, c11);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va2, va2, 1, 1, 1, 1);
      c20 = VFMA(s, b0, c20);
      c21 = VFMA(s, b1, c21);
    }
    b0 = VLOAD(bp + 16); b1 = VLOAD(bp + 20);
    {
      const v128_t s = wasm_i32x4_shuffle(va0, va0, 2, 2, 2, 2);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va1, va1, 2, 2, 2, 2);
      c10 = VFMA(s, b0, c10);
      c11 = VFMA(s, b1, c11);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va2, va2, 2, 2, 2, 2);
      c20 = VFMA(s, b0, c20);
      c21 = VFMA(s, b1, c21);
    }
    b0 = VLOAD(bp + 24); b1 = VLOAD(bp + 28);
    {
      const v128_t s = wasm_i32x4_shuffle(va0, va0, 3, 3, 3, 3);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va1, va1, 3, 3, 3, 3);
      c10 = VFMA(s, b0, c10);
      c11 = VFMA(s, b1, c11);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va2, va2, 3, 3, 3, 3);
      c20 = VFMA(s, b0, c20);
      c21 = VFMA(s, b1, c21);
    }
    bp += 32;
  }
  for (; k < K; k++) {
    b0 = VLOAD(bp); b1 = VLOAD(bp + 4);
    {
      const v128_t s = VSPLAT(a0[k]);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    {
      const v128_t s = VSPLAT(a1[k]);
      c10 = VFMA(s, b0, c10);
      c11 = VFMA(s, b1, c11);
    }
    {
      const v128_t s = VSPLAT(a2[k]);
      c20 = VFMA(s, b0, c20);
      c21 = VFMA(s, b1, c21);
    }
    bp += 8;
  }
  c00 = act_apply(c00, act); c01 = act_apply(c01, act);
  c10 = act_apply(c10, act); c11 = act_apply(c11, act);
  c20 = act_apply(c20, act); c21 = act_apply(c21, act);
  if (nr == 8) {
    VSTORE(c + 0 * ldc, c00); VSTORE(c + 0 * ldc + 4, c01);
    VSTORE(c + 1 * ldc, c10); VSTORE(c + 1 * ldc + 4, c11);
    VSTORE(c + 2 * ldc, c20); VSTORE(c + 2 * ldc + 4, c21);
  } else {
    float t[8] __attribute__((aligned(16)));
    VSTORE(t, c00); VSTORE(t + 4, c01);
    for (int j = 0; j < nr; j++) c[0 * ldc + j] = t[j];
    VSTORE(t, c10); VSTORE(t + 4, c11);
    for (int j = 0; j < nr; j++) c[1 * ldc + j] = t[j];
    VSTORE(t, c20); VSTORE(t + 4, c21);
    for (int j = 0; j < nr; j++) c[2 * ldc + j] = t[j];
  }
}

INLINE void f32_gemm_ukernel_2x8(int K, const float* a, int lda, const float* bp, float* c, int ldc,
                                     int nr, const float* bias_row, const float* bias_col, Act act) {
  const float* a0 = a + 0 * lda;
  const float* a1 = a + 1 * lda;
  v128_t b0 = wasm_f32x4_const_splat(0.0f), b1 = b0;
  if (bias_col) { b0 = VLOAD(bias_col); b1 = VLOAD(bias_col + 4); }
  v128_t c00 = b0, c01 = b1;
  if (bias_row) { c00 = VSPLAT(bias_row[0]); c01 = c00; }
  v128_t c10 = b0, c11 = b1;
  if (bias_row) { c10 = VSPLAT(bias_row[1]); c11 = c10; }
  int k = 0;
  for (; k + 4 <= K; k += 4) {
    const v128_t va0 = VLOAD(a0 + k);
    const v128_t va1 = VLOAD(a1 + k);
    b0 = VLOAD(bp + 0); b1 = VLOAD(bp + 4);
    {
      const v128_t s = wasm_i32x4_shuffle(va0, va0, 0, 0, 0, 0);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va1, va1, 0, 0, 0, 0);
      c10 = VFMA(s, b0, c10);
      c11 = VFMA(s, b1, c11);
    }
    b0 = VLOAD(bp + 8); b1 = VLOAD(bp + 12);
    {
      const v128_t s = wasm_i32x4_shuffle(va0, va0, 1, 1, 1, 1);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va1, va1, 1, 1, 1, 1);
      c10 = VFMA(s, b0, c10);
      c11 = VFMA(s, b1, c11);
    }
    b0 = VLOAD(bp + 16); b1 = VLOAD(bp + 20);
    {
      const v128_t s = wasm_i32x4_shuffle(va0, va0, 2, 2, 2, 2);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va1, va1, 2, 2, 2, 2);
      c10 = VFMA(s, b0, c10);
      c11 = VFMA(s, b1, c11);
    }
    b0 = VLOAD(bp + 24); b1 = VLOAD(bp + 28);
    {
      const v128_t s = wasm_i32x4_shuffle(va0, va0, 3, 3, 3, 3);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(va1, va1, 3, 3, 3, 3);
      c10 = VFMA(s, b0, c10);
      c11 = VFMA(s, b1, c11);
    }
    bp += 32;
  }
  for (; k < K; k++) {
    b0 = VLOAD(bp); b1 = VLOAD(bp + 4);
    {
      const v128_t s = VSPLAT(a0[k]);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    {
      const v128_t s = VSPLAT(a1[k]);
      c10 = VFMA(s, b0, c10);
      c11 = VFMA(s, b1, c11);
    }
    bp += 8;
  }
  c00 = act_apply(c00, act); c01 = act_apply(c01, act);
  c10 = act_apply(c10, act); c11 = act_apply(c11, act);
  if (nr == 8) {
    VSTORE(c + 0 * ldc, c00); VSTORE(c + 0 * ldc + 4, c01);
    VSTORE(c + 1 * ldc, c10); VSTORE(c + 1 * ldc + 4, c11);
  } else {
    float t[8] __attribute__((aligned(16)));
    VSTORE(t, c00); VSTORE(t + 4, c01);
    for (int j = 0; j < nr; j++) c[0 * ldc + j] = t[j];
    VSTORE(t, c10); VSTORE(t + 4, c11);
    for (int j = 0; j < nr; j++) c[1 * ldc + j] = t[j];
  }
}

INLINE void f32_gemm_ukernel_1x8(int K, const float* a, int lda, const float* bp, float* c, int ldc,
                                     int nr, const float* bias_row, const float* bias_col, Act act) {
  const float* a0 = a + 0 * lda;
  v128_t b0 = wasm_f32x4_const_splat(0.0f), b1 = b0;
  if (bias_col) { b0 = VLOAD(bias_col); b1 = VLOAD(bias_col + 4); }
  v128_t c00 = b0, c01 = b1;
  if (bias_row) { c00 = VSPLAT(bias_row[0]); c01 = c00; }
  int k = 0;
  for (; k + 4 <= K; k += 4) {
    const v128_t va0 = VLOAD(a0 + k);
    b0 = VLOAD(bp + 0); b1 = VLOAD(bp + 4);
    {
      const v128_t s = wasm_i32x4_shuffle(va0, va0, 0, 0, 0, 0);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    b0 = VLOAD(bp + 8); b1 = VLOAD(bp + 12);
    {
      const v128_t s = wasm_i32x4_shuffle(va0, va0, 1, 1, 1, 1);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    b0 = VLOAD(bp + 16); b1 = VLOAD(bp + 20);
    {
      const v128_t s = wasm_i32x4_shuffle(va0, va0, 2, 2, 2, 2);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    b0 = VLOAD(bp + 24); b1 = VLOAD(bp + 28);
    {
      const v128_t s = wasm_i32x4_shuffle(va0, va0, 3, 3, 3, 3);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    bp += 32;
  }
  for (; k < K; k++) {
    b0 = VLOAD(bp); b1 = VLOAD(bp + 4);
    {
      const v128_t s = VSPLAT(a0[k]);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    bp += 8;
  }
  c00 = act_apply(c00, act); c01 = act_apply(c01, act);
  if (nr == 8) {
    VSTORE(c + 0 * ldc, c00); VSTORE(c + 0 * ldc + 4, c01);
  } else {
    float t[8] __attribute__((aligned(16)));
    VSTORE(t, c00); VSTORE(t + 4, c01);
    for (int j = 0; j < nr; j++) c[0 * ldc + j] = t[j];
  }
}

/* Packed-A microkernel: A in 4-row panels [K][4] (zero padded), so one load per k step feeds all four
 * rows through lane shuffles and the k loop needs no unrolling. The loop lives in its own function and
 * hands its 8 accumulators over through memory: with bias, activation and edge handling in the same
 * function Cranelift's register allocation of the loop degrades 2x (measured); this way the loop keeps
 * 8 accumulators + A + two B + one broadcast in registers (1.5x the unpacked-A kernel).
 * B rows are `bstride` floats apart: 8 for packed panels, the row length for a row-major B read in
 * place (1x1 convolutions: no packing at all; the last panel reads past its row, lanes never stored). */
static __attribute__((noinline)) void f32_gemm_loop_4x8(int K, const float* ap, const float* bp, int bstride,
                                                        v128_t* acc) {
  v128_t c00 = wasm_f32x4_const_splat(0.0f), c01 = c00;
  v128_t c10 = wasm_f32x4_const_splat(0.0f), c11 = c10;
  v128_t c20 = wasm_f32x4_const_splat(0.0f), c21 = c20;
  v128_t c30 = wasm_f32x4_const_splat(0.0f), c31 = c30;
  const float* aend = ap + (size_t)4 * K;
  while (ap < aend) {
    const v128_t b0 = VLOAD(bp), b1 = VLOAD(bp + 4);
    const v128_t a = VLOAD(ap);
    bp += bstride; ap += 4;
    {
      const v128_t s = wasm_i32x4_shuffle(a, a, 0, 0, 0, 0);
      c00 = VFMA(s, b0, c00);
      c01 = VFMA(s, b1, c01);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(a, a, 1, 1, 1, 1);
      c10 = VFMA(s, b0, c10);
      c11 = VFMA(s, b1, c11);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(a, a, 2, 2, 2, 2);
      c20 = VFMA(s, b0, c20);
      c21 = VFMA(s, b1, c21);
    }
    {
      const v128_t s = wasm_i32x4_shuffle(a, a, 3, 3, 3, 3);
      c30 = VFMA(s, b0, c30);
      c31 = VFMA(s, b1, c31);
    }
  }
  acc[0] = c00; acc[1] = c01;
  acc[2] = c10; acc[3] = c11;
  acc[4] = c20; acc[5] = c21;
  acc[6] = c30; acc[7] = c31;
}

/* Bias, activation and store of one 4x8 tile (the first mr rows, nr columns). ``act`` by value: the
 * compiler then knows the stores to c cannot change it and hoists its dispatch out of the rows. */
INLINE void f32_gemm_tile_4x8(const v128_t* acc, float* c, int ldc, int mr, int nr, const float* bias_row,
                              v128_t bc0, v128_t bc1, Act act) {
  for (int r = 0; r < mr; r++) {
    const v128_t br = bias_row ? VSPLAT(bias_row[r]) : wasm_f32x4_const_splat(0.0f);
    const v128_t v0 = act_apply(wasm_f32x4_add(wasm_f32x4_add(acc[2 * r], bc0), br), act);
    const v128_t v1 = act_apply(wasm_f32x4_add(wasm_f32x4_add(acc[2 * r + 1], bc1), br), act);
    float* cr = c + (size_t)r * ldc;
    if (nr == 8) {
      VSTORE(cr, v0); VSTORE(cr + 4, v1);
    } else {
      float t[8] __attribute__((aligned(16)));
      VSTORE(t, v0); VSTORE(t + 4, v1);
      for (int j = 0; j < nr; j++) cr[j] = t[j];
    }
  }
}

/* GEMV loops (1 or 2 rows): MR rows x NP 8-column panels, 2 * MR * NP independent FMA chains sharing one
 * broadcast per row and k step. The 1x8 tile keeps two chains in flight and is latency bound (11
 * GFLOP/s; 1x24: 20, 2x16: 23). 1x32 spills (Cranelift's FMA ties its result to the first factor,
 * hence the B vector first: it dies there, the broadcast would need a copy per use). Own noinline
 * function, accumulators handed over through memory as NP tiles in f32_gemm_tile_4x8's layout
 * (panel p, row r at acc[2 * (MR * p + r)]), for the same register-allocation reason as the 4x8 loop. */
static __attribute__((noinline)) void f32_gemv_loop_1x24(int K, const float* a, int lda, const float* bp,
                                                          int bpanel, v128_t* acc) {
  const float* b0 = bp + 0 * (size_t)bpanel;
  const float* b1 = bp + 1 * (size_t)bpanel;
  const float* b2 = bp + 2 * (size_t)bpanel;
  const float* a0 = a + 0 * lda;
  v128_t c000 = wasm_f32x4_const_splat(0.0f), c001 = c000;
  v128_t c100 = wasm_f32x4_const_splat(0.0f), c101 = c100;
  v128_t c200 = wasm_f32x4_const_splat(0.0f), c201 = c200;
  for (int k = 0; k < K; k++) {
    const v128_t s0 = VSPLAT(a0[k]);
    {
      const v128_t v0 = VLOAD(b0), v1 = VLOAD(b0 + 4);
      b0 += 8;
      c000 = VFMA(v0, s0, c000);
      c001 = VFMA(v1, s0, c001);
    }
    {
      const v128_t v0 = VLOAD(b1), v1 = VLOAD(b1 + 4);
      b1 += 8;
      c100 = VFMA(v0, s0, c100);
      c101 = VFMA(v1, s0, c101);
    }
    {
      const v128_t v0 = VLOAD(b2), v1 = VLOAD(b2 + 4);
      b2 += 8;
      c200 = VFMA(v0, s0, c200);
      c201 = VFMA(v1, s0, c201);
    }
  }
  acc[0] = c000; acc[1] = c001;
  acc[2] = c100; acc[3] = c101;
  acc[4] = c200; acc[5] = c201;
}

static __attribute__((noinline)) void f32_gemv_loop_2x16(int K, const float* a, int lda, const float* bp,
                                                          int bpanel, v128_t* acc) {
  const float* b0 = bp + 0 * (size_t)bpanel;
  const float* b1 = bp + 1 * (size_t)bpanel;
  const float* a0 = a + 0 * lda;
  const float* a1 = a + 1 * lda;
  v128_t c000 = wasm_f32x4_const_splat(0.0f), c001 = c000;
  v128_t c010 = wasm_f32x4_const_splat(0.0f), c011 = c010;
  v128_t c100 = wasm_f32x4_const_splat(0.0f), c101 = c100;
  v128_t c110 = wasm_f32x4_const_splat(0.0f), c111 = c110;
  for (int k = 0; k < K; k++) {
    const v128_t s0 = VSPLAT(a0[k]);
    const v128_t s1 = VSPLAT(a1[k]);
    {
      const v128_t v0 = VLOAD(b0), v1 = VLOAD(b0 + 4);
      b0 += 8;
      c000 = VFMA(v0, s0, c000);
      c001 = VFMA(v1, s0, c001);
      c010 = VFMA(v0, s1, c010);
      c011 = VFMA(v1, s1, c011);
    }
    {
      const v128_t v0 = VLOAD(b1), v1 = VLOAD(b1 + 4);
      b1 += 8;
      c100 = VFMA(v0, s0, c100);
      c101 = VFMA(v1, s0, c101);
      c110 = VFMA(v0, s1, c110);
      c111 = VFMA(v1, s1, c111);
    }
  }
  acc[0] = c000; acc[1] = c001;
  acc[2] = c010; acc[3] = c011;
  acc[4] = c100; acc[5] = c101;
  acc[6] = c110; acc[7] = c111;
}

/* Rows of A kept hot per pass over B's panels: about 128 KiB of A, L2-resident next to the streamed
 * B panels (measured best of 64/128/256/512 KiB). */
INLINE int gemm_row_block(int K) {
  int mc = (32768 / (K > 0 ? K : 1)) & ~3;
  return mc < 4 ? 4 : mc;
}

/* C = act(A . B + bias) with A already packed in 4-row panels ([ceil(M/4)][K][4]; conv weights are
 * packed this way at build time). B: 8-column panel j/8 starts at B + (j/8) * bpanel and its rows are
 * brow floats apart (packed panels: bpanel = 8K, brow = 8; row-major B in place: bpanel = 8, brow = N). */
KERNEL void f32_gemm_pa(int M, int N, int K, const float* Ap, const float* B, int bpanel, int brow, float* C,
                        int ldc, const float* bias_row, const float* bias_col, Act act) {
  const int MC = gemm_row_block(K);
  const v128_t zero = wasm_f32x4_const_splat(0.0f);
  for (int i0 = 0; i0 < M; i0 += MC) {
    const int i1 = i0 + MC < M ? i0 + MC : M;
    for (int j = 0; j < N; j += 8) {
      const float* bp = B + (size_t)(j / 8) * bpanel;
      const v128_t bc0 = bias_col ? VLOAD(bias_col + j) : zero, bc1 = bias_col ? VLOAD(bias_col + j + 4) : zero;
      const int nr = N - j < 8 ? N - j : 8;
      for (int i = i0; i < i1; i += 4) {
        v128_t acc[8];
        f32_gemm_loop_4x8(K, Ap + (size_t)i * K, bp, brow, acc);
        f32_gemm_tile_4x8(acc, C + (size_t)i * ldc + j, ldc, i1 - i < 4 ? i1 - i : 4, nr,
                          bias_row ? bias_row + i : 0, bc0, bc1, act);
      }
    }
  }
}

/* The threads' split of f32_gemm_pa (every tile is computed as in the single-threaded call): whole
 * 8-column panels when there are at least two per thread and A is small; whole 4-row panels when A is
 * over 256 KiB (a column piece streams all of A, so pieces of columns read a big A once each: a 1x1 conv
 * of ResNet-50's last stages read its 1-4 MiB of weights 7 times over) or columns are few, as long as
 * there are two row panels a thread. Measured 2026-12-06, 2 threads, interleaved A/B: fp32 ResNet-50
 * 224 5% faster, MobileNetV2 224 4%, YOLOv8n-style 320 1% (a 1 MiB bound: 5%, 4%, 1%). */
INLINE int f32_gemm_pa_by_cols(int M, int N, int K, int nt) {
  return nt == 1 || (M + 3) / 4 < 2 * nt || ((N + 7) / 8 >= 2 * nt && (size_t)M * K <= 65536);
}

/* Columns (by_cols) or rows [lo, hi) of f32_gemm_pa. */
INLINE void f32_gemm_pa_range(int by_cols, int lo, int hi, int M, int N, int K, const float* Ap, const float* B,
                              int bpanel, int brow, float* C, int ldc, const float* bias_row,
                              const float* bias_col, Act act) {
  if (lo >= hi) return;
  if (by_cols)
    f32_gemm_pa(M, hi - lo, K, Ap, B + (size_t)(lo / 8) * bpanel, bpanel, brow, C + lo, ldc, bias_row,
                bias_col ? bias_col + lo : 0, act);
  else
    f32_gemm_pa(hi - lo, N, K, Ap + (size_t)lo * K, B, bpanel, brow, C + (size_t)lo * ldc, ldc,
                bias_row ? bias_row + lo : 0, bias_col, act);
}

/* f32_gemm_pa on every thread of a split node, in chunks claimed from a shared counter (cuvil_chunks). */
INLINE void f32_gemm_pa_part(int M, int N, int K, const float* Ap, const float* B, int bpanel, int brow, float* C,
                             int ldc, const float* bias_row, const float* bias_col, Act act, int tid, int nt) {
  const int by_cols = f32_gemm_pa_by_cols(M, N, K, nt);
  CuvilChunks d = by_cols ? cuvil_chunks(N, 8, tid, nt) : cuvil_chunks(M, 4, tid, nt);
  for (int lo, hi; cuvil_chunk(&d, &lo, &hi);)
    f32_gemm_pa_range(by_cols, lo, hi, M, N, K, Ap, B, bpanel, brow, C, ldc, bias_row, bias_col, act);
}

/* Pack rows [0, m) of A (stride lda) into 4-row panels, zero padding the last one. */
KERNEL void f32_pack_a(int m, int K, const float* A, int lda, float* Ap) {
  for (int i = 0; i < m; i += 4) {
    const float* r0 = A + (size_t)i * lda;
    const int mr = m - i < 4 ? m - i : 4;
    for (int k = 0; k < K; k++, Ap += 4) {
      Ap[0] = r0[k];
      Ap[1] = mr > 1 ? r0[lda + k] : 0.0f;
      Ap[2] = mr > 2 ? r0[2 * lda + k] : 0.0f;
      Ap[3] = mr > 3 ? r0[3 * (size_t)lda + k] : 0.0f;
    }
  }
}

/* A row block packed per call, one buffer per thread: a static one in a single-threaded module; in a
 * threaded one the emitter places thread 0's below the weights and each other thread's in its own region
 * (CUVIL_APACK), so a module built for 4 threads running on 1 has memory for one buffer, not four. */
#define GEMM_APACK_FLOATS 131072
#ifndef CUVIL_APACK
static float gemm_apack[GEMM_APACK_FLOATS] __attribute__((aligned(16)));
#define CUVIL_APACK(tid) gemm_apack
#endif

/* C = act(A . B + bias) for m = 1 or 2 rows over the columns that fill whole groups of 3 (m = 1) or
 * 2 panels; returns the first column left to the caller's 1x8 / 2x8 tiles (at most two panels). */
INLINE int f32_gemv(int m, int N, int K, const float* A, int lda, const float* Bp, float* C, int ldc,
                    const float* bias_row, const float* bias_col, Act act) {
  const int np = m == 1 ? 3 : 2, w = np * 8, npan = (N + 7) / 8;
  const v128_t zero = wasm_f32x4_const_splat(0.0f);
  int j = 0;
  for (; (j / 8) + np <= npan; j += w) {
    v128_t acc[8];
    const float* bp = Bp + (size_t)(j / 8) * K * 8;
    if (m == 1) f32_gemv_loop_1x24(K, A, lda, bp, K * 8, acc);
    else f32_gemv_loop_2x16(K, A, lda, bp, K * 8, acc);
    for (int p = 0; p < np; p++) {
      const int jp = j + 8 * p, nr = N - jp < 8 ? N - jp : 8;
      const v128_t bc0 = bias_col ? VLOAD(bias_col + jp) : zero, bc1 = bias_col ? VLOAD(bias_col + jp + 4) : zero;
      f32_gemm_tile_4x8(acc + 2 * m * p, C + jp, ldc, m, nr, bias_row, bc0, bc1, act);
    }
  }
  return j;
}

/* C = act(A . B + bias), A row-major (stride lda). Blocks of at least 4 rows are packed into 4-row
 * panels (into thread tid's buffer) and run the packed-A microkernel; fewer rows (GEMV-like) stream A
 * directly, 1-2 rows through the GEMV loops. */
KERNEL void f32_gemm_t(int M, int N, int K, const float* A, int lda, const float* Bp, float* C, int ldc,
                       const float* bias_row, const float* bias_col, Act act, int tid) {
  float* apack = CUVIL_APACK(tid);
  const int MC = gemm_row_block(K);
  for (int i0 = 0; i0 < M; i0 += MC) {
    const int i1 = i0 + MC < M ? i0 + MC : M;
    if (i1 - i0 >= 4 && (size_t)((i1 - i0 + 3) & ~3) * K <= GEMM_APACK_FLOATS) {
      f32_pack_a(i1 - i0, K, A + (size_t)i0 * lda, lda, apack);
      f32_gemm_pa(i1 - i0, N, K, apack, Bp, K * 8, 8, C + (size_t)i0 * ldc, ldc,
                  bias_row ? bias_row + i0 : 0, bias_col, act);
      continue;
    }
    int j0 = 0;
    if (i1 - i0 < 3) j0 = f32_gemv(i1 - i0, N, K, A + (size_t)i0 * lda, lda, Bp, C + (size_t)i0 * ldc, ldc,
                                  bias_row ? bias_row + i0 : 0, bias_col, act);
    for (int j = j0; j < N; j += 8) {
      const float* bp = Bp + (size_t)(j / 8) * K * 8;
      const float* bc = bias_col ? bias_col + j : 0;
      const int nr = N - j < 8 ? N - j : 8;
      int i = i0;
      for (; i + 4 <= i1; i += 4)
        f32_gemm_ukernel_4x8(K, A + (size_t)i * lda, lda, bp, C + (size_t)i * ldc + j, ldc, nr,
                             bias_row ? bias_row + i : 0, bc, act);
      switch (i1 - i) {
        case 3:
          f32_gemm_ukernel_3x8(K, A + (size_t)i * lda, lda, bp, C + (size_t)i * ldc + j, ldc, nr,
                               bias_row ? bias_row + i : 0, bc, act);
          break;
        case 2:
          f32_gemm_ukernel_2x8(K, A + (size_t)i * lda, lda, bp, C + (size_t)i * ldc + j, ldc, nr,
                               bias_row ? bias_row + i : 0, bc, act);
          break;
        case 1:
          f32_gemm_ukernel_1x8(K, A + (size_t)i * lda, lda, bp, C + (size_t)i * ldc + j, ldc, nr,
                               bias_row ? bias_row + i : 0, bc, act);
          break;
        default: break;
      }
    }
  }
}

/* f32_gemm_t on the first thread's buffer: for callers on one thread. */
INLINE void f32_gemm(int M, int N, int K, const float* A, int lda, const float* Bp, float* C, int ldc,
                     const float* bias_row, const float* bias_col, Act act) {
  f32_gemm_t(M, N, K, A, lda, Bp, C, ldc, bias_row, bias_col, act, 0);
}

/* Thread tid's share of f32_gemm: columns in units of 48 (whole GEMV groups of 3 and 2 panels), so
 * every column runs the loop it runs single-threaded. Up to 3 rows (GEMV) in chunks claimed from a shared
 * counter (cuvil_chunks); more rows keep the static split: each call packs its A rows (f32_gemm_t), so
 * every extra chunk would pack them again. */
INLINE void f32_gemm_part(int M, int N, int K, const float* A, int lda, const float* Bp, float* C, int ldc,
                          const float* bias_row, const float* bias_col, Act act, int tid, int nt) {
  int lo, hi;
  if (M < 4) {
    CuvilChunks d = cuvil_chunks(N, 48, tid, nt);
    while (cuvil_chunk(&d, &lo, &hi))
      f32_gemm_t(M, hi - lo, K, A, lda, Bp + (size_t)lo * K, C + lo, ldc, bias_row, bias_col ? bias_col + lo : 0,
                 act, tid);
    return;
  }
  cuvil_split(N, 48, tid, nt, &lo, &hi);
  if (lo < hi)
    f32_gemm_t(M, hi - lo, K, A, lda, Bp + (size_t)lo * K, C + lo, ldc, bias_row, bias_col ? bias_col + lo : 0,
               act, tid);
}

/* Pack a row-major B[K,N] (stride ldb) into 8-column panels, zero padded: [ceil(N/8)][K][8]. */
KERNEL void f32_pack_b(int K, int N, const float* B, int ldb, float* Bp) {
  for (int j = 0; j < N; j += 8) {
    const int nr = N - j < 8 ? N - j : 8;
    for (int k = 0; k < K; k++) {
      const float* src = B + (size_t)k * ldb + j;
      if (nr == 8) {
        VSTORE(Bp, VLOAD(src)); VSTORE(Bp + 4, VLOAD(src + 4));
      } else {
        for (int l = 0; l < 8; l++) Bp[l] = l < nr ? src[l] : 0.0f;
      }
      Bp += 8;
    }
  }
}
