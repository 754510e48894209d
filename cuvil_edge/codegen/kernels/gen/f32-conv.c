/* generated from templates/f32-conv.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* f32 convolution (NCHW) as GEMM over output pixels: y[g][m][p] = w[g][m][k] . col[g][k][p].
 *
 * col is never materialised whole: output pixels are processed in chunks of `pchunk` and each chunk
 * is written straight into the GEMM's packed-panel layout ([chunk/8][K][8], see f32-gemm), so the
 * scratch area stays near 512 KiB whatever the layer size. 1D convolutions run with H = 1.
 */

/* Pack output pixels [p0, p0+pc) of one group's im2col matrix into panels (zero padded).
 * Panels whose 8 pixels lie on one output row (the common case) copy each tap as two vectors: stride 1
 * loads a contiguous run, stride 2 de-interleaves 16 floats; taps touching the padding are masked
 * (the loads may read a few floats outside the row, never outside linear memory: regions have guards).
 * Other panels (row wraps, the tail, wider strides) go lane by lane with precomputed bases. */
KERNEL void f32_im2col_packed(const float* x, int C, int H, int W, int kh, int kw, int sh, int sw,
                              int dh, int dw, int pt, int pl, int OW, int p0, int pc, float* bp) {
  const int K = C * kh * kw;
  const v128_t zero = wasm_f32x4_const_splat(0.0f);
  for (int j = 0; j < pc; j += 8) {
    const int nr = pc - j < 8 ? pc - j : 8;
    const int p = p0 + j;
    const int oy = p / OW, ox = p % OW;
    float* dst = bp + (size_t)(j / 8) * K * 8;
    if (nr == 8 && ox + 7 < OW && (sw == 1 || sw == 2)) {
      const int iyb = oy * sh - pt;
      for (int c = 0; c < C; c++) {
        const float* xc = x + (size_t)c * H * W;
        for (int ky = 0; ky < kh; ky++) {
          const int iy = iyb + ky * dh;
          if (iy < 0 || iy >= H) {
            for (int kx = 0; kx < kw; kx++, dst += 8) { VSTORE(dst, zero); VSTORE(dst + 4, zero); }
            continue;
          }
          const float* row = xc + (size_t)iy * W;
          for (int kx = 0; kx < kw; kx++, dst += 8) {
            const int ix0 = ox * sw - pl + kx * dw;
            const float* src = row + ix0;
            v128_t a, b;
            if (sw == 1) {
              a = VLOAD(src); b = VLOAD(src + 4);
            } else {
              a = wasm_i32x4_shuffle(VLOAD(src), VLOAD(src + 4), 0, 2, 4, 6);
              b = wasm_i32x4_shuffle(VLOAD(src + 8), VLOAD(src + 12), 0, 2, 4, 6);
            }
            if (ix0 < 0 || ix0 + 7 * sw >= W) {
              a = mask_columns(a, ix0, sw, W);
              b = mask_columns(b, ix0 + 4 * sw, sw, W);
            }
            VSTORE(dst, a); VSTORE(dst + 4, b);
          }
        }
      }
      continue;
    }
    int iyb[8], ixb[8];
    for (int l = 0; l < 8; l++) {
      const int q = p + l;
      iyb[l] = l < nr ? (q / OW) * sh - pt : -(1 << 28);  /* lanes past the end read nothing */
      ixb[l] = l < nr ? (q % OW) * sw - pl : 0;
    }
    for (int c = 0; c < C; c++) {
      const float* xc = x + (size_t)c * H * W;
      for (int ky = 0; ky < kh; ky++) {
        for (int kx = 0; kx < kw; kx++, dst += 8) {
          for (int l = 0; l < 8; l++) {
            const int iy = iyb[l] + ky * dh, ix = ixb[l] + kx * dw;
            dst[l] = ((unsigned)iy < (unsigned)H && (unsigned)ix < (unsigned)W) ? xc[(size_t)iy * W + ix] : 0.0f;
          }
        }
      }
    }
  }
}

/* One image's 1x1 conv of one group with y channels-last (pixel p's Mg channels at y + p * ldy): the tiles
 * f32_gemm_pa computes (4 channels x 8 pixels, the same loop, bias and activation, so the same bits),
 * each finished into a buffer and stored transposed. Threads claim the pixels in whole panels
 * (cuvil_chunks). */
static void f32_conv1x1_nhwc(const float* x, int Cg, int P, const float* wg, const float* bias, float* y,
                             int ldy, int Mg, Act act, int tid, int nt) {
  const v128_t zero = wasm_f32x4_const_splat(0.0f);
  CuvilChunks d = cuvil_chunks(P, 8, tid, nt);
  for (int lo, hi; cuvil_chunk(&d, &lo, &hi);)
  for (int j = lo; j < hi; j += 8) {
    const int nr = hi - j < 8 ? hi - j : 8;
    for (int i = 0; i < Mg; i += 4) {
      const int mr = Mg - i < 4 ? Mg - i : 4;
      v128_t acc[8];
      float t[32] __attribute__((aligned(16)));
      f32_gemm_loop_4x8(Cg, wg + (size_t)i * Cg, x + j, P, acc);
      f32_gemm_tile_4x8(acc, t, 8, mr, 8, bias ? bias + i : 0, zero, zero, act);
      for (int p = 0; p < nr; p++)
        for (int r = 0; r < mr; r++) y[(size_t)(j + p) * ldy + i + r] = t[r * 8 + p];
    }
  }
}

/* 1x1, stride 1, unpadded: each group's input rows (channels x pixels) are the GEMM's B as they are;
 * no im2col, no packing. nhwc: y is written channels-last ([N][P][M]), so a transpose to NHWC after the
 * conv (a detector head's boxes, reshaped in NHWC order) costs no pass of its own. */
KERNEL void f32_conv1x1(const float* x, int N, int C, int P, const float* w, const float* bias, float* y,
                        int M, int G, int nhwc, Act act, int tid, int nt) {
  const int Cg = C / G, Mg = M / G;
  for (int n = 0; n < N; n++)
    for (int g = 0; g < G; g++) {
      const float* wg = w + (size_t)g * ((Mg + 3) & ~3) * Cg;
      const float* xg = x + ((size_t)n * C + (size_t)g * Cg) * P;
      const float* bg = bias ? bias + g * Mg : 0;
      if (nhwc)
        f32_conv1x1_nhwc(xg, Cg, P, wg, bg, y + (size_t)n * M * P + (size_t)g * Mg, M, Mg, act, tid, nt);
      else
        f32_gemm_pa_part(Mg, P, Cg, wg, xg, 8, P, y + ((size_t)n * M + (size_t)g * Mg) * P, P, bg, 0, act, tid, nt);
    }
}

/* Every sw-th pixel of every sh-th row of C planes (H x W) into dst (C x OH x OW, contiguous): stride 2
 * de-interleaves 8 floats into 4 per step (loads stay inside the row), stride 1 copies vectors, other
 * strides and row tails go one pixel at a time. */
static void f32_subsample_planes(const float* x, int C, int H, int W, int sh, int sw, int OH, int OW,
                                 float* dst) {
  for (int c = 0; c < C; c++) {
    const float* xc = x + (size_t)c * H * W;
    for (int oy = 0; oy < OH; oy++, dst += OW) {
      const float* row = xc + (size_t)oy * sh * W;
      int ox = 0;
      if (sw == 2)
        for (; ox + 3 < OW && 2 * ox + 7 < W; ox += 4)
          VSTORE(dst + ox, wasm_i32x4_shuffle(VLOAD(row + 2 * ox), VLOAD(row + 2 * ox + 4), 0, 2, 4, 6));
      else if (sw == 1)
        for (; ox + 3 < OW; ox += 4) VSTORE(dst + ox, VLOAD(row + ox));
      for (; ox < OW; ox++) dst[ox] = row[(size_t)ox * sw];
    }
  }
}

/* 1x1, unpadded, strided: per image the input planes are subsampled once into scratch (C x OH x OW
 * floats, shared: each thread subsamples its channels), which f32_conv1x1 then reads in place as B. The
 * GEMM sees the values im2col would pack, in the same k order, so the same bits. */
KERNEL void f32_conv1x1_sub(const float* x, int N, int C, int H, int W, const float* w, const float* bias,
                            float* y, int M, int OH, int OW, int G, int sh, int sw, float* scratch, Act act,
                            int tid, int nt) {
  const int P = OH * OW;
  for (int n = 0; n < N; n++) {
    int c0, c1;
    cuvil_split(C, 1, tid, nt, &c0, &c1);
    f32_subsample_planes(x + ((size_t)n * C + c0) * H * W, c1 - c0, H, W, sh, sw, OH, OW,
                         scratch + (size_t)c0 * P);
    cuvil_barrier();
    f32_conv1x1(scratch, 1, C, P, w, bias, y + (size_t)n * M * P, M, G, 0, act, tid, nt);
    cuvil_barrier();
  }
}

/* One chunk of pc output pixels (from p0) of an im2col convolution: PACK writes pixels [p0 + lo, p0 + hi)
 * as panels at bp, then the GEMM. Threads with two or more panels each claim pieces of the chunk from a
 * shared counter (cuvil_chunks) and pack and multiply them with no barrier, so one may already pack the
 * next chunk while another multiplies this one: each packs into the part of scratch its share of a full
 * chunk owns (static, so no other thread reads it; a piece, about a CUVIL_CHUNKS_PER_THREAD-th of a
 * thread's share, always fits). Fewer panels: the threads pack together and split the output channels.
 * Uses the caller's pc, pchunk, p0, P, K, Mg, g, wg, yg, bias, scratch, act, tid, nt. */
#define CONV_CHUNK(PACK) { \
    int lo, hi, own, own_end; \
    if (nt == 1 || (pc + 7) / 8 >= 2 * nt) { \
      cuvil_split(pchunk, 8, tid, nt, &own, &own_end); \
      float* bp = scratch + (size_t)own * K; \
      for (CuvilChunks d = cuvil_chunks(pc, 8, tid, nt); cuvil_chunk(&d, &lo, &hi);) { \
        PACK; \
        f32_gemm_pa(Mg, hi - lo, K, wg, bp, K * 8, 8, yg + p0 + lo, P, bias ? bias + g * Mg : 0, 0, act); \
      } \
    } else { \
      cuvil_split(pc, 8, tid, nt, &lo, &hi); \
      float* bp = scratch + (size_t)lo * K; \
      cuvil_barrier();  /* the last chunk's panels may be another thread's part of the one before */ \
      if (lo < hi) PACK; \
      cuvil_barrier(); \
      cuvil_split(Mg, 4, tid, nt, &lo, &hi); \
      if (lo < hi) \
        f32_gemm_pa(hi - lo, pc, K, wg + (size_t)lo * K, scratch, K * 8, 8, yg + (size_t)lo * P + p0, P, \
                    bias ? bias + g * Mg + lo : 0, 0, act); \
      cuvil_barrier(); \
    } \
  }

/* Full convolution: N images, G groups, M output channels (M/G per group); weights per group packed
 * in 4-row panels ([ceil(Mg/4)][K][4], see f32_gemm_pa) at build time. scratch is shared by the threads. */
KERNEL void f32_conv2d(const float* x, int N, int C, int H, int W, const float* w, const float* bias,
                       float* y, int M, int OH, int OW, int G, int kh, int kw, int sh, int sw, int dh,
                       int dw, int pt, int pl, int pchunk, float* scratch, Act act, int tid, int nt) {
  const int Cg = C / G, Mg = M / G, K = Cg * kh * kw, P = OH * OW;
  for (int n = 0; n < N; n++) {
    for (int g = 0; g < G; g++) {
      const float* xg = x + ((size_t)n * C + (size_t)g * Cg) * H * W;
      const float* wg = w + (size_t)g * ((Mg + 3) & ~3) * K;
      float* yg = y + ((size_t)n * M + (size_t)g * Mg) * P;
      for (int p0 = 0; p0 < P; p0 += pchunk) {
        const int pc = P - p0 < pchunk ? P - p0 : pchunk;
        CONV_CHUNK(f32_im2col_packed(xg, Cg, H, W, kh, kw, sh, sw, dh, dw, pt, pl, OW, p0 + lo, hi - lo, bp))
      }
    }
  }
}

/* Direct convolution, width stride 1: the B operand of the packed-A GEMM is read straight from the
 * input, 8 consecutive output pixels of one row per panel, tap k at offset koff[k] from the panel's
 * first input pixel. Padding is materialised once per group as a zero-bordered copy of the input
 * (C x H x W floats, against C*kh*kw per output pixel for im2col), so every panel, borders included,
 * runs the same loop; an unpadded input is read in place. The loop mirrors f32_gemm_loop_4x8 (own
 * noinline function, accumulators handed over through memory) with one offset load per k step.
 * A last panel narrower than 8 reads a few floats past its row (lanes never stored). */
static __attribute__((noinline)) void f32_conv_loop_4x8(int K, const float* ap, const float* xb, const int* koff,
                                                        v128_t* acc) {
  v128_t c00 = wasm_f32x4_const_splat(0.0f), c01 = c00;
  v128_t c10 = wasm_f32x4_const_splat(0.0f), c11 = c10;
  v128_t c20 = wasm_f32x4_const_splat(0.0f), c21 = c20;
  v128_t c30 = wasm_f32x4_const_splat(0.0f), c31 = c30;
  const float* aend = ap + (size_t)4 * K;
  while (ap < aend) {
    const float* b = xb + *koff++;
    const v128_t b0 = VLOAD(b), b1 = VLOAD(b + 4);
    const v128_t a = VLOAD(ap);
    ap += 4;
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

/* Copy one group's C planes [H][W] into zero-bordered planes [Hp][Wp] (pt rows above, pl columns left);
 * the caller zeroes the 8 floats after the last plane that the last narrow panel may read. */
KERNEL void f32_pad_planes(const float* x, int C, int H, int W, int pt, int pl, int Hp, int Wp, float* xp) {
  for (int c = 0; c < C; c++) {
    const float* xc = x + (size_t)c * H * W;
    float* pc = xp + (size_t)c * Hp * Wp;
    fill_f32(pc, 0.0f, pt * Wp);
    for (int iy = 0; iy < H; iy++) {
      float* row = pc + (size_t)(pt + iy) * Wp;
      fill_f32(row, 0.0f, pl);
      copy_f32(row + pl, xc + (size_t)iy * W, W);
      fill_f32(row + pl + W, 0.0f, Wp - pl - W);
    }
    fill_f32(pc + (size_t)(pt + H) * Wp, 0.0f, (Hp - pt - H) * Wp);
  }
}

/* Full direct convolution (width stride 1): N images, G groups; weights packed as for f32_conv2d.
 * Hp x Wp: the padded plane (H x W when unpadded: read in place). scratch: K tap offsets, then the
 * padded copy of one group's input. */
KERNEL void f32_conv2d_direct(const float* x, int N, int C, int H, int W, const float* w, const float* bias,
                              float* y, int M, int OH, int OW, int G, int kh, int kw, int sh, int dh, int dw,
                              int pt, int pl, int Hp, int Wp, float* scratch, Act act, int tid, int nt) {
  const int Cg = C / G, Mg = M / G, K = Cg * kh * kw, P = OH * OW;
  const v128_t zero = wasm_f32x4_const_splat(0.0f);
  const int padded = Hp != H || Wp != W;
  int* koff = (int*)scratch;  /* shared: thread 0 writes it, the others read it after a barrier */
  float* xp = scratch + ((K + 3) & ~3);
  int c0, c1, oy0, oy1;  /* the padded copy: a static split of the channels; the rows: claimed */
  cuvil_split(Cg, 1, tid, nt, &c0, &c1);
  if (tid == 0) {
    for (int c = 0, k = 0; c < Cg; c++)
      for (int ky = 0; ky < kh; ky++)
        for (int kx = 0; kx < kw; kx++, k++) koff[k] = (c * Hp + ky * dh) * Wp + kx * dw;
    if (padded) fill_f32(xp + (size_t)Cg * Hp * Wp, 0.0f, 8);
  }
  cuvil_barrier();
  for (int n = 0; n < N; n++) {
    for (int g = 0; g < G; g++) {
      const float* xg = x + ((size_t)n * C + (size_t)g * Cg) * H * W;
      const float* wg = w + (size_t)g * ((Mg + 3) & ~3) * K;
      float* yg = y + ((size_t)n * M + (size_t)g * Mg) * P;
      const float* src = xg;
      if (padded) {
        if (n + g) cuvil_barrier();  /* everyone is done reading the previous group's copy */
        f32_pad_planes(xg + (size_t)c0 * H * W, c1 - c0, H, W, pt, pl, Hp, Wp, xp + (size_t)c0 * Hp * Wp);
        cuvil_barrier();
        src = xp;
      }
      for (CuvilChunks d = cuvil_chunks(OH, 1, tid, nt); cuvil_chunk(&d, &oy0, &oy1);)
      for (int oy = oy0; oy < oy1; oy++) {
        for (int ox = 0; ox < OW; ox += 8) {
          const float* xb = src + (size_t)oy * sh * Wp + ox;
          const int nr = OW - ox < 8 ? OW - ox : 8;
          float* yb = yg + (size_t)oy * OW + ox;
          for (int i = 0; i < Mg; i += 4) {
            v128_t acc[8];
            f32_conv_loop_4x8(K, wg + (size_t)i * K, xb, koff, acc);
            f32_gemm_tile_4x8(acc, yb + (size_t)i * P, P, Mg - i < 4 ? Mg - i : 4, nr,
                              bias ? bias + g * Mg + i : 0, zero, zero, act);
          }
        }
      }
    }
  }
}

/* Winograd F(2x2, 3x3) for 3x3 stride-1 undilated convolutions (group 1): a 2x2 block of output pixels
 * (a tile) costs 16 multiplies per input/output channel pair instead of 36, so the GEMM that dominates
 * these layers does 2.25x less work. Per chunk of whole tile rows: the input transform V = B^T d B of
 * each 4x4 input patch is written straight into 16 GEMM B operands (one per transform position
 * xi = 4i + j, [C] x [tiles] in 8-column panels); 16 packed-A GEMMs with the weights transformed at
 * build time (U = G g G^T, packed per xi like conv weights) give M_xi = U_xi . V_xi; the output
 * transform A^T M A adds the bias, applies the activation and stores each tile's 2x2 pixels. Tiles go
 * in quads along a tile row (10 input columns in, 8 output columns out), so both transforms are
 * vector ops across 4 tiles with no gathers. */

/* Rows iy0 .. iy0 + nr - 1 of one channel plane into zero-bordered rows of wr floats (pl zeros on the
 * left; rows outside the plane all zeros): the Winograd input transforms then read every patch, padding
 * and the odd last row or column included, with no branches. */
INLINE void f32_bordered_rows(const float* xc, int H, int W, int iy0, int nr, int pl, int wr, float* rows) {
  for (int r = 0; r < nr; r++) {
    const int iy = iy0 + r;
    float* row = rows + r * wr;
    if (iy < 0 || iy >= H) {
      fill_f32(row, 0.0f, wr);
      continue;
    }
    fill_f32(row, 0.0f, pl);
    copy_f32(row + pl, xc + (size_t)iy * W, W);
    fill_f32(row + pl + W, 0.0f, wr - pl - W);
  }
}

/* Input transform of tile rows [ty0, ty1): tile t of the chunk (twp tiles per tile row, a multiple of
 * 4) lands in panel t/8, lane t%8 of operand xi at bp + xi * bstride. The 4 input rows of a tile row
 * are first copied per channel into zero-bordered rows of wr floats (padding and the odd last row or
 * column cost no branches in the transform). */
KERNEL void f32_winograd_input(const float* x, int C, int c0, int c1, int H, int W, int pt, int pl, int ty0,
                               int ty1, int twp, int wr, float* rows, float* bp, int bstride) {
  for (int ty = ty0; ty < ty1; ty++) {
    for (int c = c0; c < c1; c++) {
      f32_bordered_rows(x + (size_t)c * H * W, H, W, 2 * ty - pt, 4, pl, wr, rows);
      for (int q = 0; q < twp; q += 4) {
        const int t = (ty - ty0) * twp + q;
        float* dst = bp + (size_t)(t / 8) * C * 8 + (size_t)c * 8 + t % 8;
        /* row 0: columns 2t..2t+3 of the 4 tiles, then B^T across them */
        const float* s0 = rows + 0 * wr + 2 * q;
        const v128_t e0 = wasm_i32x4_shuffle(VLOAD(s0), VLOAD(s0 + 4), 0, 2, 4, 6);
        const v128_t o0 = wasm_i32x4_shuffle(VLOAD(s0), VLOAD(s0 + 4), 1, 3, 5, 7);
        const v128_t f0 = wasm_i32x4_shuffle(e0, VLOAD(s0 + 8), 1, 2, 3, 4);
        const v128_t g0 = wasm_i32x4_shuffle(o0, VLOAD(s0 + 8), 1, 2, 3, 5);
        const v128_t d00 = wasm_f32x4_sub(e0, f0), d01 = wasm_f32x4_add(o0, f0);
        const v128_t d02 = wasm_f32x4_sub(f0, o0), d03 = wasm_f32x4_sub(o0, g0);
        /* row 1: columns 2t..2t+3 of the 4 tiles, then B^T across them */
        const float* s1 = rows + 1 * wr + 2 * q;
        const v128_t e1 = wasm_i32x4_shuffle(VLOAD(s1), VLOAD(s1 + 4), 0, 2, 4, 6);
        const v128_t o1 = wasm_i32x4_shuffle(VLOAD(s1), VLOAD(s1 + 4), 1, 3, 5, 7);
        const v128_t f1 = wasm_i32x4_shuffle(e1, VLOAD(s1 + 8), 1, 2, 3, 4);
        const v128_t g1 = wasm_i32x4_shuffle(o1, VLOAD(s1 + 8), 1, 2, 3, 5);
        const v128_t d10 = wasm_f32x4_sub(e1, f1), d11 = wasm_f32x4_add(o1, f1);
        const v128_t d12 = wasm_f32x4_sub(f1, o1), d13 = wasm_f32x4_sub(o1, g1);
        /* row 2: columns 2t..2t+3 of the 4 tiles, then B^T across them */
        const float* s2 = rows + 2 * wr + 2 * q;
        const v128_t e2 = wasm_i32x4_shuffle(VLOAD(s2), VLOAD(s2 + 4), 0, 2, 4, 6);
        const v128_t o2 = wasm_i32x4_shuffle(VLOAD(s2), VLOAD(s2 + 4), 1, 3, 5, 7);
        const v128_t f2 = wasm_i32x4_shuffle(e2, VLOAD(s2 + 8), 1, 2, 3, 4);
        const v128_t g2 = wasm_i32x4_shuffle(o2, VLOAD(s2 + 8), 1, 2, 3, 5);
        const v128_t d20 = wasm_f32x4_sub(e2, f2), d21 = wasm_f32x4_add(o2, f2);
        const v128_t d22 = wasm_f32x4_sub(f2, o2), d23 = wasm_f32x4_sub(o2, g2);
        /* row 3: columns 2t..2t+3 of the 4 tiles, then B^T across them */
        const float* s3 = rows + 3 * wr + 2 * q;
        const v128_t e3 = wasm_i32x4_shuffle(VLOAD(s3), VLOAD(s3 + 4), 0, 2, 4, 6);
        const v128_t o3 = wasm_i32x4_shuffle(VLOAD(s3), VLOAD(s3 + 4), 1, 3, 5, 7);
        const v128_t f3 = wasm_i32x4_shuffle(e3, VLOAD(s3 + 8), 1, 2, 3, 4);
        const v128_t g3 = wasm_i32x4_shuffle(o3, VLOAD(s3 + 8), 1, 2, 3, 5);
        const v128_t d30 = wasm_f32x4_sub(e3, f3), d31 = wasm_f32x4_add(o3, f3);
        const v128_t d32 = wasm_f32x4_sub(f3, o3), d33 = wasm_f32x4_sub(o3, g3);
        VSTORE(dst + 0 * (size_t)bstride, wasm_f32x4_sub(d00, d20));
        VSTORE(dst + 4 * (size_t)bstride, wasm_f32x4_add(d10, d20));
        VSTORE(dst + 8 * (size_t)bstride, wasm_f32x4_sub(d20, d10));
        VSTORE(dst + 12 * (size_t)bstride, wasm_f32x4_sub(d10, d30));
        VSTORE(dst + 1 * (size_t)bstride, wasm_f32x4_sub(d01, d21));
        VSTORE(dst + 5 * (size_t)bstride, wasm_f32x4_add(d11, d21));
        VSTORE(dst + 9 * (size_t)bstride, wasm_f32x4_sub(d21, d11));
        VSTORE(dst + 13 * (size_t)bstride, wasm_f32x4_sub(d11, d31));
        VSTORE(dst + 2 * (size_t)bstride, wasm_f32x4_sub(d02, d22));
        VSTORE(dst + 6 * (size_t)bstride, wasm_f32x4_add(d12, d22));
        VSTORE(dst + 10 * (size_t)bstride, wasm_f32x4_sub(d22, d12));
        VSTORE(dst + 14 * (size_t)bstride, wasm_f32x4_sub(d12, d32));
        VSTORE(dst + 3 * (size_t)bstride, wasm_f32x4_sub(d03, d23));
        VSTORE(dst + 7 * (size_t)bstride, wasm_f32x4_add(d13, d23));
        VSTORE(dst + 11 * (size_t)bstride, wasm_f32x4_sub(d23, d13));
        VSTORE(dst + 15 * (size_t)bstride, wasm_f32x4_sub(d13, d33));
      }
    }
  }
}

/* Store lanes of an 8-column output run (lo, hi) that fall before column n. */
INLINE void store_cols8(float* dst, v128_t lo, v128_t hi, int n) {
  if (n >= 8) {
    VSTORE(dst, lo); VSTORE(dst + 4, hi);
  } else if (n > 4) {
    VSTORE(dst, lo); store_partial(dst + 4, hi, n - 4);
  } else if (n == 4) {
    VSTORE(dst, lo);
  } else if (n > 0) {
    store_partial(dst, lo, n);
  }
}

/* Store a quad of 2x2-output tiles at output row oy, column ox: yRC holds output row oy + R, column
 * ox + 2t + C of tile t; interleaved back into pixel order, rows and columns past the output dropped. */
INLINE void store_tile_quad(float* ym, int oy, int OH, int OW, int ox, v128_t y00, v128_t y01, v128_t y10,
                            v128_t y11) {
  store_cols8(ym + (size_t)oy * OW + ox, wasm_i32x4_shuffle(y00, y01, 0, 4, 1, 5),
              wasm_i32x4_shuffle(y00, y01, 2, 6, 3, 7), OW - ox);
  if (oy + 1 < OH)
    store_cols8(ym + (size_t)(oy + 1) * OW + ox, wasm_i32x4_shuffle(y10, y11, 0, 4, 1, 5),
                wasm_i32x4_shuffle(y10, y11, 2, 6, 3, 7), OW - ox);
}

/* Output transform of tile rows [ty0, ty1): operand xi's products are mo + xi * M * n ([M][n]); each
 * quad of tiles gives 8 columns of two output rows, interleaved back into pixel order. Tiles past the
 * output's last row or column are computed but not stored. */
KERNEL void f32_winograd_output(const float* mo, int M, int m0, int m1, int n, const float* bias, float* y,
                                int OH, int OW, int ty0, int ty1, int twp, Act act) {
  const size_t xs = (size_t)M * n;
  for (int m = m0; m < m1; m++) {
    const v128_t b = bias ? VSPLAT(bias[m]) : wasm_f32x4_const_splat(0.0f);
    float* ym = y + (size_t)m * OH * OW;
    for (int ty = ty0; ty < ty1; ty++) {
      const int oy = 2 * ty;
      for (int q = 0; q < twp; q += 4) {
        const float* s = mo + (size_t)m * n + (ty - ty0) * twp + q;
        const v128_t u0 = wasm_f32x4_add(wasm_f32x4_add(VLOAD(s + 0 * xs), VLOAD(s + 4 * xs)),
                                        VLOAD(s + 8 * xs));
        const v128_t v0 = wasm_f32x4_sub(wasm_f32x4_sub(VLOAD(s + 4 * xs), VLOAD(s + 8 * xs)),
                                        VLOAD(s + 12 * xs));
        const v128_t u1 = wasm_f32x4_add(wasm_f32x4_add(VLOAD(s + 1 * xs), VLOAD(s + 5 * xs)),
                                        VLOAD(s + 9 * xs));
        const v128_t v1 = wasm_f32x4_sub(wasm_f32x4_sub(VLOAD(s + 5 * xs), VLOAD(s + 9 * xs)),
                                        VLOAD(s + 13 * xs));
        const v128_t u2 = wasm_f32x4_add(wasm_f32x4_add(VLOAD(s + 2 * xs), VLOAD(s + 6 * xs)),
                                        VLOAD(s + 10 * xs));
        const v128_t v2 = wasm_f32x4_sub(wasm_f32x4_sub(VLOAD(s + 6 * xs), VLOAD(s + 10 * xs)),
                                        VLOAD(s + 14 * xs));
        const v128_t u3 = wasm_f32x4_add(wasm_f32x4_add(VLOAD(s + 3 * xs), VLOAD(s + 7 * xs)),
                                        VLOAD(s + 11 * xs));
        const v128_t v3 = wasm_f32x4_sub(wasm_f32x4_sub(VLOAD(s + 7 * xs), VLOAD(s + 11 * xs)),
                                        VLOAD(s + 15 * xs));
        const v128_t y00 = act_apply(wasm_f32x4_add(wasm_f32x4_add(wasm_f32x4_add(u0, u1), u2), b), act);
        const v128_t y01 = act_apply(wasm_f32x4_add(wasm_f32x4_sub(wasm_f32x4_sub(u1, u2), u3), b), act);
        const v128_t y10 = act_apply(wasm_f32x4_add(wasm_f32x4_add(wasm_f32x4_add(v0, v1), v2), b), act);
        const v128_t y11 = act_apply(wasm_f32x4_add(wasm_f32x4_sub(wasm_f32x4_sub(v1, v2), v3), b), act);
        store_tile_quad(ym, oy, OH, OW, 2 * q, y00, y01, y10, y11);
      }
    }
  }
}

/* The npos GEMMs of a Winograd chunk, mo + xi * M * n = U_xi . B_xi for position xi (n tiles): U_xi at
 * slot[xi] (xi when slot is null) of u's ceil(M/4) * 4 * C-float slots with K = nph[xi] * C (C when null),
 * B_xi at the same slot of bp's C x n-rounded-to-a-panel ones. The threads claim pieces (a position's
 * columns or rows, as f32_gemm_pa_part splits them) from one counter: about CUVIL_CHUNKS_PER_THREAD a
 * thread over all positions. */
INLINE void f32_winograd_gemms(int npos, const int* slot, const int* nph, int M, int n, int C, const float* u,
                               const float* bp, float* mo, int tid, int nt) {
  const size_t usize = (size_t)((M + 3) & ~3) * C, bslot = (size_t)C * ((n + 7) & ~7);
  const Act none = {ACT_NONE, 0.0f, 0.0f};
  const int by_cols = f32_gemm_pa_by_cols(M, n, C, nt), len = by_cols ? n : M, unit = by_cols ? 8 : 4;
  const int units = (len + unit - 1) / unit, want = (CUVIL_CHUNKS_PER_THREAD * nt + npos - 1) / npos;
  if (units == 0) return;
  const int step = (units + (want < units ? want : units) - 1) / (want < units ? want : units) * unit;
  const int per = (len + step - 1) / step;  /* pieces of one position */
  CuvilChunks d = cuvil_chunks_of(npos * per, 1, tid, nt);
  for (int it, it1; cuvil_chunk(&d, &it, &it1);) {
    const int xi = it / per, lo = it % per * step, hi = lo + step < len ? lo + step : len;
    const int sl = slot ? slot[xi] : xi, k = nph ? nph[xi] * C : C;
    f32_gemm_pa_range(by_cols, lo, hi, M, n, k, u + sl * usize, bp + sl * bslot, k * 8, 8, mo + (size_t)xi * M * n,
                      n, 0, 0, none);
  }
}

/* Full Winograd convolution: N images, weights u as [16][ceil(M/4)][C][4] (see above), chunks of rpc
 * tile rows. scratch: the 16 B operands (C x n rounded up to a panel each), the 16 products (M x n
 * each), 4 bordered input rows of 2 * twp + 4 floats. A last half panel (n % 8 == 4) carries 4 lanes
 * the GEMM computes and never stores. */
KERNEL void f32_conv2d_winograd(const float* x, int N, int C, int H, int W, const float* u, const float* bias,
                                float* y, int M, int OH, int OW, int pt, int pl, int twp, int rpc,
                                float* scratch, Act act, int tid, int nt) {
  const int th = (OH + 1) / 2, nmax = rpc * twp, wr = 2 * twp + 4;
  float* bp = scratch;
  float* mo = bp + (size_t)16 * C * ((nmax + 7) & ~7);
  float* rows = tid ? (float*)__builtin_alloca(sizeof(float) * 4 * wr) : mo + (size_t)16 * M * nmax;
  int c0, c1, m0, m1;  /* the threads claim channels of the transforms (cuvil_chunks) */
  for (int img = 0; img < N; img++) {
    const float* xn = x + (size_t)img * C * H * W;
    float* yn = y + (size_t)img * M * OH * OW;
    for (int ty0 = 0; ty0 < th; ty0 += rpc) {
      const int ty1 = ty0 + rpc < th ? ty0 + rpc : th, n = (ty1 - ty0) * twp;
      const int bstride = C * ((n + 7) & ~7);
      for (CuvilChunks d = cuvil_chunks(C, 1, tid, nt); cuvil_chunk(&d, &c0, &c1);)
        f32_winograd_input(xn, C, c0, c1, H, W, pt, pl, ty0, ty1, twp, wr, rows, bp, bstride);
      cuvil_barrier();
      f32_winograd_gemms(16, 0, 0, M, n, C, u, bp, mo, tid, nt);
      cuvil_barrier();
      for (CuvilChunks d = cuvil_chunks(M, 1, tid, nt); cuvil_chunk(&d, &m0, &m1);)
        f32_winograd_output(mo, M, m0, m1, n, bias, yn, OH, OW, ty0, ty1, twp, act);
    }
  }
}

/* Winograd F(4x4, 3x3) for the same convolutions: a 4x4 block of output pixels costs 36 multiplies per
 * channel pair instead of 144 (4x fewer; F(2x2, 3x3): 2.25x), over 6x6 input patches 4 apart, so 36 GEMMs
 * per chunk. Lavin & Gray's matrices for the points 0, +-1, +-2 and infinity, scaled so that every
 * fraction (1/4, 1/6, 1/12, 1/24) lies in G, whose product U = G g G^T is computed in float64 at build
 * time: the input (B^T) and output (A^T) transforms multiply only by 2, 4 and 8, exact in float32, so a
 * fused or unfused multiply-add gives the same bits and the simd128 module stays bit-identical on every
 * host. Layout and threading as f32_conv2d_winograd: quads of tiles along a tile row are vectors (18
 * input columns in, 16 output columns out), position xi = 6i + j. */

/* In place: the 4x4 transpose (lane t of v[k] becomes lane k of v[t]). */
INLINE void f32_transpose4(v128_t* v) {
  const v128_t lo01 = wasm_i32x4_shuffle(v[0], v[1], 0, 4, 1, 5), lo23 = wasm_i32x4_shuffle(v[2], v[3], 0, 4, 1, 5);
  const v128_t hi01 = wasm_i32x4_shuffle(v[0], v[1], 2, 6, 3, 7), hi23 = wasm_i32x4_shuffle(v[2], v[3], 2, 6, 3, 7);
  v[0] = wasm_i32x4_shuffle(lo01, lo23, 0, 1, 4, 5); v[1] = wasm_i32x4_shuffle(lo01, lo23, 2, 3, 6, 7);
  v[2] = wasm_i32x4_shuffle(hi01, hi23, 0, 1, 4, 5); v[3] = wasm_i32x4_shuffle(hi01, hi23, 2, 3, 6, 7);
}

/* Along a bordered row from 4 tiles' first column (4 input columns apart): each tile's columns 0..5 as
 * vectors across the tiles, c[k] = (s[k], s[4 + k], s[8 + k], s[12 + k]) (a 4x4 transpose, one more load). */
INLINE void f32_quad_columns(const float* s, v128_t* c) {
  c[0] = VLOAD(s); c[1] = VLOAD(s + 4); c[2] = VLOAD(s + 8); c[3] = VLOAD(s + 12);
  f32_transpose4(c);
  const v128_t tail = VLOAD(s + 16);
  c[4] = wasm_i32x4_shuffle(c[0], tail, 1, 2, 3, 4);
  c[5] = wasm_i32x4_shuffle(c[1], tail, 1, 2, 3, 5);
}

/* B^T of F(4x4, 3x3) on d[0], d[ds], .., d[5 ds] into w[0], w[ws], .., w[5 ws]:
 * rows (4 0 -5 0 1 0), (0 -4 -4 1 1 0), (0 4 -4 -1 1 0), (0 -2 -1 2 1 0), (0 2 -1 -2 1 0), (0 4 0 -5 0 1). */
INLINE void f32_winograd4_bt(const v128_t* d, int ds, v128_t* w, int ws) {
  const v128_t d0 = d[0], d1 = d[ds], d2 = d[2 * ds], d3 = d[3 * ds], d4 = d[4 * ds], d5 = d[5 * ds];
  const v128_t t0 = VFMA(d2, VSPLAT(-4.0f), d4), t1 = VFMA(d1, VSPLAT(-4.0f), d3);
  const v128_t t2 = wasm_f32x4_sub(d4, d2), t3 = wasm_f32x4_sub(d3, d1);
  w[0] = VFMA(wasm_f32x4_sub(d0, d2), VSPLAT(4.0f), t2);
  w[ws] = wasm_f32x4_add(t0, t1);
  w[2 * ws] = wasm_f32x4_sub(t0, t1);
  w[3 * ws] = VFMA(t3, VSPLAT(2.0f), t2);
  w[4 * ws] = VFMA(t3, VSPLAT(-2.0f), t2);
  w[5 * ws] = VFMA(wasm_f32x4_sub(d1, d3), VSPLAT(4.0f), wasm_f32x4_sub(d5, d3));
}

/* A^T of F(4x4, 3x3) on m[0], m[ms], .., m[5 ms] into y[0], y[ys], .., y[3 ys]:
 * rows (1 1 1 1 1 0), (0 1 -1 2 -2 0), (0 1 1 4 4 0), (0 1 -1 8 -8 1). */
INLINE void f32_winograd4_at(const v128_t* m, int ms, v128_t* y, int ys) {
  const v128_t a = wasm_f32x4_add(m[ms], m[2 * ms]), b = wasm_f32x4_sub(m[ms], m[2 * ms]);
  const v128_t c = wasm_f32x4_add(m[3 * ms], m[4 * ms]), d = wasm_f32x4_sub(m[3 * ms], m[4 * ms]);
  y[0] = wasm_f32x4_add(wasm_f32x4_add(m[0], a), c);
  y[ys] = VFMA(d, VSPLAT(2.0f), b);
  y[2 * ys] = VFMA(c, VSPLAT(4.0f), a);
  y[3 * ys] = wasm_f32x4_add(VFMA(d, VSPLAT(8.0f), b), m[5 * ms]);
}

/* Input transform of tile rows [ty0, ty1), laid out as f32_winograd_input's (36 operands): the 6 input
 * rows of a tile row (4 apart per tile row) are copied per channel into zero-bordered rows of wr floats,
 * then B^T along each row and along each column of every quad's 6x6 patches. */
KERNEL void f32_winograd4_input(const float* x, int C, int c0, int c1, int H, int W, int pt, int pl, int ty0,
                                int ty1, int twp, int wr, float* rows, float* bp, int bstride) {
  for (int ty = ty0; ty < ty1; ty++) {
    for (int c = c0; c < c1; c++) {
      f32_bordered_rows(x + (size_t)c * H * W, H, W, 4 * ty - pt, 6, pl, wr, rows);
      for (int q = 0; q < twp; q += 4) {
        const int t = (ty - ty0) * twp + q;
        float* dst = bp + (size_t)(t / 8) * C * 8 + (size_t)c * 8 + t % 8;
        v128_t h[6][6], v[6];
        {
          v128_t d[6];
          f32_quad_columns(rows + 0 * wr + 4 * q, d);
          f32_winograd4_bt(d, 1, h[0], 1);
        }
        {
          v128_t d[6];
          f32_quad_columns(rows + 1 * wr + 4 * q, d);
          f32_winograd4_bt(d, 1, h[1], 1);
        }
        {
          v128_t d[6];
          f32_quad_columns(rows + 2 * wr + 4 * q, d);
          f32_winograd4_bt(d, 1, h[2], 1);
        }
        {
          v128_t d[6];
          f32_quad_columns(rows + 3 * wr + 4 * q, d);
          f32_winograd4_bt(d, 1, h[3], 1);
        }
        {
          v128_t d[6];
          f32_quad_columns(rows + 4 * wr + 4 * q, d);
          f32_winograd4_bt(d, 1, h[4], 1);
        }
        {
          v128_t d[6];
          f32_quad_columns(rows + 5 * wr + 4 * q, d);
          f32_winograd4_bt(d, 1, h[5], 1);
        }
        f32_winograd4_bt(&h[0][0], 6, v, 1);
        VSTORE(dst + 0 * (size_t)bstride, v[0]);
        VSTORE(dst + 6 * (size_t)bstride, v[1]);
        VSTORE(dst + 12 * (size_t)bstride, v[2]);
        VSTORE(dst + 18 * (size_t)bstride, v[3]);
        VSTORE(dst + 24 * (size_t)bstride, v[4]);
        VSTORE(dst + 30 * (size_t)bstride, v[5]);
        f32_winograd4_bt(&h[0][1], 6, v, 1);
        VSTORE(dst + 1 * (size_t)bstride, v[0]);
        VSTORE(dst + 7 * (size_t)bstride, v[1]);
        VSTORE(dst + 13 * (size_t)bstride, v[2]);
        VSTORE(dst + 19 * (size_t)bstride, v[3]);
        VSTORE(dst + 25 * (size_t)bstride, v[4]);
        VSTORE(dst + 31 * (size_t)bstride, v[5]);
        f32_winograd4_bt(&h[0][2], 6, v, 1);
        VSTORE(dst + 2 * (size_t)bstride, v[0]);
        VSTORE(dst + 8 * (size_t)bstride, v[1]);
        VSTORE(dst + 14 * (size_t)bstride, v[2]);
        VSTORE(dst + 20 * (size_t)bstride, v[3]);
        VSTORE(dst + 26 * (size_t)bstride, v[4]);
        VSTORE(dst + 32 * (size_t)bstride, v[5]);
        f32_winograd4_bt(&h[0][3], 6, v, 1);
        VSTORE(dst + 3 * (size_t)bstride, v[0]);
        VSTORE(dst + 9 * (size_t)bstride, v[1]);
        VSTORE(dst + 15 * (size_t)bstride, v[2]);
        VSTORE(dst + 21 * (size_t)bstride, v[3]);
        VSTORE(dst + 27 * (size_t)bstride, v[4]);
        VSTORE(dst + 33 * (size_t)bstride, v[5]);
        f32_winograd4_bt(&h[0][4], 6, v, 1);
        VSTORE(dst + 4 * (size_t)bstride, v[0]);
        VSTORE(dst + 10 * (size_t)bstride, v[1]);
        VSTORE(dst + 16 * (size_t)bstride, v[2]);
        VSTORE(dst + 22 * (size_t)bstride, v[3]);
        VSTORE(dst + 28 * (size_t)bstride, v[4]);
        VSTORE(dst + 34 * (size_t)bstride, v[5]);
        f32_winograd4_bt(&h[0][5], 6, v, 1);
        VSTORE(dst + 5 * (size_t)bstride, v[0]);
        VSTORE(dst + 11 * (size_t)bstride, v[1]);
        VSTORE(dst + 17 * (size_t)bstride, v[2]);
        VSTORE(dst + 23 * (size_t)bstride, v[3]);
        VSTORE(dst + 29 * (size_t)bstride, v[4]);
        VSTORE(dst + 35 * (size_t)bstride, v[5]);
      }
    }
  }
}

/* Output transform of tile rows [ty0, ty1): operand xi's products at mo + xi * M * n ([M][n]); A^T along
 * the patch's columns, then its rows, bias and activation, and each output row's 4 tiles transposed back
 * into pixel order (16 columns); rows and columns past the output dropped. */
KERNEL void f32_winograd4_output(const float* mo, int M, int m0, int m1, int n, const float* bias, float* y,
                                 int OH, int OW, int ty0, int ty1, int twp, Act act) {
  const size_t xs = (size_t)M * n;
  for (int m = m0; m < m1; m++) {
    const v128_t b = bias ? VSPLAT(bias[m]) : wasm_f32x4_const_splat(0.0f);
    float* ym = y + (size_t)m * OH * OW;
    for (int ty = ty0; ty < ty1; ty++) {
      for (int q = 0; q < twp; q += 4) {
        const float* s = mo + (size_t)m * n + (ty - ty0) * twp + q;
        v128_t u[4][6];
        {
          v128_t col[6];
          col[0] = VLOAD(s + 0 * xs);
          col[1] = VLOAD(s + 6 * xs);
          col[2] = VLOAD(s + 12 * xs);
          col[3] = VLOAD(s + 18 * xs);
          col[4] = VLOAD(s + 24 * xs);
          col[5] = VLOAD(s + 30 * xs);
          f32_winograd4_at(col, 1, &u[0][0], 6);
        }
        {
          v128_t col[6];
          col[0] = VLOAD(s + 1 * xs);
          col[1] = VLOAD(s + 7 * xs);
          col[2] = VLOAD(s + 13 * xs);
          col[3] = VLOAD(s + 19 * xs);
          col[4] = VLOAD(s + 25 * xs);
          col[5] = VLOAD(s + 31 * xs);
          f32_winograd4_at(col, 1, &u[0][1], 6);
        }
        {
          v128_t col[6];
          col[0] = VLOAD(s + 2 * xs);
          col[1] = VLOAD(s + 8 * xs);
          col[2] = VLOAD(s + 14 * xs);
          col[3] = VLOAD(s + 20 * xs);
          col[4] = VLOAD(s + 26 * xs);
          col[5] = VLOAD(s + 32 * xs);
          f32_winograd4_at(col, 1, &u[0][2], 6);
        }
        {
          v128_t col[6];
          col[0] = VLOAD(s + 3 * xs);
          col[1] = VLOAD(s + 9 * xs);
          col[2] = VLOAD(s + 15 * xs);
          col[3] = VLOAD(s + 21 * xs);
          col[4] = VLOAD(s + 27 * xs);
          col[5] = VLOAD(s + 33 * xs);
          f32_winograd4_at(col, 1, &u[0][3], 6);
        }
        {
          v128_t col[6];
          col[0] = VLOAD(s + 4 * xs);
          col[1] = VLOAD(s + 10 * xs);
          col[2] = VLOAD(s + 16 * xs);
          col[3] = VLOAD(s + 22 * xs);
          col[4] = VLOAD(s + 28 * xs);
          col[5] = VLOAD(s + 34 * xs);
          f32_winograd4_at(col, 1, &u[0][4], 6);
        }
        {
          v128_t col[6];
          col[0] = VLOAD(s + 5 * xs);
          col[1] = VLOAD(s + 11 * xs);
          col[2] = VLOAD(s + 17 * xs);
          col[3] = VLOAD(s + 23 * xs);
          col[4] = VLOAD(s + 29 * xs);
          col[5] = VLOAD(s + 35 * xs);
          f32_winograd4_at(col, 1, &u[0][5], 6);
        }
        if (4 * ty + 0 < OH) {
          v128_t o[4];
          f32_winograd4_at(u[0], 1, o, 1);
          o[0] = act_apply(wasm_f32x4_add(o[0], b), act);
          o[1] = act_apply(wasm_f32x4_add(o[1], b), act);
          o[2] = act_apply(wasm_f32x4_add(o[2], b), act);
          o[3] = act_apply(wasm_f32x4_add(o[3], b), act);
          f32_transpose4(o);
          float* yr = ym + (size_t)(4 * ty + 0) * OW + 4 * q;
          store_cols8(yr, o[0], o[1], OW - 4 * q);
          store_cols8(yr + 8, o[2], o[3], OW - 4 * q - 8);
        }
        if (4 * ty + 1 < OH) {
          v128_t o[4];
          f32_winograd4_at(u[1], 1, o, 1);
          o[0] = act_apply(wasm_f32x4_add(o[0], b), act);
          o[1] = act_apply(wasm_f32x4_add(o[1], b), act);
          o[2] = act_apply(wasm_f32x4_add(o[2], b), act);
          o[3] = act_apply(wasm_f32x4_add(o[3], b), act);
          f32_transpose4(o);
          float* yr = ym + (size_t)(4 * ty + 1) * OW + 4 * q;
          store_cols8(yr, o[0], o[1], OW - 4 * q);
          store_cols8(yr + 8, o[2], o[3], OW - 4 * q - 8);
        }
        if (4 * ty + 2 < OH) {
          v128_t o[4];
          f32_winograd4_at(u[2], 1, o, 1);
          o[0] = act_apply(wasm_f32x4_add(o[0], b), act);
          o[1] = act_apply(wasm_f32x4_add(o[1], b), act);
          o[2] = act_apply(wasm_f32x4_add(o[2], b), act);
          o[3] = act_apply(wasm_f32x4_add(o[3], b), act);
          f32_transpose4(o);
          float* yr = ym + (size_t)(4 * ty + 2) * OW + 4 * q;
          store_cols8(yr, o[0], o[1], OW - 4 * q);
          store_cols8(yr + 8, o[2], o[3], OW - 4 * q - 8);
        }
        if (4 * ty + 3 < OH) {
          v128_t o[4];
          f32_winograd4_at(u[3], 1, o, 1);
          o[0] = act_apply(wasm_f32x4_add(o[0], b), act);
          o[1] = act_apply(wasm_f32x4_add(o[1], b), act);
          o[2] = act_apply(wasm_f32x4_add(o[2], b), act);
          o[3] = act_apply(wasm_f32x4_add(o[3], b), act);
          f32_transpose4(o);
          float* yr = ym + (size_t)(4 * ty + 3) * OW + 4 * q;
          store_cols8(yr, o[0], o[1], OW - 4 * q);
          store_cols8(yr + 8, o[2], o[3], OW - 4 * q - 8);
        }
      }
    }
  }
}

/* Full F(4x4, 3x3) convolution: N images, weights u as [36][ceil(M/4)][C][4], chunks of rpc tile rows.
 * scratch: the 36 B operands (C x n rounded up to a panel each), the 36 products (M x n each), 6 bordered
 * input rows of 4 * twp + 4 floats. */
KERNEL void f32_conv2d_winograd4(const float* x, int N, int C, int H, int W, const float* u, const float* bias,
                                 float* y, int M, int OH, int OW, int pt, int pl, int twp, int rpc,
                                 float* scratch, Act act, int tid, int nt) {
  const int th = (OH + 3) / 4, nmax = rpc * twp, wr = 4 * twp + 4;
  float* bp = scratch;
  float* mo = bp + (size_t)36 * C * ((nmax + 7) & ~7);
  float* rows = tid ? (float*)__builtin_alloca(sizeof(float) * 6 * wr) : mo + (size_t)36 * M * nmax;
  int c0, c1, m0, m1;  /* the threads claim channels of the transforms (cuvil_chunks) */
  for (int img = 0; img < N; img++) {
    const float* xn = x + (size_t)img * C * H * W;
    float* yn = y + (size_t)img * M * OH * OW;
    for (int ty0 = 0; ty0 < th; ty0 += rpc) {
      const int ty1 = ty0 + rpc < th ? ty0 + rpc : th, n = (ty1 - ty0) * twp;
      const int bstride = C * ((n + 7) & ~7);
      for (CuvilChunks d = cuvil_chunks(C, 1, tid, nt); cuvil_chunk(&d, &c0, &c1);)
        f32_winograd4_input(xn, C, c0, c1, H, W, pt, pl, ty0, ty1, twp, wr, rows, bp, bstride);
      cuvil_barrier();
      f32_winograd_gemms(36, 0, 0, M, n, C, u, bp, mo, tid, nt);
      cuvil_barrier();
      for (CuvilChunks d = cuvil_chunks(M, 1, tid, nt); cuvil_chunk(&d, &m0, &m1);)
        f32_winograd4_output(mo, M, m0, m1, n, bias, yn, OH, OW, ty0, ty1, twp, act);
    }
  }
}

/* Winograd for 3x3 stride-2 undilated convolutions (group 1), over the polyphase components: with
 * E/O the even/odd rows (columns) of the padded input, the conv is the sum of four stride-1 convs, of
 * the even-even plane with the 2x2 taps (0|2, 0|2), even-odd with 2x1, odd-even with 1x2 and odd-odd
 * with 1x1. Each runs as F(2x2, 2x2) (3x3 transform positions, transforms of +-1 sums only); a one-tap
 * axis is the two-tap case with a zero tap, whose position 2 is then zero, so position (i, j) sums over
 * the phases that are even along every axis where i or j is 2: K = 4C, 2C or C, 25C in all against the
 * 36C multiplies of a 2x2 output tile direct: 1.44x fewer. One GEMM per position (the phases stacked
 * along K); tiles go in quads along a tile row as in f32_conv2d_winograd, each quad's 5x5 input patches
 * de-interleaved from 5 rows of 20 floats with a 4x4 transpose. */
/* Phases stacked in position xi's GEMM (its K is nph * C) and the phase slots before it. */
static const int wino_s2_nph[9] = {4, 4, 2, 4, 4, 2, 2, 2, 1};
static const int wino_s2_off[9] = {0, 4, 8, 10, 14, 18, 20, 22, 24};

/* Along a bordered row from 4 tiles' first column (4 input columns apart): each tile's columns 0..4 as
 * vectors across the tiles (a 4x4 transpose of 16 floats, one more load), then B^T of the even columns
 * 0, 2, 4 (h[0..2]) and of the odd columns 1, 3 (h[3..4], the one-tap phase: positions 0 and 1 only). */
INLINE void f32_winograd_s2_row(const float* s, v128_t* h) {
  v128_t c[6];
  f32_quad_columns(s, c);
  h[0] = wasm_f32x4_sub(c[0], c[2]); h[1] = c[2]; h[2] = wasm_f32x4_sub(c[4], c[2]);
  h[3] = wasm_f32x4_sub(c[1], c[3]); h[4] = c[3];
}

/* Input transform of tile rows [ty0, ty1) (tile t of the chunk: panel t/8, lane t%8): position xi's
 * B operand starts at phase slot wino_s2_off[xi] (bo floats per slot: npan panels of C x 8) and holds
 * its nph phases' C rows per panel in PHASES order. The 5 input rows of a tile row (4 apart per tile
 * row) are copied per channel into zero-bordered rows of wr floats. */
KERNEL void f32_winograd_s2_input(const float* x, int C, int c0, int c1, int H, int W, int pt, int pl, int ty0,
                                  int ty1, int twp, int wr, float* rows, float* bp, int npan) {
  const size_t pw = (size_t)8 * C, bo = npan * pw;
  for (int ty = ty0; ty < ty1; ty++) {
    for (int c = c0; c < c1; c++) {
      f32_bordered_rows(x + (size_t)c * H * W, H, W, 4 * ty - pt, 5, pl, wr, rows);
      for (int q = 0; q < twp; q += 4) {
        const int t = (ty - ty0) * twp + q;
        float* dst = bp + (size_t)c * 8 + t % 8;
        const size_t panel = (size_t)(t / 8) * pw;
        v128_t h[5][5];
        f32_winograd_s2_row(rows + 0 * wr + 4 * q, h[0]);
        f32_winograd_s2_row(rows + 1 * wr + 4 * q, h[1]);
        f32_winograd_s2_row(rows + 2 * wr + 4 * q, h[2]);
        f32_winograd_s2_row(rows + 3 * wr + 4 * q, h[3]);
        f32_winograd_s2_row(rows + 4 * wr + 4 * q, h[4]);
        VSTORE(dst + 0 * bo + 4 * panel + 0 * pw, wasm_f32x4_sub(h[0][0], h[2][0]));
        VSTORE(dst + 0 * bo + 4 * panel + 1 * pw, wasm_f32x4_sub(h[0][3], h[2][3]));
        VSTORE(dst + 0 * bo + 4 * panel + 2 * pw, wasm_f32x4_sub(h[1][0], h[3][0]));
        VSTORE(dst + 0 * bo + 4 * panel + 3 * pw, wasm_f32x4_sub(h[1][3], h[3][3]));
        VSTORE(dst + 4 * bo + 4 * panel + 0 * pw, wasm_f32x4_sub(h[0][1], h[2][1]));
        VSTORE(dst + 4 * bo + 4 * panel + 1 * pw, wasm_f32x4_sub(h[0][4], h[2][4]));
        VSTORE(dst + 4 * bo + 4 * panel + 2 * pw, wasm_f32x4_sub(h[1][1], h[3][1]));
        VSTORE(dst + 4 * bo + 4 * panel + 3 * pw, wasm_f32x4_sub(h[1][4], h[3][4]));
        VSTORE(dst + 8 * bo + 2 * panel + 0 * pw, wasm_f32x4_sub(h[0][2], h[2][2]));
        VSTORE(dst + 8 * bo + 2 * panel + 1 * pw, wasm_f32x4_sub(h[1][2], h[3][2]));
        VSTORE(dst + 10 * bo + 4 * panel + 0 * pw, h[2][0]);
        VSTORE(dst + 10 * bo + 4 * panel + 1 * pw, h[2][3]);
        VSTORE(dst + 10 * bo + 4 * panel + 2 * pw, h[3][0]);
        VSTORE(dst + 10 * bo + 4 * panel + 3 * pw, h[3][3]);
        VSTORE(dst + 14 * bo + 4 * panel + 0 * pw, h[2][1]);
        VSTORE(dst + 14 * bo + 4 * panel + 1 * pw, h[2][4]);
        VSTORE(dst + 14 * bo + 4 * panel + 2 * pw, h[3][1]);
        VSTORE(dst + 14 * bo + 4 * panel + 3 * pw, h[3][4]);
        VSTORE(dst + 18 * bo + 2 * panel + 0 * pw, h[2][2]);
        VSTORE(dst + 18 * bo + 2 * panel + 1 * pw, h[3][2]);
        VSTORE(dst + 20 * bo + 2 * panel + 0 * pw, wasm_f32x4_sub(h[4][0], h[2][0]));
        VSTORE(dst + 20 * bo + 2 * panel + 1 * pw, wasm_f32x4_sub(h[4][3], h[2][3]));
        VSTORE(dst + 22 * bo + 2 * panel + 0 * pw, wasm_f32x4_sub(h[4][1], h[2][1]));
        VSTORE(dst + 22 * bo + 2 * panel + 1 * pw, wasm_f32x4_sub(h[4][4], h[2][4]));
        VSTORE(dst + 24 * bo + 1 * panel + 0 * pw, wasm_f32x4_sub(h[4][2], h[2][2]));
      }
    }
  }
}

/* Output transform (A^T = [1 1 0; 0 1 1] per axis) of tile rows [ty0, ty1): position xi's products are
 * mo + xi * M * n ([M][n]); bias and activation fused, tiles past the output dropped. */
KERNEL void f32_winograd_s2_output(const float* mo, int M, int m0, int m1, int n, const float* bias, float* y,
                                   int OH, int OW, int ty0, int ty1, int twp, Act act) {
  const size_t xs = (size_t)M * n;
  for (int m = m0; m < m1; m++) {
    const v128_t b = bias ? VSPLAT(bias[m]) : wasm_f32x4_const_splat(0.0f);
    float* ym = y + (size_t)m * OH * OW;
    for (int ty = ty0; ty < ty1; ty++) {
      for (int q = 0; q < twp; q += 4) {
        const float* s = mo + (size_t)m * n + (ty - ty0) * twp + q;
        const v128_t m1[3] = {VLOAD(s + 3 * xs), VLOAD(s + 4 * xs), VLOAD(s + 5 * xs)};
        const v128_t u0 = wasm_f32x4_add(VLOAD(s + 0 * xs), m1[0]);
        const v128_t v0 = wasm_f32x4_add(m1[0], VLOAD(s + 6 * xs));
        const v128_t u1 = wasm_f32x4_add(VLOAD(s + 1 * xs), m1[1]);
        const v128_t v1 = wasm_f32x4_add(m1[1], VLOAD(s + 7 * xs));
        const v128_t u2 = wasm_f32x4_add(VLOAD(s + 2 * xs), m1[2]);
        const v128_t v2 = wasm_f32x4_add(m1[2], VLOAD(s + 8 * xs));
        const v128_t y00 = act_apply(wasm_f32x4_add(wasm_f32x4_add(u0, u1), b), act);
        const v128_t y01 = act_apply(wasm_f32x4_add(wasm_f32x4_add(u1, u2), b), act);
        const v128_t y10 = act_apply(wasm_f32x4_add(wasm_f32x4_add(v0, v1), b), act);
        const v128_t y11 = act_apply(wasm_f32x4_add(wasm_f32x4_add(v1, v2), b), act);
        store_tile_quad(ym, 2 * ty, OH, OW, 2 * q, y00, y01, y10, y11);
      }
    }
  }
}

/* Full stride-2 Winograd convolution: N images, weights u as 9 packed-A operands (position xi:
 * [ceil(M/4)][nph * C][4], starting at phase slot wino_s2_off[xi] of ceil(M/4) * 4 * C floats), chunks
 * of rpc tile rows. scratch: the 9 B operands (25 phase slots of C x n rounded up to a panel), the 9
 * products (M x n each), 5 bordered input rows of 4 * twp + 4 floats. */
KERNEL void f32_conv2d_winograd_s2(const float* x, int N, int C, int H, int W, const float* u,
                                   const float* bias, float* y, int M, int OH, int OW, int pt, int pl, int twp,
                                   int rpc, float* scratch, Act act, int tid, int nt) {
  const int th = (OH + 1) / 2, nmax = rpc * twp, wr = 4 * twp + 4;
  float* bp = scratch;
  float* mo = bp + (size_t)25 * C * ((nmax + 7) & ~7);
  float* rows = tid ? (float*)__builtin_alloca(sizeof(float) * 5 * wr) : mo + (size_t)9 * M * nmax;
  int c0, c1, m0, m1;  /* the threads claim channels of the transforms (cuvil_chunks) */
  for (int img = 0; img < N; img++) {
    const float* xn = x + (size_t)img * C * H * W;
    float* yn = y + (size_t)img * M * OH * OW;
    for (int ty0 = 0; ty0 < th; ty0 += rpc) {
      const int ty1 = ty0 + rpc < th ? ty0 + rpc : th, n = (ty1 - ty0) * twp, npan = (n + 7) / 8;
      for (CuvilChunks d = cuvil_chunks(C, 1, tid, nt); cuvil_chunk(&d, &c0, &c1);)
        f32_winograd_s2_input(xn, C, c0, c1, H, W, pt, pl, ty0, ty1, twp, wr, rows, bp, npan);
      cuvil_barrier();
      f32_winograd_gemms(9, wino_s2_off, wino_s2_nph, M, n, C, u, bp, mo, tid, nt);
      cuvil_barrier();
      for (CuvilChunks d = cuvil_chunks(M, 1, tid, nt); cuvil_chunk(&d, &m0, &m1);)
        f32_winograd_s2_output(mo, M, m0, m1, n, bias, yn, OH, OW, ty0, ty1, twp, act);
    }
  }
}

/* 3D convolution (NCDHW): the same GEMM over output voxels. The im2col panels are packed lane by lane
 * with precomputed bases (no row fast path: 3D layers are rare and small on the edge). */
KERNEL void f32_im2col3d_packed(const float* x, int C, int D, int H, int W, int kd, int kh, int kw,
                                int sd, int sh, int sw, int dd, int dh, int dw, int pd, int pt, int pl,
                                int OH, int OW, int p0, int pc, float* bp) {
  const int K = C * kd * kh * kw, OP = OH * OW;
  for (int j = 0; j < pc; j += 8) {
    const int nr = pc - j < 8 ? pc - j : 8;
    float* dst = bp + (size_t)(j / 8) * K * 8;
    int izb[8], iyb[8], ixb[8];
    for (int l = 0; l < 8; l++) {
      const int q = p0 + j + l, r = q % OP;
      izb[l] = l < nr ? (q / OP) * sd - pd : -(1 << 28);  /* lanes past the end read nothing */
      iyb[l] = (r / OW) * sh - pt;
      ixb[l] = (r % OW) * sw - pl;
    }
    for (int c = 0; c < C; c++) {
      const float* xc = x + (size_t)c * D * H * W;
      for (int kz = 0; kz < kd; kz++)
        for (int ky = 0; ky < kh; ky++)
          for (int kx = 0; kx < kw; kx++, dst += 8)
            for (int l = 0; l < 8; l++) {
              const int iz = izb[l] + kz * dd, iy = iyb[l] + ky * dh, ix = ixb[l] + kx * dw;
              dst[l] = ((unsigned)iz < (unsigned)D && (unsigned)iy < (unsigned)H && (unsigned)ix < (unsigned)W)
                           ? xc[((size_t)iz * H + iy) * W + ix] : 0.0f;
            }
    }
  }
}

KERNEL void f32_conv3d(const float* x, int N, int C, int D, int H, int W, const float* w, const float* bias,
                       float* y, int M, int OD, int OH, int OW, int G, int kd, int kh, int kw, int sd,
                       int sh, int sw, int dd, int dh, int dw, int pd, int pt, int pl, int pchunk,
                       float* scratch, Act act, int tid, int nt) {
  const int Cg = C / G, Mg = M / G, K = Cg * kd * kh * kw, P = OD * OH * OW;
  for (int n = 0; n < N; n++) {
    for (int g = 0; g < G; g++) {
      const float* xg = x + ((size_t)n * C + (size_t)g * Cg) * D * H * W;
      const float* wg = w + (size_t)g * ((Mg + 3) & ~3) * K;
      float* yg = y + ((size_t)n * M + (size_t)g * Mg) * P;
      for (int p0 = 0; p0 < P; p0 += pchunk) {
        const int pc = P - p0 < pchunk ? P - p0 : pchunk;
        CONV_CHUNK(f32_im2col3d_packed(xg, Cg, D, H, W, kd, kh, kw, sd, sh, sw, dd, dh, dw, pd, pt, pl, OH, OW,
                                       p0 + lo, hi - lo, bp))
      }
    }
  }
}
