/* generated from templates/f32-rnn.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* LSTM, GRU (default activations: sigmoid / tanh) and the plain RNN cell (one activation), one direction
 * per call.
 *
 * The input projection of every step is one GEMM up front (G[T*B][gates*H] = X W^T + bias); each step
 * then runs the recurrent GEMM on the previous h (the 4x8 f32-gemm microkernels over weights packed at
 * build time, or by f32_rnn_pack at run time) and the gate math, all inside one C loop over time. Y is
 * [T][dirs][B][H]: the caller passes this direction's base and the time stride. `lens` (or 0: every
 * sequence is T long) holds each batch entry's length: its steps at t >= lens[b] leave h (and c) as they
 * are and write zeros to Y, so Y_h is the state after its last step in either direction, as ONNX says.
 * Needs f32-unary, f32-gemm and f32-bmm (the run-time packing). */

/* lanes [j, j+k) of a row, k in 1..4 */
INLINE v128_t rnn_ld(const float* p, int k) { return load_k(p, k); }

/* Step t of batch entry b lies past its sequence: its Y row is zeroed and its state kept. */
INLINE int rnn_past_end(const int32_t* lens, int b, int t, float* yrow, int H) {
  if (!lens || t < lens[b]) return 0;
  fill_f32(yrow, 0.0f, H);
  return 1;
}

/* One direction's run-time W [gates*H][I], R [gates*H][H] and B [2*gates*H] laid out as the cells take
 * them: W^T and R^T in GEMM panels (a GRU's R rows z, r in rp, its h rows in rh), bias = Wb + Rb (a GRU
 * under linear_before_reset leaves Rb_h out, in hbias), both padded with zeros to whole panels. */
KERNEL void f32_rnn_pack(int gates, int I, int H, int lbr, const float* W, const float* R, const float* B,
                         float* wp, float* rp, float* rh, float* bias, float* hbias) {
  const int GH = gates * H, rrows = gates == 3 ? 2 * H : GH, keep = gates == 3 && lbr ? 2 * H : GH;
  f32_pack_panels(I, GH, W, 1, I, wp);
  f32_pack_panels(H, rrows, R, 1, H, rp);
  if (gates == 3) f32_pack_panels(H, H, R + (size_t)2 * H * H, 1, H, rh);
  for (int j = 0; j < (GH + 7) / 8 * 8; j++) bias[j] = j < GH ? B[j] + (j < keep ? B[GH + j] : 0.0f) : 0.0f;
  if (gates == 3)
    for (int j = 0; j < (H + 7) / 8 * 8; j++) hbias[j] = j < H ? B[GH + 2 * H + j] : 0.0f;
}

/* h = act(x W^T + h R^T + Wb + Rb) */
KERNEL void f32_rnn(int T, int Bn, int I, int H, const float* X, const float* Wp, const float* bias,
                    const float* Rp, const float* h0, const int32_t* lens, float* Y, int yt, float* yh, Act act,
                    int reverse, float* scratch) {
  const Act none = {ACT_NONE, 0.0f, 0.0f};
  float* G = scratch;
  float* g = G + (size_t)T * Bn * H;
  float* h = g + (size_t)Bn * H;
  f32_gemm(T * Bn, H, I, X, I, Wp, G, H, 0, bias, none);
  for (int i = 0; i < Bn * H; i++) h[i] = h0 ? h0[i] : 0.0f;
  for (int s = 0; s < T; s++) {
    const int t = reverse ? T - 1 - s : s;
    f32_gemm(Bn, H, H, h, H, Rp, g, H, 0, 0, none);
    for (int b = 0; b < Bn; b++) {
      float* yrow = Y + (size_t)t * yt + (size_t)b * H;
      if (rnn_past_end(lens, b, t, yrow, H)) continue;
      const float* gx = G + ((size_t)t * Bn + b) * H;
      const float* gh = g + (size_t)b * H;
      float* hb = h + (size_t)b * H;
      for (int j = 0; j < H; j += 4) {
        const int k = H - j < 4 ? H - j : 4;
        store_k(hb + j, act_apply(wasm_f32x4_add(rnn_ld(gx + j, k), rnn_ld(gh + j, k)), act), k);
      }
      copy_f32(yrow, hb, H);
    }
  }
  if (yh) copy_f32(yh, h, Bn * H);
}

/* LSTM gates i, o, f, c; P (or 0) holds the peepholes [3H] (i, o, f): p_i and p_f times the previous c
 * join i and f, p_o times the new c joins o. */
KERNEL void f32_lstm(int T, int Bn, int I, int H, const float* X, const float* Wp, const float* bias,
                     const float* Rp, const float* h0, const float* c0, const int32_t* lens, const float* P,
                     float* Y, int yt, float* yh, float* yc, int reverse, float* scratch) {
  const int G4 = 4 * H;
  const Act none = {ACT_NONE, 0.0f, 0.0f};
  float* G = scratch;
  float* g = G + (size_t)T * Bn * G4;
  float* h = g + (size_t)Bn * G4;
  float* c = h + (size_t)Bn * H;
  f32_gemm(T * Bn, G4, I, X, I, Wp, G, G4, 0, bias, none);
  for (int i = 0; i < Bn * H; i++) { h[i] = h0 ? h0[i] : 0.0f; c[i] = c0 ? c0[i] : 0.0f; }
  for (int s = 0; s < T; s++) {
    const int t = reverse ? T - 1 - s : s;
    f32_gemm(Bn, G4, H, h, H, Rp, g, G4, 0, 0, none);
    for (int b = 0; b < Bn; b++) {
      float* yrow = Y + (size_t)t * yt + (size_t)b * H;
      if (rnn_past_end(lens, b, t, yrow, H)) continue;
      const float* gx = G + ((size_t)t * Bn + b) * G4;
      const float* gh = g + (size_t)b * G4;
      float* hb = h + (size_t)b * H;
      float* cb = c + (size_t)b * H;
      for (int j = 0; j < H; j += 4) {
        const int k = H - j < 4 ? H - j : 4;
        const v128_t cp = rnn_ld(cb + j, k);
        v128_t gi = wasm_f32x4_add(rnn_ld(gx + j, k), rnn_ld(gh + j, k));
        v128_t go = wasm_f32x4_add(rnn_ld(gx + H + j, k), rnn_ld(gh + H + j, k));
        v128_t gf = wasm_f32x4_add(rnn_ld(gx + 2 * H + j, k), rnn_ld(gh + 2 * H + j, k));
        if (P) {
          gi = VFMA(rnn_ld(P + j, k), cp, gi);
          gf = VFMA(rnn_ld(P + 2 * H + j, k), cp, gf);
        }
        const v128_t ig = v_sigmoid(gi), fg = v_sigmoid(gf);
        const v128_t cg = v_tanh(wasm_f32x4_add(rnn_ld(gx + 3 * H + j, k), rnn_ld(gh + 3 * H + j, k)));
        const v128_t cn = VFMA(fg, cp, wasm_f32x4_mul(ig, cg));
        if (P) go = VFMA(rnn_ld(P + H + j, k), cn, go);
        store_k(cb + j, cn, k);
        store_k(hb + j, wasm_f32x4_mul(v_sigmoid(go), v_tanh(cn)), k);
      }
      copy_f32(yrow, hb, H);
    }
  }
  if (yh) copy_f32(yh, h, Bn * H);
  if (yc) copy_f32(yc, c, Bn * H);
}

/* GRU gates z, r, h. Rzr packs R's z and r rows, Rh its h rows; hbias is Rb_h (used inside r * (.) when
 * linear_before_reset, else already folded into bias). */
KERNEL void f32_gru(int T, int Bn, int I, int H, const float* X, const float* Wp, const float* bias,
                    const float* Rzr, const float* Rh, const float* hbias, const float* h0, const int32_t* lens,
                    float* Y, int yt, float* yh, int lbr, int reverse, float* scratch) {
  const int G3 = 3 * H;
  const Act none = {ACT_NONE, 0.0f, 0.0f};
  float* G = scratch;
  float* g = G + (size_t)T * Bn * G3;      /* [B][2H] z, r pre-activations, then z, r */
  float* gn = g + (size_t)Bn * 2 * H;      /* [B][H] recurrent part of the h gate */
  float* h = gn + (size_t)Bn * H;
  float* rh = h + (size_t)Bn * H;
  f32_gemm(T * Bn, G3, I, X, I, Wp, G, G3, 0, bias, none);
  for (int i = 0; i < Bn * H; i++) h[i] = h0 ? h0[i] : 0.0f;
  for (int s = 0; s < T; s++) {
    const int t = reverse ? T - 1 - s : s;
    f32_gemm(Bn, 2 * H, H, h, H, Rzr, g, 2 * H, 0, 0, none);
    for (int b = 0; b < Bn; b++) {
      const float* gx = G + ((size_t)t * Bn + b) * G3;
      float* gb = g + (size_t)b * 2 * H;
      for (int j = 0; j < 2 * H; j += 4) {
        const int k = 2 * H - j < 4 ? 2 * H - j : 4;
        const v128_t zr = v_sigmoid(wasm_f32x4_add(rnn_ld(gx + j, k), rnn_ld(gb + j, k)));
        store_k(gb + j, zr, k);
      }
      if (!lbr)
        for (int j = 0; j < H; j++) rh[(size_t)b * H + j] = gb[H + j] * h[(size_t)b * H + j];
    }
    f32_gemm(Bn, H, H, lbr ? h : rh, H, Rh, gn, H, 0, lbr ? hbias : 0, none);
    for (int b = 0; b < Bn; b++) {
      float* yrow = Y + (size_t)t * yt + (size_t)b * H;
      if (rnn_past_end(lens, b, t, yrow, H)) continue;
      const float* gx = G + ((size_t)t * Bn + b) * G3 + 2 * H;
      const float* gb = g + (size_t)b * 2 * H;
      const float* nb = gn + (size_t)b * H;
      float* hb = h + (size_t)b * H;
      for (int j = 0; j < H; j += 4) {
        const int k = H - j < 4 ? H - j : 4;
        const v128_t z = rnn_ld(gb + j, k);
        v128_t rec = rnn_ld(nb + j, k);
        if (lbr) rec = wasm_f32x4_mul(rnn_ld(gb + H + j, k), rec);
        const v128_t n = v_tanh(wasm_f32x4_add(rnn_ld(gx + j, k), rec));
        const v128_t hp = rnn_ld(hb + j, k);
        store_k(hb + j, VFMA(z, wasm_f32x4_sub(hp, n), n), k);
      }
      copy_f32(yrow, hb, H);
    }
  }
  if (yh) copy_f32(yh, h, Bn * H);
}
