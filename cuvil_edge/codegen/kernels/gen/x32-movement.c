/* generated from templates/x32-movement.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* Data movement on 32-bit elements (f32 and i32 alike: elements are moved by size, never read as numbers),
 * and x8_copy_nd / x8_gather_nd for bytes (bool, int8; ops/movement.py moves 2- and 8-byte elements as
 * pairs of bytes or of 32-bit words).
 *
 * Every op in ops/movement.py lowers to one of three shapes of loop, with its dims merged at build time:
 *   x32_copy_nd   y[i] = x[i] over an N-d box with arbitrary element strides on both sides
 *                 (transpose, slice, expand, tile, concat, split, pad interior); rank <= 8
 *   x32_transpose y[b][c][r] = x[b][r][c] in 4x4 SIMD blocks (NCHW <-> NHWC and every 2-D transpose)
 *   x32_gather_nd y[i0..ik] = x[t0[i0] + ... + tk[ik]] from build-time offset tables
 *                 (gather, reflect/edge/wrap pad, nearest resize); a NULL last table means contiguous
 */

/* n elements, strides xs/ys: vector copy for contiguous runs, splat for broadcast runs */
INLINE void x32_run(const uint32_t* x, int xs, uint32_t* y, int ys, int n) {
  int i = 0;
  if (ys == 1 && xs == 1) {
    for (; i + 4 <= n; i += 4) VSTORE(y + i, VLOAD(x + i));
    for (; i < n; i++) y[i] = x[i];
  } else if (ys == 1 && xs == 0) {
    const v128_t v = wasm_i32x4_splat((int32_t)x[0]);
    for (; i + 4 <= n; i += 4) VSTORE(y + i, v);
    for (; i < n; i++) y[i] = x[0];
  } else if (ys == 1) {
    for (; i + 4 <= n; i += 4)
      VSTORE(y + i, wasm_i32x4_make((int32_t)x[(ptrdiff_t)i * xs], (int32_t)x[(ptrdiff_t)(i + 1) * xs],
                                    (int32_t)x[(ptrdiff_t)(i + 2) * xs], (int32_t)x[(ptrdiff_t)(i + 3) * xs]));
    for (; i < n; i++) y[i] = x[(ptrdiff_t)i * xs];
  } else {
    for (; i < n; i++) y[(ptrdiff_t)i * ys] = x[(ptrdiff_t)i * xs];
  }
}

KERNEL void x32_copy_nd(const uint32_t* x, uint32_t* y, int rank, const int* shape, const int* xs,
                        const int* ys) {
  int idx[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t outer = 1;
  for (int d = 0; d + 1 < rank; d++) outer *= (size_t)shape[d];
  const int n = shape[rank - 1], xi = xs[rank - 1], yi = ys[rank - 1];
  for (size_t o = 0; o < outer; o++) {
    x32_run(x, xi, y, yi, n);
    for (int d = rank - 2; d >= 0; d--) { /* odometer step over the outer dims */
      x += xs[d]; y += ys[d];
      if (++idx[d] < shape[d]) break;
      x -= (ptrdiff_t)xs[d] * shape[d]; y -= (ptrdiff_t)ys[d] * shape[d]; idx[d] = 0;
    }
  }
}

KERNEL void x32_gather_nd(const uint32_t* x, uint32_t* y, int rank, const int* shape,
                          const int32_t* const* tab) {
  int idx[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t outer = 1;
  for (int d = 0; d + 1 < rank; d++) outer *= (size_t)shape[d];
  const int n = shape[rank - 1];
  const int32_t* inner = tab[rank - 1];
  for (size_t o = 0; o < outer; o++, y += n) {
    const uint32_t* p = x;
    for (int d = 0; d + 1 < rank; d++) p += tab[d][idx[d]];
    if (inner == 0) {
      x32_run(p, 1, y, 1, n);
    } else {
      int i = 0;
      for (; i + 4 <= n; i += 4)
        VSTORE(y + i, wasm_i32x4_make((int32_t)p[inner[i]], (int32_t)p[inner[i + 1]],
                                      (int32_t)p[inner[i + 2]], (int32_t)p[inner[i + 3]]));
      for (; i < n; i++) y[i] = p[inner[i]];
    }
    for (int d = rank - 2; d >= 0; d--) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

/* n elements, strides xs/ys: vector copy for contiguous runs, splat for broadcast runs */
INLINE void x8_run(const uint8_t* x, int xs, uint8_t* y, int ys, int n) {
  int i = 0;
  if (ys == 1 && xs == 1) {
    for (; i < n; i++) y[i] = x[i];
  } else {
    for (; i < n; i++) y[(ptrdiff_t)i * ys] = x[(ptrdiff_t)i * xs];
  }
}

KERNEL void x8_copy_nd(const uint8_t* x, uint8_t* y, int rank, const int* shape, const int* xs,
                        const int* ys) {
  int idx[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t outer = 1;
  for (int d = 0; d + 1 < rank; d++) outer *= (size_t)shape[d];
  const int n = shape[rank - 1], xi = xs[rank - 1], yi = ys[rank - 1];
  for (size_t o = 0; o < outer; o++) {
    x8_run(x, xi, y, yi, n);
    for (int d = rank - 2; d >= 0; d--) { /* odometer step over the outer dims */
      x += xs[d]; y += ys[d];
      if (++idx[d] < shape[d]) break;
      x -= (ptrdiff_t)xs[d] * shape[d]; y -= (ptrdiff_t)ys[d] * shape[d]; idx[d] = 0;
    }
  }
}

KERNEL void x8_gather_nd(const uint8_t* x, uint8_t* y, int rank, const int* shape,
                          const int32_t* const* tab) {
  int idx[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t outer = 1;
  for (int d = 0; d + 1 < rank; d++) outer *= (size_t)shape[d];
  const int n = shape[rank - 1];
  const int32_t* inner = tab[rank - 1];
  for (size_t o = 0; o < outer; o++, y += n) {
    const uint8_t* p = x;
    for (int d = 0; d + 1 < rank; d++) p += tab[d][idx[d]];
    if (inner == 0) {
      x8_run(p, 1, y, 1, n);
    } else {
      int i = 0;
      for (; i < n; i++) y[i] = p[inner[i]];
    }
    for (int d = rank - 2; d >= 0; d--) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

KERNEL void x32_fill(uint32_t* y, uint32_t v, int n) {
  int i = 0; const v128_t vv = wasm_i32x4_splat((int32_t)v);
  for (; i + 4 <= n; i += 4) VSTORE(y + i, vv);
  for (; i < n; i++) y[i] = v;
}

INLINE void x32_transpose4x4(const uint32_t* x, int xs, uint32_t* y, int ys) {
  const v128_t r0 = VLOAD(x), r1 = VLOAD(x + xs), r2 = VLOAD(x + 2 * xs), r3 = VLOAD(x + 3 * xs);
  const v128_t t0 = wasm_i32x4_shuffle(r0, r1, 0, 4, 1, 5), t1 = wasm_i32x4_shuffle(r2, r3, 0, 4, 1, 5);
  const v128_t t2 = wasm_i32x4_shuffle(r0, r1, 2, 6, 3, 7), t3 = wasm_i32x4_shuffle(r2, r3, 2, 6, 3, 7);
  VSTORE(y, wasm_i64x2_shuffle(t0, t1, 0, 2));
  VSTORE(y + ys, wasm_i64x2_shuffle(t0, t1, 1, 3));
  VSTORE(y + 2 * ys, wasm_i64x2_shuffle(t2, t3, 0, 2));
  VSTORE(y + 3 * ys, wasm_i64x2_shuffle(t2, t3, 1, 3));
}

/* y[b][c][r] = x[b][r][c]; 32x32 tiles keep both sides in L1, 4x4 register blocks inside */
KERNEL void x32_transpose(const uint32_t* x, uint32_t* y, int B, int R, int C) {
  for (int b = 0; b < B; b++, x += (size_t)R * C, y += (size_t)R * C) {
    for (int r0 = 0; r0 < R; r0 += 32) {
      const int r1 = r0 + 32 < R ? r0 + 32 : R;
      for (int c0 = 0; c0 < C; c0 += 32) {
        const int c1 = c0 + 32 < C ? c0 + 32 : C;
        int r = r0;
        for (; r + 4 <= r1; r += 4) {
          int c = c0;
          for (; c + 4 <= c1; c += 4) x32_transpose4x4(x + (size_t)r * C + c, C, y + (size_t)c * R + r, R);
          for (; c < c1; c++)
            for (int k = 0; k < 4; k++) y[(size_t)c * R + r + k] = x[(size_t)(r + k) * C + c];
        }
        for (; r < r1; r++)
          for (int c = c0; c < c1; c++) y[(size_t)c * R + r] = x[(size_t)r * C + c];
      }
    }
  }
}

