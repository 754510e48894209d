/* generated from templates/common.c.in by cuvil_edge/codegen/kernels/generate.py; do not edit */
/* Shared prelude of every generated model: types, tier/host-family macros, vector math, activations.
 *
 * Build macros (set by the compiler driver, one module per combination):
 *   CUVIL_RELAXED  1 when the module may use relaxed-SIMD opcodes (tier "relaxed")
 *   CUVIL_ARM      1 for ARM hosts (f32x4.min/max are single instructions there; x86 prefers pmin/pmax)
 */
#include <stdint.h>
#include <stddef.h>
#include <wasm_simd128.h>

#define EXPORT(name) __attribute__((export_name(name)))
#define KERNEL static __attribute__((noinline))
#define INLINE static inline __attribute__((always_inline))

#ifndef CUVIL_RELAXED
#define CUVIL_RELAXED 0
#endif
#ifndef CUVIL_ARM
#define CUVIL_ARM 0
#endif

#if CUVIL_RELAXED
#define VFMA(a, b, c) wasm_f32x4_relaxed_madd((a), (b), (c))
#else
#define VFMA(a, b, c) wasm_f32x4_add(wasm_f32x4_mul((a), (b)), (c))
#endif
#if CUVIL_ARM
#define VMIN(a, b) wasm_f32x4_min((a), (b))
#define VMAX(a, b) wasm_f32x4_max((a), (b))
#else
#define VMIN(a, b) wasm_f32x4_pmin((a), (b))
#define VMAX(a, b) wasm_f32x4_pmax((a), (b))
#endif
#define VLOAD(p) wasm_v128_load((const void*)(p))
#define VSTORE(p, v) wasm_v128_store((void*)(p), (v))
#define VSPLAT(x) wasm_f32x4_splat(x)

/* Freestanding: the compiler may still emit calls to these for struct copies and recognised loops.
 * With bulk memory (on by default for wasm32) the builtins lower to memory.copy / memory.fill. */
void* memcpy(void* d, const void* s, size_t n) { __builtin_memmove(d, s, n); return d; }
void* memmove(void* d, const void* s, size_t n) { __builtin_memmove(d, s, n); return d; }
void* memset(void* d, int c, size_t n) { __builtin_memset(d, c, n); return d; }

/* Threads (CUVIL_MAX_THREADS > 1, set by the emitter): one instance per thread over one shared memory.
 * Threads 1.. park in cuvil_worker; run() (thread 0) starts a job, runs its share and meets them at the
 * last barrier. Each split node's code gets (tid, nt) and a barrier sits between dependent nodes. Waits
 * spin briefly, then sleep in memory.atomic.wait32: a loaded machine must not burn the other cores. The
 * spin (under 0.1 ms on a current x86 core) outlasts the usual imbalance of a split node's shares: a
 * wait that sleeps costs a wake-up of tens of microseconds, and with a tenth of it most waits of a conv
 * net slept (144 of 217 barriers per YOLOv8n-style run on 2 idle cores; about 10% of its time). The
 * bound is rounds, not time: a module has no clock, and a host call per round would cost more than the
 * round (issue 40). What keeps a busy core from stalling the others is the dynamic split below.
 * cuvil_stop wakes every waiter: parked threads return, a thread inside a job traps; with every thread
 * stopped, cuvil_reset makes the module ready for new ones. */
#ifndef CUVIL_MAX_THREADS
#define CUVIL_MAX_THREADS 1
#endif
#if CUVIL_MAX_THREADS > 1
static int32_t cuvil_nt = 1, cuvil_job, cuvil_stop_flag, cuvil_bar_count, cuvil_bar_gen;
#define CUVIL_NT __atomic_load_n(&cuvil_nt, __ATOMIC_RELAXED)
#define CUVIL_SPINS 200000

/* Wait until *p differs from old; 0 when stopped instead. cuvil_stop sets the flag and then changes both
 * words a thread can wait on, so a thread that checked the flag just before cannot sleep through it. */
static int cuvil_wait_change(int32_t* p, int32_t old) {
  for (int spin = 0; __atomic_load_n(p, __ATOMIC_ACQUIRE) == old; spin++) {
    if (__atomic_load_n(&cuvil_stop_flag, __ATOMIC_ACQUIRE)) return 0;
    if (spin >= CUVIL_SPINS) __builtin_wasm_memory_atomic_wait32((int*)p, old, -1);
  }
  return !__atomic_load_n(&cuvil_stop_flag, __ATOMIC_ACQUIRE);
}

/* Every one of nt threads waits here for the others. Kernels and the run body call cuvil_barrier(), which
 * passes the `nt` in scope: code that runs on one thread (a serial node) sees nt = 1 and never waits. */
#define cuvil_barrier() cuvil_barrier_n(nt)
static __attribute__((noinline)) void cuvil_barrier_n(int32_t nt) {
  if (nt == 1) return;
  const int32_t gen = __atomic_load_n(&cuvil_bar_gen, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&cuvil_bar_count, 1, __ATOMIC_ACQ_REL) == nt) {
    __atomic_store_n(&cuvil_bar_count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&cuvil_bar_gen, gen + 1, __ATOMIC_RELEASE);
    __builtin_wasm_memory_atomic_notify((int*)&cuvil_bar_gen, (unsigned)-1);
  } else if (!cuvil_wait_change(&cuvil_bar_gen, gen)) {
    __builtin_trap();  /* stopped mid-job: this job's results are void */
  }
}

/* Thread t's share [lo, hi) of n items in whole units of `unit` (a kernel tile), the same split for every
 * caller; threads past the work get an empty range. Kept for the light row-split nodes (ops/common.py:
 * equal partitions of the same rows let the emitter drop the barrier between two such nodes, which
 * claimed chunks would not) and for shares of shared scratch; the heavy kernels claim chunks instead. */
INLINE void cuvil_split(int n, int unit, int tid, int nt, int* lo, int* hi) {
  const int units = (n + unit - 1) / unit, per = units / nt, extra = units % nt;
  const int u0 = tid * per + (tid < extra ? tid : extra), u1 = u0 + per + (tid < extra);
  *lo = u0 * unit < n ? u0 * unit : n;
  *hi = u1 * unit < n ? u1 * unit : n;
}

/* Dynamic split (issue 40): chunks of a loop claimed one at a time from a shared counter, so a thread
 * that lost its core to another process does fewer of them instead of holding every other thread at the
 * next barrier. Every thread of the node must run the loop to its end (cuvil_chunk returning 0 exactly
 * once each): the claims of a loop then number chunks + nt, and the thread that makes the last one
 * clears the counter and opens its slot for the loop CUVIL_DYN_SLOTS later (a thread that many loops
 * ahead with no barrier between waits for it). Each thread counts its loops (the same sequence on every
 * thread: they run the same nodes); thread 0 clears the counts and slots before each run. A chunk is
 * whole units (kernel tiles) computed as in one call, so outputs are the same bits for any schedule. */
#define CUVIL_DYN_SLOTS 64
static struct { int32_t count, ticket, pad[14]; } cuvil_dyn_slot[CUVIL_DYN_SLOTS] __attribute__((aligned(64)));
static struct { int32_t seq, pad[15]; } cuvil_dyn_seq[CUVIL_MAX_THREADS] __attribute__((aligned(64)));
typedef struct { int32_t *count, *ticket; int32_t gen, chunks, next, nt, n, step, ends; } CuvilChunks;

static void cuvil_dyn_clear(void) {
  for (int i = 0; i < CUVIL_DYN_SLOTS; i++) cuvil_dyn_slot[i].count = cuvil_dyn_slot[i].ticket = 0;
  for (int i = 0; i < CUVIL_MAX_THREADS; i++) cuvil_dyn_seq[i].seq = 0;
}

/* Chunks of `step` items over [0, n) for nt threads (nt 1: a plain loop, no shared state). */
static CuvilChunks cuvil_chunks_of(int n, int step, int tid, int nt) {
  CuvilChunks d = {0, 0, 0, n > 0 ? (n + step - 1) / step : 0, 0, nt, n, step};
  if (nt > 1) {
    const int32_t s = cuvil_dyn_seq[tid].seq++;
    d.count = &cuvil_dyn_slot[s % CUVIL_DYN_SLOTS].count;
    d.ticket = &cuvil_dyn_slot[s % CUVIL_DYN_SLOTS].ticket;
    d.gen = s / CUVIL_DYN_SLOTS;
    for (int32_t t; (t = __atomic_load_n(d.ticket, __ATOMIC_ACQUIRE)) != d.gen;)
      if (!cuvil_wait_change(d.ticket, t)) __builtin_trap();
  }
  return d;
}

/* cuvil_chunks_of claimed from both ends: even threads take chunks from the front, odd ones from the
 * back (one counter, a half each), so in a run of such loops over the same items each thread finds its
 * part where it was the loop before, in its own core's cache, while a thread that lost its core still
 * does fewer (issue 40: int8 MobileNetV2's 1x1 convs 3% faster on 2 threads). Loops of up to 32,767
 * chunks; more claim from the front alone. */
static CuvilChunks cuvil_chunks_ends(int n, int step, int tid, int nt) {
  CuvilChunks d = cuvil_chunks_of(n, step, tid, nt);
  d.ends = nt > 1 && d.chunks <= 32767 ? 1 + (tid & 1) : 0;
  return d;
}

/* The next chunk [lo, hi), or 0 when the loop is done (then never call again for this loop). A claim
 * from the back adds 65,536: the counter's halves count the claims at each end, and the loop is done for
 * a thread when they add up to the chunks. */
static int cuvil_chunk(CuvilChunks* d, int* lo, int* hi) {
  if (d->ends) {
    const int32_t w = __atomic_fetch_add(d->count, d->ends == 2 ? 65536 : 1, __ATOMIC_RELAXED);
    const int32_t front = w & 0xFFFF, back = (int32_t)((uint32_t)w >> 16);
    if (front + back >= d->chunks) {
      if (front + back == d->chunks + d->nt - 1) {
        __atomic_store_n(d->count, 0, __ATOMIC_RELAXED);
        __atomic_store_n(d->ticket, d->gen + 1, __ATOMIC_RELEASE);
        __builtin_wasm_memory_atomic_notify((int*)d->ticket, (unsigned)-1);
      }
      return 0;
    }
    *lo = (d->ends == 2 ? d->chunks - 1 - back : front) * d->step;
    *hi = *lo + d->step < d->n ? *lo + d->step : d->n;
    return 1;
  }
  const int32_t c = d->count ? __atomic_fetch_add(d->count, 1, __ATOMIC_RELAXED) : d->next++;
  if (c >= d->chunks) {
    if (d->count && c == d->chunks + d->nt - 1) {
      __atomic_store_n(d->count, 0, __ATOMIC_RELAXED);
      __atomic_store_n(d->ticket, d->gen + 1, __ATOMIC_RELEASE);
      __builtin_wasm_memory_atomic_notify((int*)d->ticket, (unsigned)-1);
    }
    return 0;
  }
  *lo = c * d->step;
  *hi = *lo + d->step < d->n ? *lo + d->step : d->n;
  return 1;
}

#define CUVIL_ENTRY_POINTS \
  EXPORT("cuvil_set_threads") void cuvil_set_threads(int n) { \
    __atomic_store_n(&cuvil_nt, n < 1 ? 1 : n > CUVIL_MAX_THREADS ? CUVIL_MAX_THREADS : n, __ATOMIC_RELEASE); } \
  EXPORT("cuvil_max_threads") int cuvil_max_threads(void) { return CUVIL_MAX_THREADS; } \
  EXPORT("cuvil_worker") void cuvil_worker(int tid) { \
    for (int32_t seen = 0;;) { \
      if (!cuvil_wait_change(&cuvil_job, seen)) return; \
      seen = __atomic_load_n(&cuvil_job, __ATOMIC_ACQUIRE); \
      cuvil_body(tid); \
      cuvil_barrier_n(CUVIL_NT); \
    } \
  } \
  EXPORT("cuvil_stop") void cuvil_stop(void) { \
    __atomic_store_n(&cuvil_stop_flag, 1, __ATOMIC_RELEASE); \
    __atomic_add_fetch(&cuvil_job, 1, __ATOMIC_RELEASE); \
    __atomic_add_fetch(&cuvil_bar_gen, 1, __ATOMIC_RELEASE); \
    __builtin_wasm_memory_atomic_notify((int*)&cuvil_job, (unsigned)-1); \
    __builtin_wasm_memory_atomic_notify((int*)&cuvil_bar_gen, (unsigned)-1); } \
  EXPORT("cuvil_reset") void cuvil_reset(void) { \
    cuvil_stop_flag = cuvil_job = cuvil_bar_count = cuvil_bar_gen = 0; cuvil_dyn_clear(); } \
  EXPORT("run") void run(void) { \
    if (CUVIL_NT > 1) { \
      cuvil_dyn_clear(); /* every thread is parked: the last run's loops are all done */ \
      __atomic_add_fetch(&cuvil_job, 1, __ATOMIC_RELEASE); \
      __builtin_wasm_memory_atomic_notify((int*)&cuvil_job, (unsigned)-1); \
    } \
    cuvil_body(0); \
    cuvil_barrier_n(CUVIL_NT); \
  }
#else
#define CUVIL_NT 1
#define cuvil_barrier() ((void)0)
INLINE void cuvil_split(int n, int unit, int tid, int nt, int* lo, int* hi) {
  (void)unit; (void)tid; (void)nt; *lo = 0; *hi = n;
}
typedef struct { int32_t chunks, next, n, step; } CuvilChunks;
INLINE CuvilChunks cuvil_chunks_of(int n, int step, int tid, int nt) {
  (void)tid; (void)nt;
  CuvilChunks d = {n > 0 ? (n + step - 1) / step : 0, 0, n, step};
  return d;
}
#define cuvil_chunks_ends cuvil_chunks_of
INLINE int cuvil_chunk(CuvilChunks* d, int* lo, int* hi) {
  if (d->next >= d->chunks) return 0;
  *lo = d->next++ * d->step;
  *hi = *lo + d->step < d->n ? *lo + d->step : d->n;
  return 1;
}
#define CUVIL_ENTRY_POINTS EXPORT("run") void run(void) { cuvil_body(0); }
#endif

/* A dynamic loop over n items in whole units of `unit` (a kernel tile): about CUVIL_CHUNKS_PER_THREAD
 * chunks a thread, enough for a late thread to hand work to the others, few enough that the claims do
 * not show; one chunk (the whole range) on one thread. */
#define CUVIL_CHUNKS_PER_THREAD 4
INLINE CuvilChunks cuvil_chunks(int n, int unit, int tid, int nt) {
  const int units = (n + unit - 1) / unit, per = units / (CUVIL_CHUNKS_PER_THREAD * nt);
  return cuvil_chunks_of(n, nt == 1 ? (n > 0 ? n : 1) : (per > 1 ? per : 1) * unit, tid, nt);
}

INLINE void copy_f32(float* dst, const float* src, int n) {
  int i = 0;
  for (; i + 4 <= n; i += 4) VSTORE(dst + i, VLOAD(src + i));
  for (; i < n; i++) dst[i] = src[i];
}
INLINE void fill_f32(float* dst, float v, int n) {
  int i = 0; v128_t vv = VSPLAT(v);
  for (; i + 4 <= n; i += 4) VSTORE(dst + i, vv);
  for (; i < n; i++) dst[i] = v;
}

/* Zero the lanes whose input column (ix0 + lane*sw) falls outside [0, W): horizontal padding of
 * convolution taps loaded as whole vectors (conv im2col, depthwise borders). */
INLINE v128_t mask_columns(v128_t v, int ix0, int sw, int W) {
  const v128_t ix = wasm_i32x4_add(wasm_i32x4_splat(ix0), wasm_i32x4_mul(wasm_i32x4_make(0, 1, 2, 3),
                                                                        wasm_i32x4_splat(sw)));
  const v128_t ok = wasm_v128_and(wasm_i32x4_ge(ix, wasm_i32x4_splat(0)), wasm_i32x4_lt(ix, wasm_i32x4_splat(W)));
  return wasm_v128_and(v, ok);
}

/* Store the first n (< 4) lanes. */
INLINE void store_partial(float* dst, v128_t v, int n) {
  float t[4] __attribute__((aligned(16)));
  VSTORE(t, v);
  for (int i = 0; i < n; i++) dst[i] = t[i];
}

/* e^x = 2^n p(r), r = x - n ln2, |r| <= ln2/2: p(r) (about 1 ulp), and n, for x already in [-87.4, 89] */
INLINE v128_t v_exp_poly(v128_t x, v128_t* n_out) {
  const v128_t n = wasm_f32x4_nearest(wasm_f32x4_mul(x, VSPLAT(1.44269504f)));
  v128_t r = VFMA(n, VSPLAT(-0.693359375f), x);
  r = VFMA(n, VSPLAT(2.12194440e-4f), r);
  v128_t p = VSPLAT(1.9875691500e-4f);
  p = VFMA(p, r, VSPLAT(1.3981999507e-3f));
  p = VFMA(p, r, VSPLAT(8.3334519073e-3f));
  p = VFMA(p, r, VSPLAT(4.1665795894e-2f));
  p = VFMA(p, r, VSPLAT(1.6666665459e-1f));
  p = VFMA(p, r, VSPLAT(5.0000001201e-1f));
  *n_out = n;
  return VFMA(p, wasm_f32x4_mul(r, r), wasm_f32x4_add(r, VSPLAT(1.0f)));
}
/* n of v_exp_poly (a whole number in [-127, 128]; NaN only where p is NaN) as int32 lanes: adding 1.5 *
 * 2^23 puts it in the mantissa exactly, and the sum's bits less the constant's are n (i32x4.trunc_sat is a
 * dozen x86 instructions under Cranelift, this two). */
INLINE v128_t v_exp_int(v128_t n) {
  const v128_t magic = wasm_f32x4_const_splat(12582912.0f);
  return wasm_i32x4_sub(wasm_f32x4_add(n, magic), magic);
}
/* x clamped to [lo, hi] with NaN passed through, one instruction a bound on either host (VMAX/VMIN: the
 * bound second; f32x4.min/max, NaN- and sign-of-zero-exact, are about 8 x86 instructions each): the
 * argument reductions of v_exp and the gates run on every SiLU, GELU and softmax value. */
INLINE v128_t v_clamp(v128_t x, float lo, float hi) {
  return VMIN(VMAX(x, VSPLAT(lo)), VSPLAT(hi));
}
/* e^x; below ln(FLT_MIN) exactly 0 (the subnormal tail flushed, error under 1.2e-38): a subnormal that
 * reaches a later product costs a microcode assist on x86 per operation, so a padded attention mask's
 * e^(-10000) must not be FLT_MIN (it made the whole P.V GEMM of a padded sequence 1.5x slower). Above
 * ln(FLT_MAX) (88.72) inf: x is held at 89 at most, where n = 128 and the two-step scale overflows. */
INLINE v128_t v_exp(v128_t x) {
  const v128_t under = wasm_f32x4_lt(x, VSPLAT(-87.33654f));
  v128_t n;
  const v128_t p = v_exp_poly(v_clamp(x, -87.33654f, 89.0f), &n);
  /* n may be 128 at the top of the range: scale in two steps so 2^n never overflows the exponent */
  v128_t ni = v_exp_int(n);
  v128_t half = wasm_i32x4_shr(ni, 1);
  v128_t s1 = wasm_i32x4_shl(wasm_i32x4_add(half, wasm_i32x4_splat(127)), 23);
  v128_t s2 = wasm_i32x4_shl(wasm_i32x4_add(wasm_i32x4_sub(ni, half), wasm_i32x4_splat(127)), 23);
  return wasm_v128_andnot(wasm_f32x4_mul(wasm_f32x4_mul(p, s1), s2), under);
}
/* 1 + e^-x for the gates (sigmoid, SiLU: x / (1 + e^-x)), -x held in [-87.3, 87]: 2^n then scales in one
 * step and is never subnormal, and past either bound the gate is already 0 or 1 to within 1.2e-38
 * (about 40% fewer instructions than v_exp's range handling: SiLU ends every conv of a YOLO net) */
INLINE v128_t v_gate_denominator(v128_t x) {
  v128_t n;
  const v128_t p = v_exp_poly(v_clamp(wasm_f32x4_neg(x), -87.33654f, 87.0f), &n);
  const v128_t scale = wasm_i32x4_shl(wasm_i32x4_add(v_exp_int(n), wasm_i32x4_splat(127)), 23);
  return VFMA(p, scale, VSPLAT(1.0f));
}
INLINE v128_t v_sigmoid(v128_t x) {
  return wasm_f32x4_div(VSPLAT(1.0f), v_gate_denominator(x));
}
INLINE v128_t v_tanh(v128_t x) {
  /* tanh x = sign(x) (1 - e^-2|x|) / (1 + e^-2|x|); small |x| uses the odd series for accuracy */
  v128_t ax = wasm_f32x4_abs(x);
  v128_t e = v_exp(wasm_f32x4_mul(ax, VSPLAT(-2.0f)));
  v128_t t = wasm_f32x4_div(wasm_f32x4_sub(VSPLAT(1.0f), e), wasm_f32x4_add(VSPLAT(1.0f), e));
  v128_t x2 = wasm_f32x4_mul(x, x);
  v128_t s = VFMA(x2, VSPLAT(2.0f / 15.0f), VSPLAT(-1.0f / 3.0f));
  s = VFMA(wasm_f32x4_mul(s, x2), ax, ax);
  t = wasm_v128_bitselect(s, t, wasm_f32x4_lt(ax, VSPLAT(0.0625f)));
  return wasm_v128_or(t, wasm_v128_and(x, wasm_i32x4_splat((int)0x80000000)));
}

/* Fused activations (the epilogue of conv/gemm/elementwise kernels). */
enum { ACT_NONE = 0, ACT_RELU, ACT_CLIP, ACT_HARDSIGMOID, ACT_HARDSWISH, ACT_SIGMOID, ACT_LEAKYRELU,
       ACT_TANH, ACT_SILU };
typedef struct { int kind; float a, b; } Act;

INLINE v128_t act_apply(v128_t x, Act act) {
  switch (act.kind) {
    case ACT_RELU: return VMAX(x, wasm_f32x4_const_splat(0.0f));
    case ACT_CLIP: return VMIN(VMAX(x, VSPLAT(act.a)), VSPLAT(act.b));
    case ACT_HARDSIGMOID:
      return VMIN(VMAX(VFMA(x, VSPLAT(act.a), VSPLAT(act.b)), wasm_f32x4_const_splat(0.0f)),
                  wasm_f32x4_const_splat(1.0f));
    case ACT_HARDSWISH: {
      v128_t g = VMIN(VMAX(VFMA(x, VSPLAT(1.0f / 6.0f), VSPLAT(0.5f)), wasm_f32x4_const_splat(0.0f)),
                      wasm_f32x4_const_splat(1.0f));
      return wasm_f32x4_mul(x, g);
    }
    case ACT_SIGMOID: return v_sigmoid(x);
    case ACT_LEAKYRELU:
      return wasm_v128_bitselect(x, wasm_f32x4_mul(x, VSPLAT(act.a)), wasm_f32x4_ge(x, VSPLAT(0.0f)));
    case ACT_TANH: return v_tanh(x);
    case ACT_SILU: return wasm_f32x4_div(x, v_gate_denominator(x));  /* x sigmoid(x): YOLO convs end in it */
    default: return x;
  }
}

/* CALL(a) with a's kind a constant in the common cases (none, ReLU, clip, SiLU): a kernel body inlined into
 * each case gets its epilogue's act_apply folded to the activation's instructions, not a switch per
 * vector (measured on int8 MobileNetV2: 3.5% fewer instructions from the qs8 GEMM alone). */
#define ACT_SPECIALIZED(act, CALL) do {                      \
    switch ((act).kind) {                                    \
      case ACT_NONE: CALL(((Act){ACT_NONE, 0.0f, 0.0f})); break; \
      case ACT_RELU: CALL(((Act){ACT_RELU, 0.0f, 0.0f})); break; \
      case ACT_CLIP: CALL(((Act){ACT_CLIP, (act).a, (act).b})); break; \
      case ACT_SILU: CALL(((Act){ACT_SILU, 0.0f, 0.0f})); break; \
      default: CALL(act);                                    \
    }                                                        \
  } while (0)

/* Apply an activation in place over n floats (used when it cannot be fused into a producer). */
KERNEL void f32_act(float* x, int n, Act act) {
  int i = 0;
  for (; i + 4 <= n; i += 4) VSTORE(x + i, act_apply(VLOAD(x + i), act));
  if (i < n) {
    float t[4] = {0, 0, 0, 0};
    for (int j = 0; i + j < n; j++) t[j] = x[i + j];
    v128_t r = act_apply(VLOAD(t), act);
    VSTORE(t, r);
    for (int j = 0; i + j < n; j++) x[i + j] = t[j];
  }
}
