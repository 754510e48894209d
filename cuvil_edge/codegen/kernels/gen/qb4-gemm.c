/* generated from templates/qb4-gemm.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* 4-bit weight GEMM/GEMV (group-wise asymmetric weights, int8-dynamic or static 7-bit activations).
 *
 * Weights are unsigned nibbles q in 0..15 with one f32 scale ws and zero point wz per group of G
 * consecutive k (G a multiple of 32): w = ws * (q - wz). The kernels work in blocks of 32 k, so the
 * packer repeats each group's scale and zero point per block (pack_b4 in ops/qlinear.py): K a multiple
 * of 32, I padded to 8 (zero weights, scales and zero points). Layout, per 8-row panel:
 *   w  [I/8][K/4][4][4] bytes: byte (r, kk) of step s holds row r's k = 4s + kk in its low nibble and
 *      row r + 4's in its high nibble, so one AND and one shift give qs8's 8-row panel vectors
 *      (rows 0-3, rows 4-7 of 4 k) for one 16-byte load;
 *   ws [I/8][K/32][8] f32, wz [I/8][K/32][8] uint8 (one byte each: the GEMV is bandwidth-bound).
 * Per output and block the integer dot d = sum (q - wz) x over 32 k is exact, and the block's scale is
 * applied outside the dot loop: facc += f32(d) * ws (one IEEE mul and add per block, no FMA, so every
 * tier and both paths round alike); at the end y = (facc - xz * wsc[i]) * xs + bias with
 * wsc[i] = sum_k ws * (q - wz) (the activation zero point; see qs8-gemm's header).
 *
 * Dots: weights as the signed operand, activations (0..127) the 7-bit one, token broadcast, lanes =
 * rows (no horizontal sums), as in qs8-gemm. Under relaxed SIMD a block accumulates i16 pair sums
 * (i16x8.relaxed_dot_i8x16_i7x16_s, one pmaddubsw on x86, then one i16 add): 8 steps x 2 products of at
 * most 15 * 127 stay below 2^15, so the block needs one pairwise widening instead of widening every dot
 * (the i32 relaxed dot is three instructions there). SIMD128 sums the same products exactly in i32.
 *
 * Two paths (qb4_gemm picks them by J, the tokens of a transformer):
 *  - J >= 4: per 8-row panel the nibbles are unpacked once into an int8 panel with the zero points
 *    subtracted (q - wz in -15..15: a valid signed operand), then 8 rows x 4 tokens per tile over
 *    activations packed by qu8_pack_x4, the 1-3 tokens left one at a time from the same panel.
 *  - J < 4 (GEMV): the nibbles are read in place, the unpacking is fused into the dot loop and the zero
 *    point is applied per block as d = dot(q, x) - wz * sum(x) (block sums of x computed once per
 *    token): the same integers, so the same bits as the GEMM path.
 * Threads (tid, nt) prepare the activations together, then split the rows in whole 8-row panels;
 * convolutions split their pixels instead when there are enough (q_chunk_split, qs8-gemm).
 */

#if CUVIL_RELAXED
#define QB4_DOT(w, x, acc) wasm_i16x8_add((acc), wasm_i16x8_relaxed_dot_i8x16_i7x16((w), (x)))
#define QB4_I32(acc) wasm_i32x4_extadd_pairwise_i16x8(acc)
#else
#define QB4_DOT(w, x, acc) QDOT7((w), (x), (acc))
#define QB4_I32(acc) (acc)
#endif

/* f32 accumulator += f32(block dot) * block scale (the one rounding per block, see the header). */
INLINE v128_t qb4_scale_add(v128_t facc, v128_t d, const float* s) {
  return wasm_f32x4_add(facc, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(d), VLOAD(s)));
}

/* Unpack panel weights w (nb blocks) into int8 q - wz in qs8's panel layout [K/4][8][4]. */
static void qb4_unpack_panel(int nb, const uint8_t* w, const uint8_t* wz, int8_t* panel) {
  const v128_t mask = wasm_i8x16_splat(0x0F);
  for (int b = 0; b < nb; b++, wz += 8) {
    const v128_t z = wasm_v128_load64_zero(wz);
    const v128_t zl = wasm_i8x16_shuffle(z, z, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const v128_t zh = wasm_i8x16_shuffle(z, z, 4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7);
    for (int s = 0; s < 8; s++, w += 16, panel += 32) {
      const v128_t v = VLOAD(w);
      VSTORE(panel, wasm_i8x16_sub(wasm_v128_and(v, mask), zl));
      VSTORE(panel + 16, wasm_i8x16_sub(wasm_u8x16_shr(v, 4), zh));
    }
  }
}

#if !CUVIL_RELAXED
/* SIMD128: 4 rows of an unpacked panel (w: the half's weight vector, ws its scales) x 4 tokens, per block
 * qs8-gemm's widened 4x4 step (qs8_widen_step: row pairs meet token pairs, no broadcasts), the block's
 * exact int32 sums then scaled into out[t] (rows 0-3 of the half, token t) as qb4_loop_8x4 does. */
static __attribute__((noinline)) void qb4_loop_widen_4x4(int nb, const int8_t* w, const uint8_t* xp,
                                                        const float* ws, v128_t* out) {
  for (int t = 0; t < 4; t++) out[t] = wasm_f32x4_const_splat(0.0f);
  for (int b = 0; b < nb; b++, ws += 8) {
    v128_t acc[8], d[4];
    for (int i = 0; i < 8; i++) acc[i] = wasm_i32x4_const_splat(0);
#pragma clang loop unroll(disable)
    for (int s = 0; s < 8; s++, w += 32, xp += 16) qs8_widen_step(w, xp, acc);
    qs8_widen_tokens(acc, d);
    for (int t = 0; t < 4; t++) out[t] = qb4_scale_add(out[t], d[t], ws);
  }
}
#endif

/* One unpacked 8-row panel x NT tokens of packed activations xp (qu8_pack_x4 layout QXB7): out[t] = rows
 * 0-3 of token t, out[NT + t] = rows 4-7, each the sum over blocks of f32(d) * ws. The f32 sums live in
 * out (memory): with them in registers 8x4 would need 16 accumulators plus operands (Cranelift has 16
 * vector registers), and they are touched once per block. noinline as qs8-gemm's loops. SIMD128's 8x4
 * is qb4_loop_widen_4x4 on each half of the panel. */
static __attribute__((noinline)) void qb4_loop_8x4(int nb, const int8_t* w, const uint8_t* xp,
                                                       const float* ws, v128_t* out) {
#if !CUVIL_RELAXED
  qb4_loop_widen_4x4(nb, w, xp, ws, out);
  qb4_loop_widen_4x4(nb, w + 16, xp, ws + 4, out + 4);
  return;
#endif
  for (int t = 0; t < 8; t++) out[t] = wasm_f32x4_const_splat(0.0f);
  for (int b = 0; b < nb; b++, ws += 8) {
    v128_t a0 = wasm_i32x4_const_splat(0), c0 = a0;
    v128_t a1 = wasm_i32x4_const_splat(0), c1 = a1;
    v128_t a2 = wasm_i32x4_const_splat(0), c2 = a2;
    v128_t a3 = wasm_i32x4_const_splat(0), c3 = a3;
#pragma clang loop unroll(disable)
    for (int s = 0; s < 8; s++, w += 32, xp += 16 * QXB7) {
      const v128_t p = VLOAD(w), q = VLOAD(w + 16);
      const v128_t b0 = QX_TOKEN(xp, 0, QXB7);
      a0 = QB4_DOT(p, b0, a0);
      c0 = QB4_DOT(q, b0, c0);
      const v128_t b1 = QX_TOKEN(xp, 1, QXB7);
      a1 = QB4_DOT(p, b1, a1);
      c1 = QB4_DOT(q, b1, c1);
      const v128_t b2 = QX_TOKEN(xp, 2, QXB7);
      a2 = QB4_DOT(p, b2, a2);
      c2 = QB4_DOT(q, b2, c2);
      const v128_t b3 = QX_TOKEN(xp, 3, QXB7);
      a3 = QB4_DOT(p, b3, a3);
      c3 = QB4_DOT(q, b3, c3);
    }
    out[0] = qb4_scale_add(out[0], QB4_I32(a0), ws);
    out[4] = qb4_scale_add(out[4], QB4_I32(c0), ws + 4);
    out[1] = qb4_scale_add(out[1], QB4_I32(a1), ws);
    out[5] = qb4_scale_add(out[5], QB4_I32(c1), ws + 4);
    out[2] = qb4_scale_add(out[2], QB4_I32(a2), ws);
    out[6] = qb4_scale_add(out[6], QB4_I32(c2), ws + 4);
    out[3] = qb4_scale_add(out[3], QB4_I32(a3), ws);
    out[7] = qb4_scale_add(out[7], QB4_I32(c3), ws + 4);
  }
}

static __attribute__((noinline)) void qb4_loop_8x1(int nb, const int8_t* w, const uint8_t* xp,
                                                       const float* ws, v128_t* out) {
  for (int t = 0; t < 2; t++) out[t] = wasm_f32x4_const_splat(0.0f);
  for (int b = 0; b < nb; b++, ws += 8) {
    v128_t a0 = wasm_i32x4_const_splat(0), c0 = a0;
#pragma clang loop unroll(disable)
    for (int s = 0; s < 8; s++, w += 32, xp += 16 * QXB7) {
      const v128_t p = VLOAD(w), q = VLOAD(w + 16);
      const v128_t b0 = QX_TOKEN(xp, 0, QXB7);
      a0 = QB4_DOT(p, b0, a0);
      c0 = QB4_DOT(q, b0, c0);
    }
    out[0] = qb4_scale_add(out[0], QB4_I32(a0), ws);
    out[1] = qb4_scale_add(out[1], QB4_I32(c0), ws + 4);
  }
}

/* GEMV on the packed nibbles of one 8-row panel and one token x (K bytes; xsum its block sums):
 * out[0] = rows 0-3, out[1] = rows 4-7, as qb4_loop_8x1 gives from the unpacked panel. SIMD128 widens
 * each 8 k of the token once (i16x8.load8x8_u; a 4 k group broadcast by one shuffle) and keeps pair sums
 * through the block (qdot_pairs), made row sums once per block. */
static __attribute__((noinline)) void qb4_loop_nib_8x1(int nb, const uint8_t* w, const float* ws,
                                                       const uint8_t* wz, const uint8_t* x,
                                                       const int32_t* xsum, v128_t* out) {
  const v128_t mask = wasm_i8x16_splat(0x0F), zero = wasm_i32x4_const_splat(0);
  v128_t f0 = wasm_f32x4_const_splat(0.0f), f1 = f0;
  for (int b = 0; b < nb; b++, w += 128, x += 32, ws += 8, wz += 8) {
#if CUVIL_RELAXED
    v128_t a = zero, c = zero;
#pragma clang loop unroll(disable)
    for (int h = 0; h < 32; h += 16) {
      const v128_t v = VLOAD(x + h);
      {
        const v128_t q = VLOAD(w + 4 * h + 0), bx = QBCAST(v, 0);
        a = QB4_DOT(wasm_v128_and(q, mask), bx, a);
        c = QB4_DOT(wasm_u8x16_shr(q, 4), bx, c);
      }
      {
        const v128_t q = VLOAD(w + 4 * h + 16), bx = QBCAST(v, 1);
        a = QB4_DOT(wasm_v128_and(q, mask), bx, a);
        c = QB4_DOT(wasm_u8x16_shr(q, 4), bx, c);
      }
      {
        const v128_t q = VLOAD(w + 4 * h + 32), bx = QBCAST(v, 2);
        a = QB4_DOT(wasm_v128_and(q, mask), bx, a);
        c = QB4_DOT(wasm_u8x16_shr(q, 4), bx, c);
      }
      {
        const v128_t q = VLOAD(w + 4 * h + 48), bx = QBCAST(v, 3);
        a = QB4_DOT(wasm_v128_and(q, mask), bx, a);
        c = QB4_DOT(wasm_u8x16_shr(q, 4), bx, c);
      }
    }
#else
    v128_t al = zero, ah = zero, cl = zero, ch = zero;
#pragma clang loop unroll(disable)
    for (int h = 0; h < 32; h += 8) {
      const v128_t v = wasm_u16x8_load8x8(x + h);
      {
        const v128_t q = VLOAD(w + 4 * h + 0), bx = wasm_i32x4_shuffle(v, v, 0, 1, 0, 1);
        qdot_pairs(wasm_v128_and(q, mask), bx, &al, &ah);
        qdot_pairs(wasm_u8x16_shr(q, 4), bx, &cl, &ch);
      }
      {
        const v128_t q = VLOAD(w + 4 * h + 16), bx = wasm_i32x4_shuffle(v, v, 2, 3, 2, 3);
        qdot_pairs(wasm_v128_and(q, mask), bx, &al, &ah);
        qdot_pairs(wasm_u8x16_shr(q, 4), bx, &cl, &ch);
      }
    }
    const v128_t a = qpairs_rows(al, ah), c = qpairs_rows(cl, ch);
#endif
    const v128_t z = wasm_v128_load64_zero(wz), vx = wasm_i32x4_splat(xsum[b]);
    const v128_t zl = wasm_i8x16_shuffle(z, zero, 0, 16, 16, 16, 1, 16, 16, 16, 2, 16, 16, 16, 3, 16, 16, 16);
    const v128_t zh = wasm_i8x16_shuffle(z, zero, 4, 16, 16, 16, 5, 16, 16, 16, 6, 16, 16, 16, 7, 16, 16, 16);
    f0 = qb4_scale_add(f0, wasm_i32x4_sub(QB4_I32(a), wasm_i32x4_mul(zl, vx)), ws);
    f1 = qb4_scale_add(f1, wasm_i32x4_sub(QB4_I32(c), wasm_i32x4_mul(zh, vx)), ws + 4);
  }
  out[0] = f0;
  out[1] = f1;
}

/* Epilogue of an 8-row panel (rows i.., ni0 of them) x nt tokens j..: f[h * nt + t] are the block sums
 * of rows 4h..4h+3, token t. Tokens adjacent in y (sj = 1: conv output rows) with nt = 4 go out as one
 * vector per row after a 4x4 transpose, as in qs8-gemm. */
INLINE void qb4_store(v128_t* f, int nt, int i, int ni0, const float* wsc, const float* bias, const float* xs,
                      const int32_t* xz, int xstep, int j, float* y, int si, int sj, Act act) {
  for (int h = 0; h < 2; h++) {
    const int ih = i + 4 * h, ni = ni0 - 4 * h < 4 ? ni0 - 4 * h : 4;
    if (ni <= 0) break;
    const v128_t vsc = VLOAD(wsc + ih), vb = VLOAD(bias + ih);
    float* yt = y + (size_t)ih * si + (size_t)j * sj;
    v128_t r[4];
    for (int t = 0; t < nt; t++) {
      const int jj = (j + t) * xstep;
      const v128_t d = wasm_f32x4_add(f[h * nt + t], wasm_f32x4_mul(vsc, VSPLAT(-(float)xz[jj])));
      r[t] = wasm_f32x4_add(wasm_f32x4_mul(d, VSPLAT(xs[jj])), vb);
    }
    if (nt == 4 && sj == 1) {
      for (int t = 0; t < 4; t++) r[t] = act_apply(r[t], act);
      q_transpose4(r);
      for (int l = 0; l < ni; l++) VSTORE(yt + (size_t)l * si, r[l]);
    } else {
      for (int t = 0; t < nt; t++) q_store4(r[t], yt + (size_t)t * sj, si, ni, act);
    }
  }
}

/* Rows [0, I) (whole 8-row panels) x J tokens packed by qu8_pack_x4 in xp: per panel the nibbles are
 * unpacked into panel (8K bytes) once, then 8x4 tiles and a tail of 1-3 single tokens. */
static void qb4_gemm_packed(int I, int J, int K, const uint8_t* w, const float* ws, const uint8_t* wz,
                            const float* wsc, const uint8_t* xp, const float* xs, const int32_t* xz, int xstep,
                            const float* bias, float* y, int si, int sj, int8_t* panel, Act act) {
  const int nb = K / 32, J4 = J & ~3;
  v128_t f[8];
  for (int i = 0; i < I; i += 8) {
    const float* wsi = ws + (size_t)i * nb;
    qb4_unpack_panel(nb, w + (size_t)i * K / 2, wz + (size_t)i * nb, panel);
    for (int j = 0; j < J; ) {
      const int nt = j < J4 ? 4 : 1;
      const uint8_t* xj = xp + qx_offset(j, K, QXB7);
      if (nt == 4) qb4_loop_8x4(nb, panel, xj, wsi, f);
      else qb4_loop_8x1(nb, panel, xj, wsi, f);
      qb4_store(f, nt, i, I - i, wsc, bias, xs, xz, xstep, j, y, si, sj, act);
      j += nt;
    }
  }
}

/* Thread tid's unpacked panel: the first thread's after ceil4(J) packed tokens in scratch, the others'
 * on their own stacks (a macro: the space must outlive the caller's loops, not a helper's frame). */
#define QB4_PANEL(scratch, J, K) \
  (tid ? (int8_t*)__builtin_alloca(8 * (size_t)(K)) \
       : (int8_t*)((scratch) + qx_offset(((J) + 3) & ~3, K, QXB7) + 64))

/* Thread tid's 8-row panels of the J >= 4 tokens packed in scratch (qu8_pack_x4's layout). */
INLINE void qb4_gemm_rows(int I, int J, int K, const uint8_t* w, const float* ws, const uint8_t* wz,
                          const float* wsc, const float* xs, const int32_t* xz, int xstep, const float* bias,
                          float* y, int si, int sj, uint8_t* scratch, Act act, int tid, int nt) {
  const int nb = K / 32;
  int r0, r1;
  cuvil_split(I, 8, tid, nt, &r0, &r1);
  if (r0 < r1)
    qb4_gemm_packed(r1 - r0, J, K, w + (size_t)r0 * K / 2, ws + (size_t)r0 * nb, wz + (size_t)r0 * nb, wsc + r0,
                    scratch, xs, xz, xstep, bias + r0, y + (size_t)r0 * si, si, sj, QB4_PANEL(scratch, J, K), act);
}

/* y[i*si + j*sj] for i < I, j < J (operands in the header; x rows of K bytes, stride ldx), each thread
 * its 8-row panels. J >= 4: the threads pack the tokens together into scratch (ceil4(J) * K * QXB7 + 64
 * bytes, then the first thread's unpacked panel: ops/qlinear.py's b4_scratch_bytes); J < 4: each thread
 * sums the few tokens' blocks itself, on its stack (J * K / 8 bytes): no waiting. */
KERNEL void qb4_gemm(int I, int J, int K, const uint8_t* w, const float* ws, const uint8_t* wz,
                     const float* wsc, const uint8_t* x, int ldx, const float* xs, const int32_t* xz,
                     int xstep, const float* bias, float* y, int si, int sj, uint8_t* scratch, Act act,
                     int tid, int nt) {
  const int nb = K / 32;
  int lo, hi, r0, r1;
  cuvil_split(I, 8, tid, nt, &r0, &r1);
  if (J < 4) {
    int32_t* xsum = (int32_t*)__builtin_alloca(sizeof(int32_t) * J * nb);
    for (int j = 0; j < J; j++)
      for (int b = 0; b < nb; b++) {
        const uint8_t* xb = x + (size_t)j * ldx + 32 * b;
        int32_t s = 0;
        for (int k = 0; k < 32; k++) s += xb[k];
        xsum[j * nb + b] = s;
      }
    v128_t f[2];
    for (int j = 0; j < J; j++)
      for (int i = r0; i < r1; i += 8) {
        qb4_loop_nib_8x1(nb, w + (size_t)i * K / 2, ws + (size_t)i * nb, wz + (size_t)i * nb,
                         x + (size_t)j * ldx, xsum + j * nb, f);
        qb4_store(f, 1, i, I - i, wsc, bias, xs, xz, xstep, j, y, si, sj, act);
      }
    return;
  }
  cuvil_split(J, 4, tid, nt, &lo, &hi);
  if (lo < hi) qu8_pack_x4(hi - lo, K, x + (size_t)lo * ldx, ldx, scratch + qx_offset(lo, K, QXB7), QXB7);
  q_meet(nt);
  qb4_gemm_rows(I, J, K, w, ws, wz, wsc, xs, xz, xstep, bias, y, si, sj, scratch, act, tid, nt);
}

/* Most pixels a claim of qb4_conv2d: each claim unpacks the weights' panels anew, and claims of 128 ran
 * int4 ResNet-50 2% faster than 64 on 2 threads (256: 1% slower; interleaved A/B, 2026-12-06). */
#define QB4_CONV_STEP 128

/* Group-1 NCHW convolution with 4-bit weights ([M][C*kh*kw], K a multiple of 32): channel-major im2col
 * per chunk of output pixels (qu8_im2col_kmajor into col), then the GEMM with output channels as i
 * (scratch: its working space). With pixels enough the threads claim them as qs8_conv2d's do (q_px_step),
 * each through im2col, packing and the GEMM in its own part of col and scratch; else each writes the taps
 * of its share of a chunk and packs them (q_chunk_split), multiplies them itself when that share is 2
 * steps or more, or meets the others and splits the rows; a chunk of 1-3 pixels (the GEMV) turns its taps
 * into pixel rows on each thread's stack. */
KERNEL void qb4_conv2d(const uint8_t* xq, int N, int C, int H, int W, const uint8_t* w, const float* ws,
                       const uint8_t* wz, const float* wsc, const float* bias, const float* xs,
                       const int32_t* xz, float* y, int M, int OH, int OW, int kh, int kw, int sh, int sw,
                       int dh, int dw, int pt, int pl, int pchunk, uint8_t* col, uint8_t* scratch, Act act,
                       int tid, int nt) {
  const int K = C * kh * kw, P = OH * OW;
  int8_t* panel = QB4_PANEL(scratch, pchunk, K);
  uint8_t* rows = (uint8_t*)__builtin_alloca((size_t)3 * K);  /* a 1-3 pixel chunk's rows */
  const int step = q_px_step(P, pchunk, QB4_CONV_STEP, nt);
  if (step) {
    uint8_t* tc = col + (size_t)tid * step * K;
    uint8_t* xp = scratch + qx_offset(tid * step, K, QXB7);
    for (int n = 0; n < N; n++) {
      CuvilChunks d = cuvil_chunks_of(P, step, tid, nt);
      for (int a, b; cuvil_chunk(&d, &a, &b);) {
        qu8_im2col_kmajor(xq + (size_t)n * C * H * W, C, H, W, kh, kw, sh, sw, dh, dw, pt, pl, OW, a, b - a,
                          (uint8_t)xz[0], tc, step);
        qu8_pack_nchw_x4(b - a, K, tc, step, xp, QXB7);
        qb4_gemm_packed(M, b - a, K, w, ws, wz, wsc, xp, xs, xz, 0, bias, y + (size_t)n * M * P + a, P, 1, panel,
                        act);
      }
    }
    return;
  }
  for (int n = 0; n < N; n++)
    for (int p0 = 0; p0 < P; p0 += pchunk) {
      const int pc = P - p0 < pchunk ? P - p0 : pchunk;
      float* yc = y + (size_t)n * M * P + p0;
      int lo, hi;
      if (n + p0) q_meet(nt);  /* everyone is done with the last chunk's col and scratch */
      const int by_px = q_chunk_split(pc, tid, nt, &lo, &hi) && pc >= 4;
      if (lo < hi) {
        qu8_im2col_kmajor(xq + (size_t)n * C * H * W, C, H, W, kh, kw, sh, sw, dh, dw, pt, pl, OW, p0 + lo,
                          hi - lo, (uint8_t)xz[0], col + lo, pc);
        if (pc >= 4) qu8_pack_nchw_x4(hi - lo, K, col + lo, pc, scratch + qx_offset(lo, K, QXB7), QXB7);
      }
      if (by_px) {
        if (lo < hi)
          qb4_gemm_packed(M, hi - lo, K, w, ws, wz, wsc, scratch + qx_offset(lo, K, QXB7), xs, xz, 0, bias,
                          yc + lo, P, 1, panel, act);
        continue;
      }
      q_meet(nt);
      if (pc >= 4) {
        qb4_gemm_rows(M, pc, K, w, ws, wz, wsc, xs, xz, 0, bias, yc, P, 1, scratch, act, tid, nt);
        continue;
      }
      for (int j = 0; j < pc; j++)
        for (int k = 0; k < K; k++) rows[(size_t)j * K + k] = col[(size_t)k * pc + j];
      qb4_gemm(M, pc, K, w, ws, wz, wsc, rows, K, xs, xz, 0, bias, yc, P, 1, scratch, act, tid, nt);
    }
}
