/* generated from templates/qs8-gemm.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* Integer GEMM for quantized conv/gemm: y[i][j] = dequant(sum_k w[i][k] * x[j][k]), int32 accumulation.
 *
 * Operands: w is int8 (signed, per-output-channel symmetric), packed in 8-row panels of 4-byte k groups
 * (see qs8_gemm; zero padded), x is uint8 activations, row stride ldx, quantized per tensor
 * or per row j (scale xs, zero point xz; xstep 0 = one pair for all rows, 1 = one pair per row).
 * Zero points are compensated at the end, not in the loop: sum w (x - xz) = sum w x - xz * wsum[i],
 * with wsum the build-time row sums of w.
 *
 * Dot products: a weight vector holds 4 rows x 4 consecutive k, the activation vector one token's 4 k
 * broadcast to all lanes, so lane r accumulates row r's dot and no horizontal sums are needed.
 *  - x7 kernels (our quantizer: activations on a 0..127 grid) use i32x4.relaxed_dot_i8x16_i7x16_add_s
 *    under CUVIL_RELAXED with w as the signed operand and x as the 7-bit one, which x86 (pmaddubsw) and
 *    ARM (sdot) lower to the same exact answer; without relaxed SIMD they widen to i16 and use
 *    i32x4.dot_i16x8_s. Both sum the same products exactly, so the tiers agree bit for bit.
 *  - x8 kernels (imported uint8 activations, 0..255) always widen: the relaxed dot is not exact there.
 * K is padded to a multiple of 4 with zero weights and zero activations, which add nothing.
 *
 * Dequantize / requantize (documented rounding): acc is exact int32; y = f32(acc - xz*wsum[i]) *
 * (ws[i] * xs[j]) + bias[i], each step one IEEE f32 operation rounded to nearest even (mul then add, no
 * FMA, so every tier gives identical floats), then the fused activation. Stores: 4 tokens adjacent in y
 * (sj = 1: a conv's output pixels) go out as one vector per output row after a 4x4 transpose (measured:
 * the per-float stores cost a 16-channel 1x1 conv a quarter of its time), else per token. Quantization
 * of activations (qu8_quantize*) is ONNX QuantizeLinear's: round(x / scale) half to even, + zero point,
 * saturated.
 *
 * Outputs (QOut): f32, or uint8 requantized onto the reading layer's grid when a quantized layer's one
 * reader is another (quant/chain.py): the f32 value above, then qu8_quantize's steps on it
 * (qu8_quant4), so the reader gets the very bytes its own quantize pass would have made, and the f32
 * tensor between them (4 bytes a value written and read, then a quantize pass) is never made.
 *
 * Threads: kernels taking (tid, nt) run on every thread of a split node, each its share (cuvil_split),
 * meeting (q_meet) where one thread's bytes feed another's; or on thread 0 alone (nt 1). Sums are exact
 * and every output meets the same epilogue, so any split gives the same bits: GEMMs split the weights'
 * 8-row panels after packing the tokens together, convolutions their pixels in claims of 16-128 (few
 * pixels: the panels).
 */

/* cuvil_barrier for kernels that a node too small to split runs on thread 0 alone (nt 1). */
INLINE void q_meet(int nt) {
  if (nt > 1) cuvil_barrier();
}

/* Pair sums of a weight vector w (4 rows x 4 k, signed bytes) and a token group s already widened to i16
 * and broadcast to both halves (4 k, twice): *l += [r0 r0 r1 r1], *h += [r2 r2 r3 r3], each lane the sum
 * of two products (k 0-1, k 2-3). */
INLINE void qdot_pairs(v128_t w, v128_t s, v128_t* l, v128_t* h) {
  *l = wasm_i32x4_add(*l, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(w), s));
  *h = wasm_i32x4_add(*h, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(w), s));
}

/* qdot_pairs' pair sums as the 4 rows' sums (lane r: row r). */
INLINE v128_t qpairs_rows(v128_t l, v128_t h) {
  return wasm_i32x4_add(wasm_i32x4_shuffle(l, h, 0, 2, 4, 6), wasm_i32x4_shuffle(l, h, 1, 3, 5, 7));
}

/* Lane l sums bytes 4l..4l+3, as the relaxed dot does: per-lane partial sums are then identical in both
 * tiers, not just their totals. */
INLINE v128_t qdot_widen(v128_t w, v128_t x, v128_t acc) {
  const v128_t lo = wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(w), wasm_u16x8_extend_low_u8x16(x));
  const v128_t hi = wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(w), wasm_u16x8_extend_high_u8x16(x));
  return wasm_i32x4_add(acc, qpairs_rows(lo, hi));
}
#if CUVIL_RELAXED
#define QDOT7(w, x, acc) wasm_i32x4_relaxed_dot_i8x16_i7x16_add((w), (x), (acc))
#else
#define QDOT7(w, x, acc) qdot_widen((w), (x), (acc))
#endif

/* [sum(a0), sum(a1), sum(a2), sum(a3)] (f32 lanes) */
INLINE v128_t hsum4_f32(v128_t a0, v128_t a1, v128_t a2, v128_t a3) {
  const v128_t t0 = wasm_f32x4_add(wasm_i32x4_shuffle(a0, a1, 0, 4, 1, 5), wasm_i32x4_shuffle(a0, a1, 2, 6, 3, 7));
  const v128_t t1 = wasm_f32x4_add(wasm_i32x4_shuffle(a2, a3, 0, 4, 1, 5), wasm_i32x4_shuffle(a2, a3, 2, 6, 3, 7));
  return wasm_f32x4_add(wasm_i32x4_shuffle(t0, t1, 0, 1, 4, 5), wasm_i32x4_shuffle(t0, t1, 2, 3, 6, 7));
}

/* The dequantizing epilogue before the activation (see the header), shared by every qs8 kernel so they
 * round alike: f32(acc - zs) * sc + b with zs = xz * wsum (exact int32) and sc = ws * xs (one f32 mul). */
INLINE v128_t q_dequant(v128_t acc, v128_t zs, v128_t sc, v128_t b) {
  return wasm_f32x4_add(wasm_f32x4_mul(wasm_f32x4_convert_i32x4(wasm_i32x4_sub(acc, zs)), sc), b);
}

/* Store the first ni of 4 consecutive outputs i..i+3 (stride si) after the f32 epilogue. */
INLINE void q_store4(v128_t f, float* y, int si, int ni, Act act) {
  f = act_apply(f, act);
  if (si == 1 && ni == 4) { VSTORE(y, f); return; }
  float t[4] __attribute__((aligned(16)));
  VSTORE(t, f);
  for (int l = 0; l < ni; l++) y[(size_t)l * si] = t[l];
}

/* f32 lanes -> clamp(round_half_even(x / s) + z, 0, qmax) as int32 lanes (see qu8_quantize, its one
 * home: requantized outputs take the same steps). */
INLINE v128_t qu8_quant4(v128_t x, v128_t vs, v128_t vz, v128_t vmax) {
  v128_t v = wasm_f32x4_add(wasm_f32x4_nearest(wasm_f32x4_div(x, vs)), vz);
  v = wasm_f32x4_pmin(vmax, wasm_f32x4_pmax(wasm_f32x4_const_splat(0.0f), v));
  const v128_t magic = wasm_f32x4_const_splat(8388608.0f);
  return wasm_i32x4_sub(wasm_f32x4_add(v, magic), magic);
}

/* 16 int32 lanes in 0..255 (four qu8_quant4 results) as 16 bytes, in order (exact: nothing saturates). */
INLINE v128_t qu8_narrow16(const v128_t* q) {
  return wasm_u8x16_narrow_i16x8(wasm_i16x8_narrow_i32x4(q[0], q[1]), wasm_i16x8_narrow_i32x4(q[2], q[3]));
}

/* A qs8 kernel's outputs: f32 at p (qmax 0), or uint8 at p on the grid (s, z, 0..qmax). */
typedef struct { void* p; float s; int32_t z; int qmax; } QOut;

/* y advanced by i outputs. */
INLINE QOut qo_at(QOut y, size_t i) {
  y.p = y.qmax ? (void*)((uint8_t*)y.p + i) : (void*)((float*)y.p + i);
  return y;
}

/* 4 activated f32 lanes quantized onto y's grid (int32 lanes; qu8_quant4). */
INLINE v128_t qo_quant4(QOut y, v128_t f) {
  return qu8_quant4(f, VSPLAT(y.s), VSPLAT((float)y.z), VSPLAT((float)y.qmax));
}

/* 4 activated f32 lanes as bytes (lane l in byte l; also in bytes 4-15). */
INLINE v128_t qo_bytes(QOut y, v128_t f) {
  const v128_t q = qo_quant4(y, f);
  const v128_t h = wasm_i16x8_narrow_i32x4(q, q);
  return wasm_u8x16_narrow_i16x8(h, h);
}

/* The first n (1-4) of 4 activated outputs, adjacent, at y. */
INLINE void qo_store(QOut y, v128_t f, int n) {
  if (!y.qmax) {
    if (n == 4) VSTORE((float*)y.p, f);
    else store_partial((float*)y.p, f, n);
    return;
  }
  const v128_t b = qo_bytes(y, f);
  if (n == 4) { wasm_v128_store32_lane(y.p, b, 0); return; }
  uint8_t t[16] __attribute__((aligned(16)));
  VSTORE(t, b);
  for (int l = 0; l < n; l++) ((uint8_t*)y.p)[l] = t[l];
}

/* 4x4 transpose of 32-bit lanes in place: lane c of v[r] becomes lane r of v[c]. */
INLINE void q_transpose4(v128_t* v) {
  const v128_t ab0 = wasm_i32x4_shuffle(v[0], v[1], 0, 4, 1, 5), ab1 = wasm_i32x4_shuffle(v[0], v[1], 2, 6, 3, 7);
  const v128_t cd0 = wasm_i32x4_shuffle(v[2], v[3], 0, 4, 1, 5), cd1 = wasm_i32x4_shuffle(v[2], v[3], 2, 6, 3, 7);
  v[0] = wasm_i64x2_shuffle(ab0, cd0, 0, 2);
  v[1] = wasm_i64x2_shuffle(ab0, cd0, 1, 3);
  v[2] = wasm_i64x2_shuffle(ab1, cd1, 0, 2);
  v[3] = wasm_i64x2_shuffle(ab1, cd1, 1, 3);
}

/* Rows r < ni of a 4x4 tile of activated outputs, given by token (f[t]: rows 0-3 of token t; y's rows si
 * apart, tokens adjacent): f32 ones transposed (q_transpose4) and stored a row at a time; uint8 ones
 * quantized by token, narrowed together and transposed as bytes (one shuffle for the 8 of q_transpose4:
 * the quantizing steps are the same for every lane, so the bytes are the same), 4 bytes a row. */
INLINE void qo_store_tile(QOut y, v128_t* f, int si, int ni) {
  if (!y.qmax) {
    q_transpose4(f);
    for (int r = 0; r < ni; r++) VSTORE((float*)y.p + (size_t)r * si, f[r]);
    return;
  }
  const v128_t q[4] = {qo_quant4(y, f[0]), qo_quant4(y, f[1]), qo_quant4(y, f[2]), qo_quant4(y, f[3])};
  const v128_t t = qu8_narrow16(q);  /* byte 4t + r: row r of token t */
  const v128_t b = wasm_i8x16_shuffle(t, t, 0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  uint8_t* p = (uint8_t*)y.p;
  wasm_v128_store32_lane(p, b, 0);
  if (ni > 1) wasm_v128_store32_lane(p + si, b, 1);
  if (ni > 2) wasm_v128_store32_lane(p + 2 * (size_t)si, b, 2);
  if (ni > 3) wasm_v128_store32_lane(p + 3 * (size_t)si, b, 3);
}

/* q_store4 on either output type. */
INLINE void qo_store4(v128_t f, QOut y, int si, int ni, Act act) {
  if (!y.qmax) { q_store4(f, (float*)y.p, si, ni, act); return; }
  if (si == 1) { qo_store(y, act_apply(f, act), ni); return; }
  uint8_t t[16] __attribute__((aligned(16)));
  VSTORE(t, qo_bytes(y, act_apply(f, act)));
  for (int l = 0; l < ni; l++) ((uint8_t*)y.p)[(size_t)l * si] = t[l];
}

/* x -> clamp(round_half_even(x / scale) + zp, 0, qmax) as uint8, n values. The clamp is pmax/pmin with
 * the bound first (NaN -> 0, as trunc_sat gave), and the clamped floats, whole numbers in 0..qmax, become
 * integers by adding 2^23 (exact: the mantissa then holds the value) and subtracting its bits: measured,
 * min/max and trunc_sat (a dozen x86 instructions each under Cranelift) made quantizing a depthwise
 * conv's input cost as much as the conv. */
KERNEL void qu8_quantize(int n, const float* x, uint8_t* y, const float* scale, const int32_t* zp, int qmax) {
  const v128_t vs = VSPLAT(scale[0]), vz = VSPLAT((float)zp[0]), vmax = VSPLAT((float)qmax);
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
    for (int l = 0; l < 4; l++) q[l] = qu8_quant4(VLOAD(src + 4 * l), vs, vz, vmax);
    const v128_t b = qu8_narrow16(q);
    if (left >= 16) {
      VSTORE(y + i, b);
    } else {
      uint8_t tb[16] __attribute__((aligned(16)));
      VSTORE(tb, b);
      for (int l = 0; l < left; l++) y[i + l] = tb[l];
    }
  }
}

/* Thread tid's share of qu8_quantize: whole 16-value steps, each quantized as in one call. */
INLINE void qu8_quantize_part(int n, const float* x, uint8_t* y, const float* scale, const int32_t* zp, int qmax,
                              int tid, int nt) {
  int lo, hi;
  cuvil_split(n, 16, tid, nt, &lo, &hi);
  if (lo < hi) qu8_quantize(hi - lo, x + lo, y + lo, scale, zp, qmax);
}

/* Lane-wise min and max of x[0, n & ~3) into mn, mx (wasm's f32x4 min/max: NaN wins and -0 < +0, so
 * lanes combined in any grouping give the same bits). */
INLINE void qu8_range4(const float* x, int n, v128_t* mn, v128_t* mx) {
  for (int k = 0; k + 4 <= n; k += 4) {
    const v128_t v = VLOAD(x + k);
    *mn = wasm_f32x4_min(*mn, v);
    *mx = wasm_f32x4_max(*mx, v);
  }
}

/* Scale and zero point of the range [min(0, x), max(0, x)] onto 0..qmax: lanes vmn, vmx (qu8_range4 from
 * 0), then the n & 3 values of tail. */
INLINE void qu8_dyn_params(v128_t vmn, v128_t vmx, const float* tail, int n, int qmax, float* scale,
                           int32_t* zp) {
  float tmn[4] __attribute__((aligned(16))), tmx[4] __attribute__((aligned(16)));
  VSTORE(tmn, vmn);
  VSTORE(tmx, vmx);
  float mn = 0.0f, mx = 0.0f;
  for (int l = 0; l < 4; l++) {
    mn = tmn[l] < mn ? tmn[l] : mn;
    mx = tmx[l] > mx ? tmx[l] : mx;
  }
  for (int k = 0; k < (n & 3); k++) { mn = tail[k] < mn ? tail[k] : mn; mx = tail[k] > mx ? tail[k] : mx; }
  float s = (mx - mn) / (float)qmax;
  if (!(s > 0.0f)) s = 1.0f;
  float z = wasm_f32x4_extract_lane(wasm_f32x4_nearest(VSPLAT(-mn / s)), 0);
  z = z < 0.0f ? 0.0f : (z > (float)qmax ? (float)qmax : z);
  *scale = s;
  *zp = (int32_t)z;
}

/* Each thread's lanes of a per-tensor range: written before a barrier, read after it. */
static v128_t qu8_dyn_lanes[CUVIL_MAX_THREADS][2];
/* Values below which every thread scans a whole per-tensor range itself: fewer than a barrier costs. */
#define QU8_DYN_SPLIT 65536

/* Per-tensor dynamic quantization parameters of x[0, n), in every thread's scale and zp (nt 1: the
 * caller's alone). Large tensors: each thread takes the lanes of its 16-value steps, then all combine
 * them in thread order (the same lanes as one pass, see qu8_range4); all threads must call it, and meet
 * again before the next call. */
INLINE void qu8_dyn_tensor(int n, const float* x, int qmax, float* scale, int32_t* zp, int tid, int nt) {
  const v128_t zero = wasm_f32x4_const_splat(0.0f);
  v128_t mn = zero, mx = zero;
  if (nt == 1 || n < QU8_DYN_SPLIT) {
    qu8_range4(x, n, &mn, &mx);
  } else {
    int lo, hi;
    cuvil_split(n & ~3, 16, tid, nt, &lo, &hi);
    qu8_range4(x + lo, hi - lo, &mn, &mx);
    qu8_dyn_lanes[tid][0] = mn;
    qu8_dyn_lanes[tid][1] = mx;
    cuvil_barrier();
    mn = mx = zero;
    for (int t = 0; t < nt; t++) {
      mn = wasm_f32x4_min(mn, qu8_dyn_lanes[t][0]);
      mx = wasm_f32x4_max(mx, qu8_dyn_lanes[t][1]);
    }
  }
  qu8_dyn_params(mn, mx, x + (n & ~3), n, qmax, scale, zp);
}

/* Dynamic quantization: per row, range [min(0, x), max(0, x)] onto 0..qmax (ONNX DynamicQuantizeLinear
 * for qmax 255 and one row); scale and zero point written to scale[r], zp[r] (one row: by thread 0; the
 * threads split the rows, or one row's values). */
KERNEL void qu8_quantize_dyn(int rows, int K, const float* x, uint8_t* y, float* scale, int32_t* zp,
                             int qmax, int tid, int nt) {
  if (rows == 1) {
    float s;
    int32_t z;
    qu8_dyn_tensor(K, x, qmax, &s, &z, tid, nt);
    qu8_quantize_part(K, x, y, &s, &z, qmax, tid, nt);
    if (tid == 0) { scale[0] = s; zp[0] = z; }
    return;
  }
  int r0, r1;
  cuvil_split(rows, 1, tid, nt, &r0, &r1);
  for (int r = r0; r < r1; r++) {
    const float* xr = x + (size_t)r * K;
    v128_t mn = wasm_f32x4_const_splat(0.0f), mx = mn;
    qu8_range4(xr, K, &mn, &mx);
    qu8_dyn_params(mn, mx, xr + (K & ~3), K, qmax, scale + r, zp + r);
    qu8_quantize(K, xr, y + (size_t)r * K, scale + r, zp + r, qmax);
  }
}

/* n bytes of pad at d: 16 a store, the last store overlapping the one before (n >= 16). */
INLINE void qu8_fill(uint8_t* d, int n, uint8_t pad) {
  if (n < 16) {
    for (int i = 0; i < n; i++) d[i] = pad;
    return;
  }
  const v128_t v = wasm_u8x16_splat(pad);
  for (int i = 0; i + 16 < n; i += 16) VSTORE(d + i, v);
  VSTORE(d + n - 16, v);
}

/* d[i] = s[i * sw] for i < n: stride 1 and 2 a vector of 16 at a time (stride 2 keeps the even bytes of
 * 32, the last of which may lie one past the run: regions have guards), the last vector overlapping the
 * one before; short runs and other strides byte by byte. */
INLINE void qu8_copy_run(uint8_t* d, const uint8_t* s, int n, int sw) {
  if (n < 16 || sw > 2) {
    for (int i = 0; i < n; i++) d[i] = s[(size_t)i * sw];
    return;
  }
  for (int i = 0;; i += 16) {
    if (i + 16 > n) i = n - 16;
    VSTORE(d + i, sw == 1 ? VLOAD(s + i)
                          : wasm_i8x16_shuffle(VLOAD(s + 2 * i), VLOAD(s + 2 * i + 16), 0, 2, 4, 6, 8, 10, 12,
                                               14, 16, 18, 20, 22, 24, 26, 28, 30));
    if (i + 16 >= n) return;
  }
}

/* im2col on quantized NCHW input, channel-major: output pixels [p0, p0+pc) of tap k = (c, ky, kx) as
 * row k of col (stride ldk bytes), the planes' layout qu8_pack_nchw_x4 packs. Per output row and tap the
 * pixels reading the image are one strided run of an input row, the rest the zero point `pad` (the
 * quantized 0.0): a row copy and two fills, where a byte-wise patch gather cost more than the GEMM on
 * K = 144-720 (measured 2026-12-03: YOLOv8n-style int8's 3x3 convs). */
KERNEL void qu8_im2col_kmajor(const uint8_t* x, int C, int H, int W, int kh, int kw, int sh, int sw, int dh,
                              int dw, int pt, int pl, int OW, int p0, int pc, uint8_t pad, uint8_t* col,
                              int ldk) {
  const size_t tap = (size_t)ldk, plane = (size_t)kh * kw * ldk;
  for (int j = 0; j < pc;) {
    const int oy = (p0 + j) / OW, ox0 = (p0 + j) % OW;
    const int n = OW - ox0 < pc - j ? OW - ox0 : pc - j;
    for (int ky = 0; ky < kh; ky++) {
      const int iy = oy * sh - pt + ky * dh;
      for (int kx = 0; kx < kw; kx++) {
        uint8_t* d = col + (size_t)(ky * kw + kx) * tap + j;
        if (iy < 0 || iy >= H) {
          for (int c = 0; c < C; c++) qu8_fill(d + c * plane, n, pad);
          continue;
        }
        /* input column ox * sw + off lies in the row for ox in [lo, hi) */
        const int off = kx * dw - pl;
        int lo = off >= 0 ? 0 : (sw - 1 - off) / sw, hi = W - 1 - off >= 0 ? (W - 1 - off) / sw + 1 : 0;
        lo = lo < ox0 ? ox0 : lo > ox0 + n ? ox0 + n : lo;
        hi = hi > ox0 + n ? ox0 + n : hi < lo ? lo : hi;
        const uint8_t* src = x + (size_t)iy * W + (size_t)lo * sw + off;
        for (int c = 0; c < C; c++, src += (size_t)H * W) {
          uint8_t* dc = d + c * plane;
          qu8_fill(dc, lo - ox0, pad);
          qu8_copy_run(dc + (lo - ox0), src, hi - lo, sw);
          qu8_fill(dc + (hi - ox0), ox0 + n - hi, pad);
        }
      }
    }
    j += n;
  }
}

#define QBCAST(v, l) wasm_i32x4_shuffle((v), (v), (l), (l), (l), (l))

/* Packed activations (qu8_pack_x4, qu8_pack_nchw_x4): [ceil(J/4)][K4/4][4 tokens][4 * xb bytes], K4 =
 * ceil4(K): per block of 4 tokens and step of 4 k, each token's 4-byte group, either side by side (xb 1:
 * one 16-byte vector a step, the widened loops load two tokens' groups at a time) or broadcast to a
 * whole vector (xb 4: 64 bytes a step, for the relaxed 7-bit loops, which then load a token's group
 * where they shuffled it out of the step's vector: 4 shuffles fewer per 8 dots in a loop bound by the
 * vector ports those share with the dots; measured 2026-12-05, interleaved A/B: int8 MatMul 128x3072x768
 * 6-9% faster, int8 ResNet-50 / MobileNetV2 / encoder 2-4%, the 4-bit GEMM at 128 tokens 4%; a
 * load32_splat per token instead becomes a scalar load, a move and a broadcast under Cranelift). xb is
 * bytes per token and k: QXB7 and QXB8 per activation width (ops/qlinear.py's xpack_bytes sizes the
 * scratch for it in every tier). */
#define QXB7 (CUVIL_RELAXED ? 4 : 1)
#define QXB8 1

/* Where token j's groups start in packed activations (its block, then its group in the block's steps). */
INLINE size_t qx_offset(int j, int K4, int xb) {
  return ((size_t)(j & ~3) * K4 + 4 * (size_t)(j & 3)) * xb;
}

/* One step's 4 token groups v (side by side, as loaded or transposed) stored at d in layout xb. */
INLINE void qx_store_step(uint8_t* d, v128_t v, int xb) {
  if (xb == 1) {
    VSTORE(d, v);
    return;
  }
  VSTORE(d, QBCAST(v, 0));
  VSTORE(d + 16, QBCAST(v, 1));
  VSTORE(d + 32, QBCAST(v, 2));
  VSTORE(d + 48, QBCAST(v, 3));
}

/* Token t's group broadcast to every lane, from a step xp of packed activations in layout xb (a macro:
 * the shuffle's lane must be a literal). */
#define QX_TOKEN(xp, t, xb) ((xb) == 4 ? VLOAD((xp) + 16 * (t)) : QBCAST(VLOAD(xp), (t)))

/* Pack activation rows x (J rows of K bytes, stride ldx) for the GEMM loops in layout xb (see above): a
 * 4x4 transpose of i32 lanes per 16 k gives 4 steps' vectors. A last partial block repeats row j in its
 * missing rows (the 4-token loops never run on it, the 1-token loop reads only real rows), so it takes
 * the vector path too; k past K is zero. */
KERNEL void qu8_pack_x4(int J, int K, const uint8_t* x, int ldx, uint8_t* xp, int xb) {
  const int K4 = (K + 3) & ~3;
  for (int j = 0; j < J; j += 4, xp += (size_t)4 * K4 * xb) {
    const int nj = J - j < 4 ? J - j : 4;
    const uint8_t* r[4];
    for (int t = 0; t < 4; t++) r[t] = x + (size_t)(j + (t < nj ? t : 0)) * ldx;
    int k = 0;
    for (; k + 16 <= K; k += 16) {
      v128_t v[4] = {VLOAD(r[0] + k), VLOAD(r[1] + k), VLOAD(r[2] + k), VLOAD(r[3] + k)};
      q_transpose4(v);
      for (int q = 0; q < 4; q++) qx_store_step(xp + (size_t)(4 * k + 16 * q) * xb, v[q], xb);
    }
    for (; k < K4; k += 4) {
      uint8_t g[16] __attribute__((aligned(16)));
      for (int b = 0; b < 16; b++) {
        const int t = b >> 2, kk = k + (b & 3);
        g[b] = t < nj && kk < K ? r[t][kk] : 0;
      }
      qx_store_step(xp + (size_t)4 * k * xb, VLOAD(g), xb);
    }
  }
}

/* 16 bytes of a channel's pixel row: all 16, or the first n < 16 and zeros (nothing past them is read). */
INLINE v128_t qu8_row16(const uint8_t* r, int n) {
  if (n == 16) return VLOAD(r);
  uint8_t t[16] __attribute__((aligned(16))) = {0};
  for (int l = 0; l < n; l++) t[l] = r[l];
  return VLOAD(t);
}

/* Pack J tokens of channel-major activations (channel k's J bytes at x + k * ldk: an NCHW plane set, so
 * a 1x1 convolution's input as it lies) into qu8_pack_x4's layout xb, with no im2col rows in between.
 * Per 16 pixels and 4 channels: four row loads, byte then 16-bit interleaves give 4 pixels' 4-byte
 * groups per vector, stored into 4 consecutive token blocks. Channels past K and pixels past J are zero
 * (no loop reads a partial block's missing tokens); a last step of fewer than 16 pixels copies its rows. */
KERNEL void qu8_pack_nchw_x4(int J, int K, const uint8_t* x, int ldk, uint8_t* xp, int xb) {
  const int K4 = (K + 3) & ~3;
  const size_t bs = (size_t)4 * K4 * xb;  /* bytes per 4-token block */
  for (int j = 0; j < J; j += 16) {
    const int nj = J - j < 16 ? J - j : 16, nb = (nj + 3) >> 2;
    uint8_t* blk = xp + (size_t)(j >> 2) * bs;
    for (int k = 0; k < K4; k += 4, blk += 16 * xb) {
      const uint8_t* r = x + (size_t)k * ldk + j;
      v128_t a, b, c, d;
      if (nj == 16 && k + 4 <= K) {
        a = VLOAD(r); b = VLOAD(r + ldk); c = VLOAD(r + 2 * (size_t)ldk); d = VLOAD(r + 3 * (size_t)ldk);
      } else {
        a = qu8_row16(r, nj);
        b = qu8_row16(r + ldk, k + 1 < K ? nj : 0);
        c = qu8_row16(r + 2 * (size_t)ldk, k + 2 < K ? nj : 0);
        d = qu8_row16(r + 3 * (size_t)ldk, k + 3 < K ? nj : 0);
      }
      const v128_t ab0 = wasm_i8x16_shuffle(a, b, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
      const v128_t ab1 = wasm_i8x16_shuffle(a, b, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
      const v128_t cd0 = wasm_i8x16_shuffle(c, d, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
      const v128_t cd1 = wasm_i8x16_shuffle(c, d, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
      const v128_t o[4] = {wasm_i16x8_shuffle(ab0, cd0, 0, 8, 1, 9, 2, 10, 3, 11),
                           wasm_i16x8_shuffle(ab0, cd0, 4, 12, 5, 13, 6, 14, 7, 15),
                           wasm_i16x8_shuffle(ab1, cd1, 0, 8, 1, 9, 2, 10, 3, 11),
                           wasm_i16x8_shuffle(ab1, cd1, 4, 12, 5, 13, 6, 14, 7, 15)};
      for (int q = 0; q < nb; q++) qx_store_step(blk + q * bs, o[q], xb);
    }
  }
}

/* The 4x4 widened loop's pair sums (qs8_widen_step's acc: per token pair (t, t+1), rows 0-1 straight
 * [r0t r0t r1t' r1t'] and row-swapped [r1t r1t r0t' r0t'], rows 2-3 likewise) as each token's 4 row
 * sums: out[t] = rows 0-3 of token t. */
INLINE void qs8_widen_tokens(const v128_t* acc, v128_t* out) {
  for (int u = 0; u < 2; u++) {
    const v128_t a = acc[4 * u], b = acc[4 * u + 1], c = acc[4 * u + 2], d = acc[4 * u + 3];
    const v128_t p = qpairs_rows(a, b), q = qpairs_rows(c, d);
    out[2 * u] = wasm_i32x4_shuffle(p, q, 0, 2, 4, 6);  /* p = [r0t r1t' r1t r0t'], q = [r2t r3t' r3t r2t'] */
    out[2 * u + 1] = wasm_i32x4_shuffle(p, q, 3, 1, 7, 5);
  }
}

/* One 4 k step of the 4x4 widened loop: weight vector w (rows 0-3), token groups xp (tokens 0-3), pair
 * sums into acc[0..3] (tokens 0-1: straight rows 0-1, swapped 0-1, straight 2-3, swapped 2-3) and
 * acc[4..7] (tokens 2-3). Inlined into loops that keep acc in registers. */
INLINE void qs8_widen_step(const int8_t* w, const uint8_t* xp, v128_t* acc) {
  const v128_t ql = wasm_i16x8_load8x8(w), qh = wasm_i16x8_load8x8(w + 8);
  const v128_t qls = wasm_i32x4_shuffle(ql, ql, 2, 3, 0, 1), qhs = wasm_i32x4_shuffle(qh, qh, 2, 3, 0, 1);
  for (int u = 0; u < 2; u++) {
    const v128_t x = wasm_u16x8_load8x8(xp + 8 * u);
    acc[4 * u] = wasm_i32x4_add(acc[4 * u], wasm_i32x4_dot_i16x8(ql, x));
    acc[4 * u + 1] = wasm_i32x4_add(acc[4 * u + 1], wasm_i32x4_dot_i16x8(qls, x));
    acc[4 * u + 2] = wasm_i32x4_add(acc[4 * u + 2], wasm_i32x4_dot_i16x8(qh, x));
    acc[4 * u + 3] = wasm_i32x4_add(acc[4 * u + 3], wasm_i32x4_dot_i16x8(qhs, x));
  }
}

/* Widened GEMM loops (SIMD128; 8-bit activations in every tier): 4 rows (one weight vector of an 8-row
 * panel, stride 32 bytes per 4 k) x 4 tokens, run twice per panel (16 accumulators would spill), and 8
 * rows x 1 token (the GEMV reads each token group once). out[v * NT + t]: rows 4v..4v+3, token t. The
 * loads widen: i16x8.load8x8_s takes a weight vector's row pairs (rows 0-1, rows 2-3: one pmovsxbw each),
 * i16x8.load8x8_u two tokens' 4-byte groups. Each i32x4.dot_i16x8_s then multiplies a row pair by a token
 * pair lane for lane into pair sums (k 0-1, k 2-3), added up over k; the sums are exact int32, so every
 * order gives the relaxed dot's totals.
 *  - 4x4: the row pairs also meet the token pairs with their rows swapped (one shuffle per row pair), so
 *    rows (0,1) x tokens (0,1) give [r0t0 r0t0 r1t1 r1t1] and [r1t0 r1t0 r0t1 r0t1]: every row meets
 *    every token with no per-token broadcast (22 vector instructions per 64 multiply-adds, 24 with one);
 *    qs8_widen_tokens sorts the pair sums into tokens at the end.
 *  - 8x1: the token's group is broadcast to both halves by one shuffle; its 8-byte load stays inside
 *    the 16 bytes the group's step holds from there. */
static __attribute__((noinline)) void qs8_loop_widen_4x4(int K4, const int8_t* w, const uint8_t* xp,
                                                        v128_t* out) {
  v128_t acc[8];
  for (int i = 0; i < 8; i++) acc[i] = wasm_i32x4_const_splat(0);
  const int8_t* wend = w + (size_t)8 * K4;
  for (; w < wend; w += 32, xp += 16) qs8_widen_step(w, xp, acc);
  qs8_widen_tokens(acc, out);
}

static __attribute__((noinline)) void qs8_loop_widen_8x1(int K4, const int8_t* w, const uint8_t* xp,
                                                        v128_t* out) {
  v128_t l0 = wasm_i32x4_const_splat(0), h0 = l0;
  v128_t l1 = wasm_i32x4_const_splat(0), h1 = l1;
  const int8_t* wend = w + (size_t)8 * K4;
  for (; w < wend; w += 32, xp += 16) {
    const v128_t x = wasm_u16x8_load8x8(xp), s = wasm_i32x4_shuffle(x, x, 0, 1, 0, 1);
    l0 = wasm_i32x4_add(l0, wasm_i32x4_dot_i16x8(wasm_i16x8_load8x8(w + 0), s));
    h0 = wasm_i32x4_add(h0, wasm_i32x4_dot_i16x8(wasm_i16x8_load8x8(w + 8), s));
    l1 = wasm_i32x4_add(l1, wasm_i32x4_dot_i16x8(wasm_i16x8_load8x8(w + 16), s));
    h1 = wasm_i32x4_add(h1, wasm_i32x4_dot_i16x8(wasm_i16x8_load8x8(w + 24), s));
  }
  out[0] = qpairs_rows(l0, h0);
  out[1] = qpairs_rows(l1, h1);
}

#if CUVIL_RELAXED
/* Relaxed GEMM loops (7-bit activations, packed broadcast: QXB7 is 4): 8 rows (the panel's two weight
 * vectors) x NT tokens, one relaxed dot per weight vector and token group: out[t] = rows 0-3, out[NT + t]
 * = rows 4-7. 8x4 keeps 8 accumulators + 2 weights + a token group in Cranelift's 16 registers; noinline
 * for the same reason as f32-gemm's loop. */
static __attribute__((noinline)) void qs8_loop_relaxed_8x4(int K4, const int8_t* w, const uint8_t* xp,
                                                              v128_t* out) {
  v128_t a0 = wasm_i32x4_const_splat(0), c0 = a0;
  v128_t a1 = wasm_i32x4_const_splat(0), c1 = a1;
  v128_t a2 = wasm_i32x4_const_splat(0), c2 = a2;
  v128_t a3 = wasm_i32x4_const_splat(0), c3 = a3;
  const int8_t* wend = w + (size_t)8 * K4;
  for (; w < wend; w += 32, xp += 16 * QXB7) {
    const v128_t p = VLOAD(w), q = VLOAD(w + 16);
    {
      const v128_t b = QX_TOKEN(xp, 0, QXB7);
      a0 = wasm_i32x4_relaxed_dot_i8x16_i7x16_add(p, b, a0);
      c0 = wasm_i32x4_relaxed_dot_i8x16_i7x16_add(q, b, c0);
    }
    {
      const v128_t b = QX_TOKEN(xp, 1, QXB7);
      a1 = wasm_i32x4_relaxed_dot_i8x16_i7x16_add(p, b, a1);
      c1 = wasm_i32x4_relaxed_dot_i8x16_i7x16_add(q, b, c1);
    }
    {
      const v128_t b = QX_TOKEN(xp, 2, QXB7);
      a2 = wasm_i32x4_relaxed_dot_i8x16_i7x16_add(p, b, a2);
      c2 = wasm_i32x4_relaxed_dot_i8x16_i7x16_add(q, b, c2);
    }
    {
      const v128_t b = QX_TOKEN(xp, 3, QXB7);
      a3 = wasm_i32x4_relaxed_dot_i8x16_i7x16_add(p, b, a3);
      c3 = wasm_i32x4_relaxed_dot_i8x16_i7x16_add(q, b, c3);
    }
  }
  out[0] = a0; out[4] = c0;
  out[1] = a1; out[5] = c1;
  out[2] = a2; out[6] = c2;
  out[3] = a3; out[7] = c3;
}

static __attribute__((noinline)) void qs8_loop_relaxed_8x1(int K4, const int8_t* w, const uint8_t* xp,
                                                              v128_t* out) {
  v128_t a0 = wasm_i32x4_const_splat(0), c0 = a0;
  const int8_t* wend = w + (size_t)8 * K4;
  for (; w < wend; w += 32, xp += 16 * QXB7) {
    const v128_t p = VLOAD(w), q = VLOAD(w + 16);
    {
      const v128_t b = QX_TOKEN(xp, 0, QXB7);
      a0 = wasm_i32x4_relaxed_dot_i8x16_i7x16_add(p, b, a0);
      c0 = wasm_i32x4_relaxed_dot_i8x16_i7x16_add(q, b, c0);
    }
  }
  out[0] = a0; out[1] = c0;
}

#endif
/* Every sw-th byte of every sh-th row of C uint8 planes (H x W) into dst (C x OH x OW, contiguous): stride
 * 2 keeps the even bytes of 32 per step (loads stay inside the row), other strides and row tails go one
 * byte at a time. For the strided 1x1 convs (qs8_conv1x1_sub). */
static void qu8_subsample_planes(const uint8_t* x, int C, int H, int W, int sh, int sw, int OH, int OW,
                                 uint8_t* dst) {
  for (int c = 0; c < C; c++) {
    const uint8_t* xc = x + (size_t)c * H * W;
    for (int oy = 0; oy < OH; oy++, dst += OW) {
      const uint8_t* row = xc + (size_t)oy * sh * W;
      int ox = 0;
      if (sw == 2)
        for (; ox + 15 < OW && 2 * ox + 31 < W; ox += 16)
          VSTORE(dst + ox, wasm_i8x16_shuffle(VLOAD(row + 2 * ox), VLOAD(row + 2 * ox + 16), 0, 2, 4, 6, 8, 10,
                                              12, 14, 16, 18, 20, 22, 24, 26, 28, 30));
      for (; ox < OW; ox++) dst[ox] = row[(size_t)ox * sw];
    }
  }
}

/* How the threads share a conv chunk of pc output pixels: each packs pixels [lo, hi) (whole 16-pixel
 * steps, qu8_pack_nchw_x4's) into the shared xp from token lo. With two steps or more per thread each
 * multiplies its own pixels by every output channel (returns 1); else they meet once the chunk is packed
 * and split the output channels in 8-row panels. */
INLINE int q_chunk_split(int pc, int tid, int nt, int* lo, int* hi) {
  cuvil_split(pc, 16, tid, nt, lo, hi);
  return nt == 1 || (pc + 15) / 16 >= 2 * nt;
}

/* Most pixels a claim of qs8_conv2d (im2col's) and of qs8_conv1x1 (packed straight from the planes): in
 * interleaved A/B runs on 2 threads (2026-12-06, 2-core Xeon), int8 ResNet-50 and MobileNetV2 ran 2-3%
 * slower with 1x1 claims of 64 than of 128 or 256, and the same with im2col claims of 64 or 128 (256: 2-5%
 * slower). */
#define QS8_CONV_STEP 64
#define QS8_1X1_STEP 128

/* Pixels a claim when the threads share a conv's pixels (qs8_conv2d, qs8_conv1x1): a multiple of 16 up
 * to `most` that fits each thread a part of the chunk-sized scratch (pchunk / nt pixels), as large as
 * gives each thread CUVIL_CHUNKS_PER_THREAD claims of the P pixels (a late thread's last claim is then a
 * small share), 16 when fewer; 0 (they split a chunk's output channels instead) on one thread, or with
 * fewer than 2 claims a thread. */
INLINE int q_px_step(int P, int pchunk, int most, int nt) {
  int s = P / (CUVIL_CHUNKS_PER_THREAD * nt);
  s = (s < most ? s : most) & ~15;
  s = s > 16 ? s : 16;
  return nt > 1 && s <= pchunk / nt && P >= 2 * nt * s ? s : 0;
}

/* The pixels of a conv chunk of pc a thread takes, [a, b) at a time (q_px_next): claims of `step` from a
 * shared counter (from both ends with `ends`: cuvil_chunks_ends), or (step 0) its static share, whole
 * 16-pixel steps (all pc on one thread), at once. */
INLINE CuvilChunks q_px_claims(int pc, int step, int ends, int tid, int nt, int* off) {
  if (step) {
    *off = 0;
    return ends ? cuvil_chunks_ends(pc, step, tid, nt) : cuvil_chunks_of(pc, step, tid, nt);
  }
  int hi;
  cuvil_split(pc, 16, tid, nt, off, &hi);
  return cuvil_chunks_of(hi - *off, hi > *off ? hi - *off : 1, tid, 1);
}
INLINE int q_px_next(CuvilChunks* d, int off, int* a, int* b) {
  if (!cuvil_chunk(d, a, b)) return 0;
  *a += off;
  *b += off;
  return 1;
}

/* One 8-row panel x NT tokens: out[t] = rows 0-3 of token t, out[NT + t] = rows 4-7. */
INLINE void qs8_tile_x7_8x4(int K4, const int8_t* w, const uint8_t* xp, v128_t* out) {
#if CUVIL_RELAXED && 7 == 7
  qs8_loop_relaxed_8x4(K4, w, xp, out);
#else
  qs8_loop_widen_4x4(K4, w, xp, out);
  qs8_loop_widen_4x4(K4, w + 16, xp, out + 4);
#endif
}

INLINE void qs8_tile_x7_8x1(int K4, const int8_t* w, const uint8_t* xp, v128_t* out) {
#if CUVIL_RELAXED && 7 == 7
  qs8_loop_relaxed_8x1(K4, w, xp, out);
#else
  qs8_loop_widen_8x1(K4, w, xp, out);
#endif
}

/* y[i*si + j*sj] for i < I, j < J (see the header for operands and the epilogue) from activations
 * already packed in xp (qu8_pack_x4's layout QXB7). w is packed in 8-row panels [ceil(I/8)][K4/4][8][4]
 * (K4 = ceil4(K)); every panel meets 4 tokens at a time, the last 1-3 tokens one by one. */
INLINE void qs8_gemm_tiles_x7(int I, int J, int K, const int8_t* w, const uint8_t* xp, const float* xs,
                                const int32_t* xz, int xstep, const int32_t* wsum, const float* ws,
                                const float* bias, QOut y, int si, int sj, Act act) {
  const int K4 = (K + 3) & ~3, J4 = J & ~3;
  for (int i = 0; i < I; i += 8) {
    const int8_t* wi = w + (size_t)i * K4;
    /* the panel's row operands and (xstep 0: convs) their products with the activation grid, once a
     * panel: the stores to y are bytes, which may alias anything, so the compiler reloads what the tiles
     * read through pointers after each */
    v128_t vsum[2], vws[2], vb[2], zs0[2], sc0[2];
    for (int h = 0; h < 2 && i + 4 * h < I; h++) {
      vsum[h] = VLOAD(wsum + i + 4 * h), vws[h] = VLOAD(ws + i + 4 * h), vb[h] = VLOAD(bias + i + 4 * h);
      zs0[h] = wasm_i32x4_mul(vsum[h], wasm_i32x4_splat(xz[0]));
      sc0[h] = wasm_f32x4_mul(vws[h], VSPLAT(xs[0]));
    }
    for (int j = 0; j < J; ) {
      const int nt = j < J4 ? 4 : 1;
      const uint8_t* xj = xp + qx_offset(j, K4, QXB7);
      v128_t acc[8];
      if (nt == 4) qs8_tile_x7_8x4(K4, wi, xj, acc);
      else qs8_tile_x7_8x1(K4, wi, xj, acc);
      for (int h = 0; h < 2; h++) {
        const int ih = i + 4 * h, ni = I - ih < 4 ? I - ih : 4;
        if (ni <= 0) break;
        const QOut yt = qo_at(y, (size_t)ih * si + (size_t)j * sj);
        v128_t f[4];
        for (int t = 0; t < nt; t++) {  /* per token with per-token grids (the same operations: the same bits) */
          const v128_t zs = xstep ? wasm_i32x4_mul(vsum[h], wasm_i32x4_splat(xz[j + t])) : zs0[h];
          const v128_t sc = xstep ? wasm_f32x4_mul(vws[h], VSPLAT(xs[j + t])) : sc0[h];
          f[t] = q_dequant(acc[h * nt + t], zs, sc, vb[h]);
        }
        if (nt == 4 && sj == 1) {  /* tokens adjacent in y (conv output rows): one vector per row */
          for (int t = 0; t < 4; t++) f[t] = act_apply(f[t], act);
          qo_store_tile(yt, f, si, ni);
        } else {
          for (int t = 0; t < nt; t++) qo_store4(f[t], qo_at(yt, (size_t)t * sj), si, ni, act);
        }
      }
      j += nt;
    }
  }
}

/* qs8_gemm_tiles with the common activations' kinds constant (ACT_SPECIALIZED). */
KERNEL void qs8_gemm_packed_x7(int I, int J, int K, const int8_t* w, const uint8_t* xp, const float* xs,
                                 const int32_t* xz, int xstep, const int32_t* wsum, const float* ws,
                                 const float* bias, QOut y, int si, int sj, Act act) {
#define QS8_TILES(a) qs8_gemm_tiles_x7(I, J, K, w, xp, xs, xz, xstep, wsum, ws, bias, y, si, sj, a)
  ACT_SPECIALIZED(act, QS8_TILES);
#undef QS8_TILES
}

/* qs8_gemm_packed on every thread of a split node: whole 8-row panels claimed from a shared counter
 * (cuvil_chunks; every tile as in one call). */
INLINE void qs8_gemm_rows_x7(int I, int J, int K, const int8_t* w, const uint8_t* xp, const float* xs,
                               const int32_t* xz, int xstep, const int32_t* wsum, const float* ws,
                               const float* bias, QOut y, int si, int sj, Act act, int tid, int nt) {
  CuvilChunks d = cuvil_chunks(I, 8, tid, nt);
  for (int lo, hi; cuvil_chunk(&d, &lo, &hi);)
    qs8_gemm_packed_x7(hi - lo, J, K, w + (size_t)lo * ((K + 3) & ~3), xp, xs, xz, xstep, wsum + lo, ws + lo,
                         bias + lo, qo_at(y, (size_t)lo * si), si, sj, act);
}

/* The GEMM on x rows (J rows of K bytes, stride ldx), each thread its 8-row panels. The threads pack
 * xp together (qu8_pack_x4, whole 4-token blocks each; xpack_bytes(J, K) of scratch in ops/qlinear.py),
 * but a GEMV's (J < 4) xp is each thread's own: each packs the tokens itself, waiting for no one. */
KERNEL void qs8_gemm_x7(int I, int J, int K, const int8_t* w, const uint8_t* x, int ldx, uint8_t* xp,
                          const float* xs, const int32_t* xz, int xstep, const int32_t* wsum,
                          const float* ws, const float* bias, QOut y, int si, int sj, Act act, int tid,
                          int nt) {
  if (J < 4) {
    qu8_pack_x4(J, K, x, ldx, xp, QXB7);
  } else {
    int lo, hi;
    cuvil_split(J, 4, tid, nt, &lo, &hi);
    if (lo < hi) qu8_pack_x4(hi - lo, K, x + (size_t)lo * ldx, ldx, xp + qx_offset(lo, (K + 3) & ~3, QXB7),
                             QXB7);
    q_meet(nt);
  }
  qs8_gemm_rows_x7(I, J, K, w, xp, xs, xz, xstep, wsum, ws, bias, y, si, sj, act, tid, nt);
}

/* The conv kernels' GEMMs (their locals): pixels [a, b) of the chunk at p0, packed from token t of xp,
 * by every output channel; or, the chunk packed, this thread's claims of its 8-row panels. */
#define QS8_PX_GEMM(a, b, t) \
  qs8_gemm_packed_x7(Mg, (b) - (a), K, wg, xp + qx_offset(t, K4, QXB7), xs, xz, 0, wsum + g * Mgp, \
                       ws + g * Mgp, bias + g * Mgp, qo_at(yg, p0 + (a)), P, 1, act)
#define QS8_CH_GEMM() \
  do { \
    q_meet(nt); \
    qs8_gemm_rows_x7(Mg, pc, K, wg, xp, xs, xz, 0, wsum + g * Mgp, ws + g * Mgp, bias + g * Mgp, \
                       qo_at(yg, p0), P, 1, act, tid, nt); \
  } while (0)

/* NCHW convolution on quantized input xq: channel-major im2col per chunk of output pixels
 * (qu8_im2col_kmajor, packed as a 1x1 conv's planes), then the GEMM with output channels as i (rows padded
 * to 8 per group: w [G][Mgp][K4], wsum/ws/bias [G][Mgp]; col and xp hold the taps and packed tokens of
 * pchunk pixels). The same bytes in the same panels as patch rows + qu8_pack_x4.
 * Threads with pixels enough (q_px_step) claim `step` pixels at a time from a shared counter and take
 * each through im2col, packing and the GEMM in a part of col and xp that is theirs alone: no thread waits
 * for another inside the conv, and no cache line of the scratch goes back and forth between cores (a
 * shared chunk with dynamic claims had each core write lines the other wrote last: im2col and packing
 * took twice their one-thread time). With fewer pixels each packs its share of a chunk, they meet and
 * split the output channels' panels. */
KERNEL void qs8_conv2d_x7(const uint8_t* xq, int N, int C, int H, int W, const int8_t* w,
                            const int32_t* wsum, const float* ws, const float* bias, const float* xs,
                            const int32_t* xz, QOut y, int M, int OH, int OW, int G, int kh, int kw,
                            int sh, int sw, int dh, int dw, int pt, int pl, int pchunk, uint8_t* col,
                            uint8_t* xp, Act act, int tid, int nt) {
  const int Cg = C / G, Mg = M / G, Mgp = (Mg + 7) & ~7, K = Cg * kh * kw, K4 = (K + 3) & ~3, P = OH * OW;
  const int step = q_px_step(P, pchunk, QS8_CONV_STEP, nt), ldc = step ? step : (pchunk + 63) & ~63;
  if (step) {
    col += (size_t)tid * step * K;
    xp += qx_offset(tid * step, K4, QXB7);
  }
  for (int n = 0; n < N; n++)
    for (int g = 0; g < G; g++) {
      const uint8_t* xg = xq + ((size_t)n * C + (size_t)g * Cg) * H * W;
      const QOut yg = qo_at(y, ((size_t)n * M + (size_t)g * Mg) * P);
      const int8_t* wg = w + (size_t)g * Mgp * K4;
      for (int p0 = 0; p0 < P; p0 += step ? P : pchunk) {
        const int pc = step ? P : P - p0 < pchunk ? P - p0 : pchunk;
        int off;
        if (!step && n + g + p0) q_meet(nt);  /* everyone is done with the last chunk's col and xp */
        CuvilChunks d = q_px_claims(pc, step, 0, tid, nt, &off);
        for (int a, b; q_px_next(&d, off, &a, &b);) {
          const int at = step ? 0 : a;  /* the claim's place in col and xp: the thread's own part, or the chunk's */
          qu8_im2col_kmajor(xg, Cg, H, W, kh, kw, sh, sw, dh, dw, pt, pl, OW, p0 + a, b - a, (uint8_t)xz[0],
                            col + at, ldc);
          qu8_pack_nchw_x4(b - a, K, col + at, ldc, xp + qx_offset(at, K4, QXB7), QXB7);
          if (step || nt == 1) QS8_PX_GEMM(a, b, at);
        }
        if (!step && nt > 1) QS8_CH_GEMM();
      }
    }
}

/* 1x1 convolution, stride 1, no padding (any groups): each group's uint8 channels are already the GEMM's
 * activations, channel-major, so every chunk of pixels is packed straight from the planes
 * (qu8_pack_nchw_x4) and meets the GEMM (operands and threads as in qs8_conv2d, xp alone; P = pixels per
 * plane). Same bytes in the same panels as im2col + qu8_pack_x4 (padded tokens aside), so the same bits.
 * The pixels are claimed from both ends (cuvil_chunks_ends): a 1x1 conv after a 1x1 conv (MobileNetV2's
 * projection, its residual add, the next expansion) then reads pixels its own core wrote (int8 MobileNetV2
 * 0.97x the time on 2 threads; the im2col convs gained nothing, ResNet-50 1.01x, so they do not). */
KERNEL void qs8_conv1x1_x7(const uint8_t* xq, int N, int C, int P, const int8_t* w, const int32_t* wsum,
                             const float* ws, const float* bias, const float* xs, const int32_t* xz, QOut y,
                             int M, int G, int pchunk, uint8_t* xp, Act act, int tid, int nt) {
  const int Cg = C / G, Mg = M / G, Mgp = (Mg + 7) & ~7, K = Cg, K4 = (Cg + 3) & ~3;
  const int step = q_px_step(P, pchunk, QS8_1X1_STEP, nt);
  if (step) xp += qx_offset(tid * step, K4, QXB7);
  for (int n = 0; n < N; n++)
    for (int g = 0; g < G; g++) {
      const uint8_t* xg = xq + ((size_t)n * C + (size_t)g * Cg) * P;
      const QOut yg = qo_at(y, ((size_t)n * M + (size_t)g * Mg) * P);
      const int8_t* wg = w + (size_t)g * Mgp * K4;
      for (int p0 = 0; p0 < P; p0 += step ? P : pchunk) {
        const int pc = step ? P : P - p0 < pchunk ? P - p0 : pchunk;
        int off;
        if (!step && n + g + p0) q_meet(nt);  /* everyone is done with the last chunk's xp */
        CuvilChunks d = q_px_claims(pc, step, 1, tid, nt, &off);
        for (int a, b; q_px_next(&d, off, &a, &b);) {
          const int at = step ? 0 : a;  /* the claim's place in xp: the thread's own part, or the chunk's */
          qu8_pack_nchw_x4(b - a, Cg, xg + p0 + a, P, xp + qx_offset(at, K4, QXB7), QXB7);
          if (step || nt == 1) QS8_PX_GEMM(a, b, at);
        }
        if (!step && nt > 1) QS8_CH_GEMM();
      }
    }
}
#undef QS8_PX_GEMM
#undef QS8_CH_GEMM

/* 1x1 convolution, unpadded, strided (any groups): per image the uint8 planes are subsampled once into sub
 * (C x OH x OW bytes, shared: each thread subsamples its channels), then qs8_conv1x1 packs them as they
 * lie. The GEMM meets the bytes im2col would write, in the same panels, so the same bits. */
KERNEL void qs8_conv1x1_sub_x7(const uint8_t* xq, int N, int C, int H, int W, const int8_t* w,
                                 const int32_t* wsum, const float* ws, const float* bias, const float* xs,
                                 const int32_t* xz, QOut y, int M, int OH, int OW, int G, int sh, int sw,
                                 int pchunk, uint8_t* sub, uint8_t* xp, Act act, int tid, int nt) {
  const int P = OH * OW;
  int c0, c1;
  cuvil_split(C, 1, tid, nt, &c0, &c1);
  for (int n = 0; n < N; n++) {
    if (n) q_meet(nt);  /* everyone is done with the last image's sub and xp */
    qu8_subsample_planes(xq + ((size_t)n * C + c0) * H * W, c1 - c0, H, W, sh, sw, OH, OW,
                         sub + (size_t)c0 * P);
    q_meet(nt);
    qs8_conv1x1_x7(sub, 1, C, P, w, wsum, ws, bias, xs, xz, qo_at(y, (size_t)n * M * P), M, G, pchunk, xp, act,
                     tid, nt);
  }
}

/* One 8-row panel x NT tokens: out[t] = rows 0-3 of token t, out[NT + t] = rows 4-7. */
INLINE void qs8_tile_x8_8x4(int K4, const int8_t* w, const uint8_t* xp, v128_t* out) {
#if CUVIL_RELAXED && 8 == 7
  qs8_loop_relaxed_8x4(K4, w, xp, out);
#else
  qs8_loop_widen_4x4(K4, w, xp, out);
  qs8_loop_widen_4x4(K4, w + 16, xp, out + 4);
#endif
}

INLINE void qs8_tile_x8_8x1(int K4, const int8_t* w, const uint8_t* xp, v128_t* out) {
#if CUVIL_RELAXED && 8 == 7
  qs8_loop_relaxed_8x1(K4, w, xp, out);
#else
  qs8_loop_widen_8x1(K4, w, xp, out);
#endif
}

/* y[i*si + j*sj] for i < I, j < J (see the header for operands and the epilogue) from activations
 * already packed in xp (qu8_pack_x4's layout QXB8). w is packed in 8-row panels [ceil(I/8)][K4/4][8][4]
 * (K4 = ceil4(K)); every panel meets 4 tokens at a time, the last 1-3 tokens one by one. */
INLINE void qs8_gemm_tiles_x8(int I, int J, int K, const int8_t* w, const uint8_t* xp, const float* xs,
                                const int32_t* xz, int xstep, const int32_t* wsum, const float* ws,
                                const float* bias, QOut y, int si, int sj, Act act) {
  const int K4 = (K + 3) & ~3, J4 = J & ~3;
  for (int i = 0; i < I; i += 8) {
    const int8_t* wi = w + (size_t)i * K4;
    /* the panel's row operands and (xstep 0: convs) their products with the activation grid, once a
     * panel: the stores to y are bytes, which may alias anything, so the compiler reloads what the tiles
     * read through pointers after each */
    v128_t vsum[2], vws[2], vb[2], zs0[2], sc0[2];
    for (int h = 0; h < 2 && i + 4 * h < I; h++) {
      vsum[h] = VLOAD(wsum + i + 4 * h), vws[h] = VLOAD(ws + i + 4 * h), vb[h] = VLOAD(bias + i + 4 * h);
      zs0[h] = wasm_i32x4_mul(vsum[h], wasm_i32x4_splat(xz[0]));
      sc0[h] = wasm_f32x4_mul(vws[h], VSPLAT(xs[0]));
    }
    for (int j = 0; j < J; ) {
      const int nt = j < J4 ? 4 : 1;
      const uint8_t* xj = xp + qx_offset(j, K4, QXB8);
      v128_t acc[8];
      if (nt == 4) qs8_tile_x8_8x4(K4, wi, xj, acc);
      else qs8_tile_x8_8x1(K4, wi, xj, acc);
      for (int h = 0; h < 2; h++) {
        const int ih = i + 4 * h, ni = I - ih < 4 ? I - ih : 4;
        if (ni <= 0) break;
        const QOut yt = qo_at(y, (size_t)ih * si + (size_t)j * sj);
        v128_t f[4];
        for (int t = 0; t < nt; t++) {  /* per token with per-token grids (the same operations: the same bits) */
          const v128_t zs = xstep ? wasm_i32x4_mul(vsum[h], wasm_i32x4_splat(xz[j + t])) : zs0[h];
          const v128_t sc = xstep ? wasm_f32x4_mul(vws[h], VSPLAT(xs[j + t])) : sc0[h];
          f[t] = q_dequant(acc[h * nt + t], zs, sc, vb[h]);
        }
        if (nt == 4 && sj == 1) {  /* tokens adjacent in y (conv output rows): one vector per row */
          for (int t = 0; t < 4; t++) f[t] = act_apply(f[t], act);
          qo_store_tile(yt, f, si, ni);
        } else {
          for (int t = 0; t < nt; t++) qo_store4(f[t], qo_at(yt, (size_t)t * sj), si, ni, act);
        }
      }
      j += nt;
    }
  }
}

/* qs8_gemm_tiles with the common activations' kinds constant (ACT_SPECIALIZED). */
KERNEL void qs8_gemm_packed_x8(int I, int J, int K, const int8_t* w, const uint8_t* xp, const float* xs,
                                 const int32_t* xz, int xstep, const int32_t* wsum, const float* ws,
                                 const float* bias, QOut y, int si, int sj, Act act) {
#define QS8_TILES(a) qs8_gemm_tiles_x8(I, J, K, w, xp, xs, xz, xstep, wsum, ws, bias, y, si, sj, a)
  ACT_SPECIALIZED(act, QS8_TILES);
#undef QS8_TILES
}

/* qs8_gemm_packed on every thread of a split node: whole 8-row panels claimed from a shared counter
 * (cuvil_chunks; every tile as in one call). */
INLINE void qs8_gemm_rows_x8(int I, int J, int K, const int8_t* w, const uint8_t* xp, const float* xs,
                               const int32_t* xz, int xstep, const int32_t* wsum, const float* ws,
                               const float* bias, QOut y, int si, int sj, Act act, int tid, int nt) {
  CuvilChunks d = cuvil_chunks(I, 8, tid, nt);
  for (int lo, hi; cuvil_chunk(&d, &lo, &hi);)
    qs8_gemm_packed_x8(hi - lo, J, K, w + (size_t)lo * ((K + 3) & ~3), xp, xs, xz, xstep, wsum + lo, ws + lo,
                         bias + lo, qo_at(y, (size_t)lo * si), si, sj, act);
}

/* The GEMM on x rows (J rows of K bytes, stride ldx), each thread its 8-row panels. The threads pack
 * xp together (qu8_pack_x4, whole 4-token blocks each; xpack_bytes(J, K) of scratch in ops/qlinear.py),
 * but a GEMV's (J < 4) xp is each thread's own: each packs the tokens itself, waiting for no one. */
KERNEL void qs8_gemm_x8(int I, int J, int K, const int8_t* w, const uint8_t* x, int ldx, uint8_t* xp,
                          const float* xs, const int32_t* xz, int xstep, const int32_t* wsum,
                          const float* ws, const float* bias, QOut y, int si, int sj, Act act, int tid,
                          int nt) {
  if (J < 4) {
    qu8_pack_x4(J, K, x, ldx, xp, QXB8);
  } else {
    int lo, hi;
    cuvil_split(J, 4, tid, nt, &lo, &hi);
    if (lo < hi) qu8_pack_x4(hi - lo, K, x + (size_t)lo * ldx, ldx, xp + qx_offset(lo, (K + 3) & ~3, QXB8),
                             QXB8);
    q_meet(nt);
  }
  qs8_gemm_rows_x8(I, J, K, w, xp, xs, xz, xstep, wsum, ws, bias, y, si, sj, act, tid, nt);
}

/* The conv kernels' GEMMs (their locals): pixels [a, b) of the chunk at p0, packed from token t of xp,
 * by every output channel; or, the chunk packed, this thread's claims of its 8-row panels. */
#define QS8_PX_GEMM(a, b, t) \
  qs8_gemm_packed_x8(Mg, (b) - (a), K, wg, xp + qx_offset(t, K4, QXB8), xs, xz, 0, wsum + g * Mgp, \
                       ws + g * Mgp, bias + g * Mgp, qo_at(yg, p0 + (a)), P, 1, act)
#define QS8_CH_GEMM() \
  do { \
    q_meet(nt); \
    qs8_gemm_rows_x8(Mg, pc, K, wg, xp, xs, xz, 0, wsum + g * Mgp, ws + g * Mgp, bias + g * Mgp, \
                       qo_at(yg, p0), P, 1, act, tid, nt); \
  } while (0)

/* NCHW convolution on quantized input xq: channel-major im2col per chunk of output pixels
 * (qu8_im2col_kmajor, packed as a 1x1 conv's planes), then the GEMM with output channels as i (rows padded
 * to 8 per group: w [G][Mgp][K4], wsum/ws/bias [G][Mgp]; col and xp hold the taps and packed tokens of
 * pchunk pixels). The same bytes in the same panels as patch rows + qu8_pack_x4.
 * Threads with pixels enough (q_px_step) claim `step` pixels at a time from a shared counter and take
 * each through im2col, packing and the GEMM in a part of col and xp that is theirs alone: no thread waits
 * for another inside the conv, and no cache line of the scratch goes back and forth between cores (a
 * shared chunk with dynamic claims had each core write lines the other wrote last: im2col and packing
 * took twice their one-thread time). With fewer pixels each packs its share of a chunk, they meet and
 * split the output channels' panels. */
KERNEL void qs8_conv2d_x8(const uint8_t* xq, int N, int C, int H, int W, const int8_t* w,
                            const int32_t* wsum, const float* ws, const float* bias, const float* xs,
                            const int32_t* xz, QOut y, int M, int OH, int OW, int G, int kh, int kw,
                            int sh, int sw, int dh, int dw, int pt, int pl, int pchunk, uint8_t* col,
                            uint8_t* xp, Act act, int tid, int nt) {
  const int Cg = C / G, Mg = M / G, Mgp = (Mg + 7) & ~7, K = Cg * kh * kw, K4 = (K + 3) & ~3, P = OH * OW;
  const int step = q_px_step(P, pchunk, QS8_CONV_STEP, nt), ldc = step ? step : (pchunk + 63) & ~63;
  if (step) {
    col += (size_t)tid * step * K;
    xp += qx_offset(tid * step, K4, QXB8);
  }
  for (int n = 0; n < N; n++)
    for (int g = 0; g < G; g++) {
      const uint8_t* xg = xq + ((size_t)n * C + (size_t)g * Cg) * H * W;
      const QOut yg = qo_at(y, ((size_t)n * M + (size_t)g * Mg) * P);
      const int8_t* wg = w + (size_t)g * Mgp * K4;
      for (int p0 = 0; p0 < P; p0 += step ? P : pchunk) {
        const int pc = step ? P : P - p0 < pchunk ? P - p0 : pchunk;
        int off;
        if (!step && n + g + p0) q_meet(nt);  /* everyone is done with the last chunk's col and xp */
        CuvilChunks d = q_px_claims(pc, step, 0, tid, nt, &off);
        for (int a, b; q_px_next(&d, off, &a, &b);) {
          const int at = step ? 0 : a;  /* the claim's place in col and xp: the thread's own part, or the chunk's */
          qu8_im2col_kmajor(xg, Cg, H, W, kh, kw, sh, sw, dh, dw, pt, pl, OW, p0 + a, b - a, (uint8_t)xz[0],
                            col + at, ldc);
          qu8_pack_nchw_x4(b - a, K, col + at, ldc, xp + qx_offset(at, K4, QXB8), QXB8);
          if (step || nt == 1) QS8_PX_GEMM(a, b, at);
        }
        if (!step && nt > 1) QS8_CH_GEMM();
      }
    }
}

/* 1x1 convolution, stride 1, no padding (any groups): each group's uint8 channels are already the GEMM's
 * activations, channel-major, so every chunk of pixels is packed straight from the planes
 * (qu8_pack_nchw_x4) and meets the GEMM (operands and threads as in qs8_conv2d, xp alone; P = pixels per
 * plane). Same bytes in the same panels as im2col + qu8_pack_x4 (padded tokens aside), so the same bits.
 * The pixels are claimed from both ends (cuvil_chunks_ends): a 1x1 conv after a 1x1 conv (MobileNetV2's
 * projection, its residual add, the next expansion) then reads pixels its own core wrote (int8 MobileNetV2
 * 0.97x the time on 2 threads; the im2col convs gained nothing, ResNet-50 1.01x, so they do not). */
KERNEL void qs8_conv1x1_x8(const uint8_t* xq, int N, int C, int P, const int8_t* w, const int32_t* wsum,
                             const float* ws, const float* bias, const float* xs, const int32_t* xz, QOut y,
                             int M, int G, int pchunk, uint8_t* xp, Act act, int tid, int nt) {
  const int Cg = C / G, Mg = M / G, Mgp = (Mg + 7) & ~7, K = Cg, K4 = (Cg + 3) & ~3;
  const int step = q_px_step(P, pchunk, QS8_1X1_STEP, nt);
  if (step) xp += qx_offset(tid * step, K4, QXB8);
  for (int n = 0; n < N; n++)
    for (int g = 0; g < G; g++) {
      const uint8_t* xg = xq + ((size_t)n * C + (size_t)g * Cg) * P;
      const QOut yg = qo_at(y, ((size_t)n * M + (size_t)g * Mg) * P);
      const int8_t* wg = w + (size_t)g * Mgp * K4;
      for (int p0 = 0; p0 < P; p0 += step ? P : pchunk) {
        const int pc = step ? P : P - p0 < pchunk ? P - p0 : pchunk;
        int off;
        if (!step && n + g + p0) q_meet(nt);  /* everyone is done with the last chunk's xp */
        CuvilChunks d = q_px_claims(pc, step, 1, tid, nt, &off);
        for (int a, b; q_px_next(&d, off, &a, &b);) {
          const int at = step ? 0 : a;  /* the claim's place in xp: the thread's own part, or the chunk's */
          qu8_pack_nchw_x4(b - a, Cg, xg + p0 + a, P, xp + qx_offset(at, K4, QXB8), QXB8);
          if (step || nt == 1) QS8_PX_GEMM(a, b, at);
        }
        if (!step && nt > 1) QS8_CH_GEMM();
      }
    }
}
#undef QS8_PX_GEMM
#undef QS8_CH_GEMM

/* 1x1 convolution, unpadded, strided (any groups): per image the uint8 planes are subsampled once into sub
 * (C x OH x OW bytes, shared: each thread subsamples its channels), then qs8_conv1x1 packs them as they
 * lie. The GEMM meets the bytes im2col would write, in the same panels, so the same bits. */
KERNEL void qs8_conv1x1_sub_x8(const uint8_t* xq, int N, int C, int H, int W, const int8_t* w,
                                 const int32_t* wsum, const float* ws, const float* bias, const float* xs,
                                 const int32_t* xz, QOut y, int M, int OH, int OW, int G, int sh, int sw,
                                 int pchunk, uint8_t* sub, uint8_t* xp, Act act, int tid, int nt) {
  const int P = OH * OW;
  int c0, c1;
  cuvil_split(C, 1, tid, nt, &c0, &c1);
  for (int n = 0; n < N; n++) {
    if (n) q_meet(nt);  /* everyone is done with the last image's sub and xp */
    qu8_subsample_planes(xq + ((size_t)n * C + c0) * H * W, c1 - c0, H, W, sh, sw, OH, OW,
                         sub + (size_t)c0 * P);
    q_meet(nt);
    qs8_conv1x1_x8(sub, 1, C, P, w, wsum, ws, bias, xs, xz, qo_at(y, (size_t)n * M * P), M, G, pchunk, xp, act,
                     tid, nt);
  }
}

/* y = (x - zp) * scale over n uint8 values (ONNX DequantizeLinear, per tensor). */
KERNEL void qu8_dequantize(int n, const uint8_t* x, float* y, const float* scale, const int32_t* zp) {
  for (int i = 0; i < n; i++) y[i] = (float)((int32_t)x[i] - zp[0]) * scale[0];
}
