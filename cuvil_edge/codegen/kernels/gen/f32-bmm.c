/* generated from templates/f32-bmm.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* Batched GEMM over run-time operands (MatMul of rank >= 3, attention), built on the f32-gemm panels.
 *
 * f32_pack_panels reads B[k][n] at B + k*sk + n*sn, so one routine packs a row-major B (sk = ldb, sn = 1)
 * and a transposed one (K^T of attention: sk = 1, sn = ldb) into the [ceil(N/8)][K][8] panel layout.
 * f32_bmm runs every batch in one C loop; batch offsets come from build-time tables (broadcasting is
 * already resolved there), and a B shared by consecutive batches is packed once. Needs f32-gemm.
 */

KERNEL void f32_pack_panels(int K, int N, const float* B, int sk, int sn, float* Bp) {
  for (int j = 0; j < N; j += 8, Bp += (size_t)K * 8) {
    const int nr = N - j < 8 ? N - j : 8;
    const float* src = B + (size_t)j * sn;
    if (nr == 8 && sn == 1) {
      for (int k = 0; k < K; k++) {
        VSTORE(Bp + k * 8, VLOAD(src + (size_t)k * sk));
        VSTORE(Bp + k * 8 + 4, VLOAD(src + (size_t)k * sk + 4));
      }
    } else {
      for (int l = 0; l < 8; l++)
        for (int k = 0; k < K; k++) Bp[k * 8 + l] = l < nr ? src[(size_t)l * sn + (size_t)k * sk] : 0.0f;
    }
  }
}

/* C[b] (contiguous [M][N]) = act(A[aoff[b]] (lda K) . B[boff[b]]); packed: B is already in panels. */
KERNEL void f32_bmm(int batch, int M, int N, int K, const float* A, const int32_t* aoff, const float* B,
                    const int32_t* boff, int sk, int sn, int packed, float* C, float* scratch, Act act) {
  for (int b = 0; b < batch; b++) {
    const float* bp = B + boff[b];
    if (!packed) {
      if (b == 0 || boff[b] != boff[b - 1]) f32_pack_panels(K, N, B + boff[b], sk, sn, scratch);
      bp = scratch;
    }
    f32_gemm(M, N, K, A + aoff[b], K, bp, C + (size_t)b * M * N, N, 0, 0, act);
  }
}
