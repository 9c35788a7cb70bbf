/* A whole decode step of a Llama-family model for a few rows on the CPU, fp32, in one call.
 *
 * Built and loaded by backends/torch/cpu_decode.py (gcc -O3 -march=native -fopenmp, called through ctypes).
 * Linked against libgomp, it runs on the OpenMP runtime torch already loaded, so torch.set_num_threads()
 * of the calling thread sets its thread count too.
 *
 * Why: batch-1 decode reads every weight once per token; MKL's sgemv reaches 12-17 GB/s on this model's
 * narrow matrices on one core and does not split them over threads, while a plain read runs at ~25 GB/s a
 * core. Here each matrix is read once, sequentially per thread (a column range of the stored [in, out]
 * layout, no repacking, no extra memory), the accumulators stay in L1, and the step is one OpenMP parallel
 * region (4 barriers per layer) instead of ~130 aten ops per layer.
 *
 * Per layer, for B decode rows (every row its own sequence over the paged KV cache):
 *   xn = rmsnorm(h)                          each thread, redundantly (E floats a row)
 *   qkv[:, cols_t] = xn @ Wqkv[:, cols_t]    column split                                   | barrier
 *   per (row, query head) unit: RoPE on q and k, the new k/v into the cache at the row's slot (the
 *   group's first head), softmax(q k^T / sqrt(D)) v over the row's blocks (no gather copy)  | barrier
 *   h[:, cols_t] += attn @ Wo[:, cols_t]                                                    | barrier
 *   xn = rmsnorm(h); act[:, cols_t] = silu(xn @ Wg[:, cols_t]) * (xn @ Wu[:, cols_t])       | barrier
 *   h[:, cols_t] += act @ Wd[:, cols_t]                                                     | barrier
 * then logits[:, cols_t] = rmsnorm(h) @ head[:, cols_t].
 *
 * From GEMM_MIN_ROWS (5) rows on, the same step with compute-bound parts: the products are register-blocked
 * GEMMs (gemm_cols: 8 rows x 32 columns of accumulators), attention runs per (row, KV head) unit (RoPE, the KV
 * store and the g query heads over the cached rows, read once), and with head = 0 the caller applies the
 * output head to the returned rmsnorm(h). Up to 4 rows the code above runs unchanged (the same bits).
 *
 * The operation order of RMSNorm and RoPE is torch's (model.py): x * rsqrt(mean(x^2) + eps) * w and
 * x * cos + rotate(x) * signed_sin. Matmuls and attention sum in another order than MKL / SDPA: logits
 * differ from the torch path by float rounding (~1e-5), tests/backends/torch/test_cpu_decode.py bounds it.
 */
#include <math.h>
#include <omp.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

typedef struct {
  int num_layers, hidden, inter, num_heads, num_kv_heads, head_dim, vocab, block_size, max_positions;
  long num_blocks;              /* blocks in a layer's cache */
  float eps;
  const float *const *qkv;      /* per layer [E, (H + 2 Hkv) D] */
  const float *const *o;        /* per layer [H D, E] */
  const float *const *gate_up;  /* per layer [E, 2 I]: gate | up */
  const float *const *down;     /* per layer [I, E] */
  const float *const *norm_in;  /* per layer [E] */
  const float *const *norm_post;
  const float *norm_final;      /* [E] */
  const float *embed_t;         /* [E, V] */
  const float *head_t;          /* [E, V] */
  float *const *kv;             /* per layer [2, num_blocks, block_size, Hkv, D] */
  long kv_half;                 /* elements from K to V in a layer's cache: num_blocks * block_size * Hkv * D */
  const float *rope;            /* [2, max_positions, D]: cos | sin with its first half negated */
} zoo_model;

#define ACC_FLOATS 4096 /* a thread's accumulators: 16 KiB, in L1 */
#define MAX_B 64         /* rows a call serves (column blocks of ACC_FLOATS / (2 MAX_B) = 32 floats) */
#define ALIGN 16        /* column ranges start on 64-byte boundaries */

/* floats of scratch a step of B rows over contexts of at most max_ctx tokens needs with nt threads */
long zoo_scratch_floats(const zoo_model *m, int B, int nt, int max_ctx) {
  const long E = m->hidden, D = m->head_dim, H = m->num_heads, Hkv = m->num_kv_heads;
  const long qkv = (H + 2 * Hkv) * D;
  long shared = B * (E + qkv + H * D + m->inter);
  long per_thread = B * E + 2 * ACC_FLOATS + (H + 1) * D + (H / Hkv) * (long)max_ctx;
  return shared + nt * (per_thread + 16) + 64;
}

static inline void cols_of(int n, int nt, int t, int *c0, int *c1) {
  int per = ((n + nt - 1) / nt + ALIGN - 1) & ~(ALIGN - 1);
  int a = t * per, b = a + per;
  *c0 = a < n ? a : n;
  *c1 = b < n ? b : n;
}

/* acc[b, 0:n] += x[b, 0:K] @ W[0:K, 0:n] (W row stride ldw). Sixteen rows of W a pass (one accumulator load
 * and store per sixteen weight vectors), in column chunks that stay in L1 while every row b uses them.
 * Measured on one core over the model's shapes: 4 rows a pass 31 ms, 8 rows 29 ms, 16 rows 24 ms = a plain
 * read of the same bytes (24 ms); 24 or 32 rows spill registers and collapse. */
#define ROWS 16
#define CHUNK 128
static void gemv_acc(const float *restrict W, long ldw, const float *restrict x, long ldx, int B, int K,
                     float *restrict acc, int ldacc, int n) {
  int i = 0;
  for (; i + ROWS <= K; i += ROWS) {
    const float *restrict w = W + (long)i * ldw;
    for (int j0 = 0; j0 < n; j0 += CHUNK) {
      const int j1 = j0 + CHUNK < n ? j0 + CHUNK : n;
      for (int b = 0; b < B; b++) {
        float a[ROWS];
        for (int r = 0; r < ROWS; r++) a[r] = x[b * ldx + i + r];
        float *restrict ab = acc + (long)b * ldacc;
#pragma omp simd
        for (int j = j0; j < j1; j++) {
          float s = ab[j];
          for (int r = 0; r < ROWS; r++) s += a[r] * w[r * ldw + j];
          ab[j] = s;
        }
      }
    }
  }
  for (; i < K; i++) {
    const float *restrict w0 = W + (long)i * ldw;
    for (int b = 0; b < B; b++) {
      const float a0 = x[b * ldx + i];
      float *restrict ab = acc + (long)b * ldacc;
#pragma omp simd
      for (int j = 0; j < n; j++) ab[j] += a0 * w0[j];
    }
  }
}

#include "cpu_decode_lora.h" /* LoRA rows: zoo_lora, shrink / expand */

/* y[b, c0:c1] = (add ? y[b, c0:c1] : 0) + x[b] @ W[:, c0:c1], in column blocks that fit the accumulators */
static void gemm_cols(const float *W, int N, const float *x, long ldx, int B, int K, float *y, long ldy, int c0,
                      int c1, int add);
static void gate_up_gemm(const float *W, int I, const float *x, long ldx, int B, int K, float *act, int c0, int c1,
                         float *tmp);
#define GEMM_MIN_ROWS 5

static void gemv_cols(const float *W, int N, const float *x, long ldx, int B, int K, float *y, long ldy, int c0,
                      int c1, int add, float *acc) {
  if (B >= GEMM_MIN_ROWS) {
    gemm_cols(W, N, x, ldx, B, K, y, ldy, c0, c1, add);
    return;
  }
  const int blk = (ACC_FLOATS / B) & ~(ALIGN - 1);
  for (int c = c0; c < c1; c += blk) {
    const int n = c1 - c < blk ? c1 - c : blk;
    for (int b = 0; b < B; b++) {
      if (add)
        memcpy(acc + (long)b * blk, y + b * ldy + c, n * sizeof(float));
      else
        memset(acc + (long)b * blk, 0, n * sizeof(float));
    }
    gemv_acc(W + c, N, x, ldx, B, K, acc, blk, n);
    for (int b = 0; b < B; b++) memcpy(y + b * ldy + c, acc + (long)b * blk, n * sizeof(float));
  }
}

/* act[b, c0:c1] = silu(x @ Wg[:, c]) * (x @ Wu[:, c]); gate_up is [K, 2I] */
static void gate_up_cols(const float *W, int I, const float *x, long ldx, int B, int K, float *act, int c0, int c1,
                         float *acc) {
  if (B >= GEMM_MIN_ROWS) {
    gate_up_gemm(W, I, x, ldx, B, K, act, c0, c1, acc);
    return;
  }
  const int blk = (ACC_FLOATS / (2 * B)) & ~(ALIGN - 1);
  float *up = acc + (long)B * blk;
  for (int c = c0; c < c1; c += blk) {
    const int n = c1 - c < blk ? c1 - c : blk;
    memset(acc, 0, 2 * (long)B * blk * sizeof(float));
    gemv_acc(W + c, 2L * I, x, ldx, B, K, acc, blk, n);
    gemv_acc(W + I + c, 2L * I, x, ldx, B, K, up, blk, n);
    for (int b = 0; b < B; b++) {
      float *g = acc + (long)b * blk, *u = up + (long)b * blk, *out = act + (long)b * I + c;
      for (int j = 0; j < n; j++) out[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
    }
  }
}

static void rmsnorm(const float *restrict x, const float *restrict w, float *restrict out, int E, float eps) {
  float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
  for (int e = 0; e < E; e++) ss += x[e] * x[e];
  const float inv = 1.0f / sqrtf(ss / (float)E + eps);
  for (int e = 0; e < E; e++) out[e] = (x[e] * inv) * w[e];
}

/* half-split RoPE: out = x * cos + cat(x[h:], x[:h]) * signed_sin */
static void rope(const float *restrict x, const float *restrict cs, const float *restrict sn, float *restrict out,
                 int D) {
  const int h = D / 2;
  for (int j = 0; j < h; j++) out[j] = x[j] * cs[j] + x[j + h] * sn[j];
  for (int j = h; j < D; j++) out[j] = x[j] * cs[j] + x[j - h] * sn[j];
}

/* e^x for x <= 0 (softmax after subtracting the max), vectorizable: x = n ln2 + r, |r| <= ln2 / 2, e^r by its
 * degree-6 Taylor polynomial (relative error < 2e-7, about one float ulp), 2^n through the exponent bits.
 * Cody & Waite's range reduction as in Cephes expf (S. Moshier), here written from the textbook form. */
static inline float exp_reduced(float x, float n) {
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f; /* ln2 = 0.693359375 - 2.12194440e-4 */
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  union { float f; int i; } two_n = {.i = ((int)n + 127) << 23};
  return p * two_n.f;
}

static inline float exp_nonpos(float x) {
  x = x < -87.0f ? -87.0f : x;
  return exp_reduced(x, __builtin_roundf(x * 1.44269504088896341f));
}

/* the same with n rounded to nearest even (one vector instruction; roundf is a libm call that keeps the loop
 * scalar): equal to exp_nonpos except where x log2(e) is exactly halfway between integers */
static inline float exp_nonpos_rint(float x) {
  x = x < -87.0f ? -87.0f : x;
  return exp_reduced(x, __builtin_rintf(x * 1.44269504088896341f));
}

/* one row's attention for one query head: q, the new token's k and v (q and k rotated) and the cache holding
 * its past = seq_len - 1 earlier tokens (K, V point at this KV head's first element; table: the row's blocks),
 * walked block by block */
static void attend(const zoo_model *m, const float *K, const float *V, const long *table, int seq_len,
                   const float *restrict q, const float *restrict k_new, const float *restrict v_new,
                   float *restrict out, float *restrict scores) {
  const int D = m->head_dim, bs = m->block_size, past = seq_len - 1;
  const long tok = (long)m->num_kv_heads * D, blk = bs * tok;
  const float scale = 1.0f / sqrtf((float)D);
  for (int t0 = 0, j = 0; t0 < past; t0 += bs, j++) {
    const float *kb = K + table[j] * blk;
    const int n = past - t0 < bs ? past - t0 : bs;
    for (int o = 0; o < n; o++) {
      const float *k = kb + o * tok;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int d = 0; d < D; d++) s += q[d] * k[d];
      scores[t0 + o] = s * scale;
    }
  }
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int d = 0; d < D; d++) s += q[d] * k_new[d];
  scores[past] = s * scale;
  float mx = -INFINITY, sum = 0.0f;
  for (int t = 0; t < seq_len; t++) mx = scores[t] > mx ? scores[t] : mx;
#pragma omp simd reduction(+ : sum)
  for (int t = 0; t < seq_len; t++) {
    scores[t] = exp_nonpos(scores[t] - mx);
    sum += scores[t];
  }
  const float inv = 1.0f / sum;
  for (int d = 0; d < D; d++) out[d] = scores[past] * inv * v_new[d];
  for (int t0 = 0, j = 0; t0 < past; t0 += bs, j++) {
    const float *vb = V + table[j] * blk;
    const int n = past - t0 < bs ? past - t0 : bs;
    for (int o = 0; o < n; o++) {
      const float *v = vb + o * tok, p = scores[t0 + o] * inv;
#pragma omp simd
      for (int d = 0; d < D; d++) out[d] += p * v[d];
    }
  }
}

/* one (row, KV head) unit: its g query heads (qb: g * D floats) over the row's n cached tokens (K, V: this KV
 * head's first element of the layer's K and V; tok: floats between tokens) into ob (g * D floats); sc: g * n
 * floats. Inlined with D a constant where it is one (64, 128): the head's accumulators stay in registers. */
static inline __attribute__((always_inline)) void attend_unit(const float *restrict qb, const float *K,
                                                             const float *V, const long *table, int n, int bs,
                                                             long tok, int g, const int D, float scale,
                                                             float *restrict sc, float *restrict ob) {
  const long blk = bs * tok;
  for (int h = 0; h < g; h++) {
    const float *restrict qh = qb + (long)h * D;
    float *restrict sh = sc + (long)h * n;
    for (int t0 = 0, j = 0; t0 < n; t0 += bs, j++) {
      const float *kb = K + table[j] * blk;
      const int m = n - t0 < bs ? n - t0 : bs;
      for (int o = 0; o < m; o++) {
        const float *restrict k = kb + o * tok;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int d = 0; d < D; d++) s += qh[d] * k[d];
        sh[t0 + o] = s * scale;
      }
    }
    float mx = -INFINITY, sum = 0.0f;
    for (int i = 0; i < n; i++) mx = sh[i] > mx ? sh[i] : mx;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < n; i++) {
      sh[i] = exp_nonpos_rint(sh[i] - mx);
      sum += sh[i];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int i = 0; i < n; i++) sh[i] *= inv;
  }
  for (int h = 0; h < g; h++) {
    const float *restrict sh = sc + (long)h * n;
    float acc[D];
    for (int d = 0; d < D; d++) acc[d] = 0.0f;
    for (int t0 = 0, j = 0; t0 < n; t0 += bs, j++) {
      const float *vb = V + table[j] * blk;
      const int m = n - t0 < bs ? n - t0 : bs;
      for (int o = 0; o < m; o++) {
        const float *restrict v = vb + o * tok;
        const float p = sh[t0 + o];
#pragma omp simd
        for (int d = 0; d < D; d++) acc[d] += p * v[d];
      }
    }
    memcpy(ob + (long)h * D, acc, D * sizeof(float));
  }
}

#include "cpu_decode_gemm.h" /* the register-blocked products: micro, gemm_block, gemm_cols, gate_up_gemm */

/* The step's barrier: sense-reversing on one atomic counter; a waiting thread spins briefly, then yields its
 * core. libgomp's own barrier spins up to ~300k pauses before it sleeps: on a machine shared with other
 * processes a descheduled peer made every one of a step's ~120 barriers burn milliseconds (measured: a 2-thread
 * step took 15x a 1-thread one at load 8; thread_choice.py then also picks 1 thread). */
typedef struct {
  atomic_int arrived;
  atomic_int sense;
} step_barrier;

#define SPINS_BEFORE_YIELD 4000

static void barrier_wait(step_barrier *bar, int nt, int *my_sense) {
  if (nt == 1) return;
  const int s = !*my_sense;
  *my_sense = s;
  if (atomic_fetch_add_explicit(&bar->arrived, 1, memory_order_acq_rel) == nt - 1) {
    atomic_store_explicit(&bar->arrived, 0, memory_order_relaxed);
    atomic_store_explicit(&bar->sense, s, memory_order_release);
    return;
  }
  for (int spins = 0; atomic_load_explicit(&bar->sense, memory_order_acquire) != s;) {
    if (++spins < SPINS_BEFORE_YIELD)
      __builtin_ia32_pause();
    else
      sched_yield();
  }
}

/* head = HEAD_PANELS: m->head_t holds the output head in column panels, [ceil(V / 32), E, 32] (panel p = columns
 * 32p .. 32p + 31 of the [E, V] head, row-major, the last zero-padded): each panel streams contiguously through
 * gemm_block's micro-kernel, the blocked layout oneDNN's packed weight gives the torch runner. The JAX runner
 * uses it for its padded steps of more rows (XLA's dot over the [E, V] head cost ~1.6x oneDNN's CPU time). */
#define HEAD_PANELS 2

/* B decode rows: token ids, positions (the new token's), block tables [B, W] (row-major, width W: the new
 * token's K/V goes to slot table[pos / bs] * bs + pos % bs) and the step's logits [B, V]; every row attends
 * over its positions 0..pos[b]. head = 0: the final RMSNorm's output [B, E] in place of the logits (the caller
 * runs the output head: oneDNN's packed product streams its 113 MB faster for many rows); head = 1: the logits
 * through m->head_t [E, V]; head = HEAD_PANELS: the logits through the panel-packed head above. nt threads.
 * Returns 0, or < 0 (nothing computed) for bad input. */
static int decode_step(const zoo_model *m, const zoo_lora *lora, int B, const long *tokens, const long *pos,
                       const long *tables, int W, float *logits, float *scratch, long scratch_floats, int nt,
                       int head) {
  const int E = m->hidden, I = m->inter, H = m->num_heads, Hkv = m->num_kv_heads, D = m->head_dim;
  const int g = H / Hkv, QKV = (H + 2 * Hkv) * D, V = m->vocab;
  int max_ctx = 0;
  for (int b = 0; b < B; b++) {
    if (pos[b] < 0 || pos[b] >= m->max_positions || tokens[b] < 0 || tokens[b] >= V) return -1;
    if (pos[b] / m->block_size >= W) return -2;
    for (long j = 0; j <= pos[b] / m->block_size; j++)
      if (tables[b * W + j] < 0 || tables[b * W + j] >= m->num_blocks) return -2;
    if (pos[b] + 1 > max_ctx) max_ctx = (int)pos[b] + 1;
  }
  if (B < 1 || B > MAX_B || nt < 1 || head < 0 || head > HEAD_PANELS) return -1;
  if (zoo_scratch_floats(m, B, nt, max_ctx) > scratch_floats) return -3;
  if (lora) {
    if (lora->rank < 1 || lora->num_slots < 1) return -4;
    for (int b = 0; b < B; b++)
      if (lora->row_slot[b] < -1 || lora->row_slot[b] >= lora->num_slots) return -4;
  }
  const int qkv_cols[4] = {0, H * D, (H + Hkv) * D, QKV}, e_cols[2] = {0, E};
  float *hidden = scratch, *qkv = hidden + (long)B * E, *attn = qkv + (long)B * QKV, *act = attn + (long)B * H * D;
  float *thread_base = act + (long)B * I;
  const long per_thread = (long)B * E + 2 * ACC_FLOATS + (H + 1L) * D + (long)g * max_ctx + 16;

  step_barrier bar;
  atomic_init(&bar.arrived, 0);
  atomic_init(&bar.sense, 0);
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    int sense = 0;
    float *mine = thread_base + (((long)t * per_thread + 15) & ~15L);
    float *xn = mine, *acc = xn + (long)B * E, *qrot = acc + 2 * ACC_FLOATS, *krot = qrot + (long)H * D;
    float *scores = krot + D;
    int c0, c1;
    float *lt = lora ? lora->work : 0; /* t and the gate | up deltas: shared (cpu_decode_lora.h) */
    float *gu = lora ? lora->work + lora_t_floats(B, lora->rank) : 0;
    lora_ctx lc = {lora, 0, B, 0, lt};
#define LORA_GROUP(g, first, n_mod, in, x, ldx, begin, y, ldy, c0, c1)                                          \
  if (lora) { /* this thread's rows of t, a barrier, its columns of the deltas */                              \
    lora_shrink(lora, l, g, n_mod, in, x, ldx, B, lt, t, T);                                                   \
    barrier_wait(&bar, T, &sense);                                                                             \
    lc.layer = l, lc.nR = (n_mod) * lora->rank;                                                                \
    lora_add_cols(&lc, first, n_mod, begin, y, ldy, c0, c1);                                                   \
  }

    /* embedding rows: hidden[b, e] = embed_t[e, token] */
    cols_of(E, T, t, &c0, &c1);
    for (int b = 0; b < B; b++)
      for (int e = c0; e < c1; e++) hidden[(long)b * E + e] = m->embed_t[(long)e * V + tokens[b]];
    barrier_wait(&bar, T, &sense);

    for (int l = 0; l < m->num_layers; l++) {
      for (int b = 0; b < B; b++) rmsnorm(hidden + (long)b * E, m->norm_in[l], xn + (long)b * E, E, m->eps);
      cols_of(QKV, T, t, &c0, &c1);
      gemv_cols(m->qkv[l], QKV, xn, E, B, E, qkv, QKV, c0, c1, 0, acc);
      LORA_GROUP(0, 0, 3, E, xn, E, qkv_cols, qkv, QKV, c0, c1);
      barrier_wait(&bar, T, &sense);
      float *K = m->kv[l], *Vc = m->kv[l] + m->kv_half;
      if (B >= GEMM_MIN_ROWS) { /* one unit per (row, KV head): its g query heads read each K/V row once */
        const long tok = (long)Hkv * D;
        const float scale = 1.0f / sqrtf((float)D);
        for (int u = t; u < B * Hkv; u += T) {
          const int b = u / Hkv, kh = u % Hkv;
          const float *cs = m->rope + pos[b] * D, *sn = m->rope + ((long)m->max_positions + pos[b]) * D;
          const float *row = qkv + (long)b * QKV;
          const long *table = tables + (long)b * W;
          const long slot = table[pos[b] / m->block_size] * m->block_size + pos[b] % m->block_size;
          rope(row + (H + kh) * D, cs, sn, krot, D);
          memcpy(K + slot * tok + (long)kh * D, krot, D * sizeof(float));
          memcpy(Vc + slot * tok + (long)kh * D, row + (H + Hkv + kh) * D, D * sizeof(float));
          for (int h = 0; h < g; h++) rope(row + (kh * g + h) * D, cs, sn, qrot + h * D, D);
          float *ob = attn + (long)b * H * D + (long)kh * g * D;
          const int n = (int)pos[b] + 1;
          if (D == 64)
            attend_unit(qrot, K + kh * D, Vc + kh * D, table, n, m->block_size, tok, g, 64, scale, scores, ob);
          else
            attend_unit(qrot, K + kh * D, Vc + kh * D, table, n, m->block_size, tok, g, D, scale, scores, ob);
        }
      } else
      for (int u = t; u < B * H; u += T) { /* one unit per (row, query head) */
        const int b = u / H, h = u % H, kh = h / g;
        const float *cs = m->rope + pos[b] * D, *sn = m->rope + ((long)m->max_positions + pos[b]) * D;
        const float *row = qkv + (long)b * QKV, *v_new = row + (H + Hkv + kh) * D;
        const long *table = tables + (long)b * W;
        rope(row + h * D, cs, sn, qrot, D);
        rope(row + (H + kh) * D, cs, sn, krot, D);
        if (h % g == 0) { /* the group's first head stores the new K/V; the others take them from krot/v_new */
          const long slot = table[pos[b] / m->block_size] * m->block_size + pos[b] % m->block_size;
          memcpy(K + slot * Hkv * D + (long)kh * D, krot, D * sizeof(float));
          memcpy(Vc + slot * Hkv * D + (long)kh * D, v_new, D * sizeof(float));
        }
        attend(m, K + (long)kh * D, Vc + (long)kh * D, table, (int)pos[b] + 1, qrot, krot, v_new,
               attn + (long)b * H * D + (long)h * D, scores);
      }
      barrier_wait(&bar, T, &sense);
      cols_of(E, T, t, &c0, &c1);
      gemv_cols(m->o[l], E, attn, (long)H * D, B, H * D, hidden, E, c0, c1, 1, acc);
      LORA_GROUP(1, 3, 1, H * D, attn, (long)H * D, e_cols, hidden, E, c0, c1);
      barrier_wait(&bar, T, &sense);
      for (int b = 0; b < B; b++) rmsnorm(hidden + (long)b * E, m->norm_post[l], xn + (long)b * E, E, m->eps);
      cols_of(I, T, t, &c0, &c1);
      if (lora) { /* the gate | up products into the shared gu, the deltas added there, then silu(gate) * up */
        const int gu_cols[3] = {0, I, 2 * I};
        gemv_cols(m->gate_up[l], 2 * I, xn, E, B, E, gu, 2L * I, c0, c1, 0, acc);
        gemv_cols(m->gate_up[l], 2 * I, xn, E, B, E, gu, 2L * I, I + c0, I + c1, 0, acc);
        LORA_GROUP(2, 4, 2, E, xn, E, gu_cols, gu, 2L * I, c0, c1);
        lora_add_cols(&lc, 4, 2, gu_cols, gu, 2L * I, I + c0, I + c1);
        silu_mul_cols(gu, I, B, act, c0, c1, B >= GEMM_MIN_ROWS);
      } else {
        gate_up_cols(m->gate_up[l], I, xn, E, B, E, act, c0, c1, acc);
      }
      barrier_wait(&bar, T, &sense);
      cols_of(E, T, t, &c0, &c1);
      gemv_cols(m->down[l], E, act, I, B, I, hidden, E, c0, c1, 1, acc);
      LORA_GROUP(3, 6, 1, I, act, I, e_cols, hidden, E, c0, c1);
      barrier_wait(&bar, T, &sense);
    }
    for (int b = 0; b < B; b++) rmsnorm(hidden + (long)b * E, m->norm_final, xn + (long)b * E, E, m->eps);
    if (head == HEAD_PANELS) { /* head_t packed in panels [P, E, 32]: each thread a range of whole panels */
      const int P = (V + 31) / 32, p0 = (int)((long)P * t / T), p1 = (int)((long)P * (t + 1) / T);
      for (int p = p0; p < p1; p++) {
        const float *panel = m->head_t + (long)p * E * 32;
        const int n = V - 32 * p < 32 ? V - 32 * p : 32;
        gemm_block(panel, 32, xn, E, B, E, logits + 32L * p, V, n, 0, p + 1 < p1 ? panel + (long)E * 32 : 0);
      }
    } else if (head) {
      cols_of(V, T, t, &c0, &c1);
      gemv_cols(m->head_t, V, xn, E, B, E, logits, V, c0, c1, 0, acc);
    } else if (t == 0) {
      memcpy(logits, xn, (size_t)B * E * sizeof(float));
    }
  }
#undef LORA_GROUP
  return 0;
}

int zoo_decode_step(const zoo_model *m, int B, const long *tokens, const long *pos, const long *tables, int W,
                    float *logits, float *scratch, long scratch_floats, int nt, int head) {
  return decode_step(m, 0, B, tokens, pos, tables, W, logits, scratch, scratch_floats, nt, head);
}

/* zoo_decode_step with LoRA rows (lora->row_slot[b] >= 0), their deltas added after each base product;
 * -4: a slot out of range. lora->work: zoo_lora_work_floats(B, nt, lora->rank) floats. */
int zoo_decode_step_lora(const zoo_model *m, const zoo_lora *lora, int B, const long *tokens, const long *pos,
                         const long *tables, int W, float *logits, float *scratch, long scratch_floats, int nt,
                         int head) {
  return decode_step(m, lora, B, tokens, pos, tables, W, logits, scratch, scratch_floats, nt, head);
}

/* y[B, N] = (add ? y : 0) + x[B, K] @ W[K, N] alone, columns split over nt threads: the step's matrix-vector
 * product, for benchmarks (bench/fastpath.py) and tests */
void zoo_gemv(const float *W, int K, int N, const float *x, int B, float *y, int add, int nt) {
  if (B < 1 || B > MAX_B || nt < 1) return;
#pragma omp parallel num_threads(nt)
  {
    float acc[ACC_FLOATS] __attribute__((aligned(64)));
    int c0, c1;
    cols_of(N, omp_get_num_threads(), omp_get_thread_num(), &c0, &c1);
    gemv_cols(W, N, x, K, B, K, y, N, c0, c1, add, acc);
  }
}

/* ---- decode attention alone, for the torch path's larger batches (cpu_attention.py) ----------------------
 * B decode rows, each attending over positions 0..seq_lens[b]-1 of its own blocks (tables[b, :]) in one
 * layer's cache [2, num_blocks, block_size, Hkv, D] (the new token's K/V already stored). One unit of work is
 * a (row, KV head): its g = H / Hkv query heads read each cached K and V row once, in place (no gather copy,
 * no padding to the batch's longest context). Two passes per unit: scores = q k^T / sqrt(D) into the thread's
 * scratch, softmax, then out = p v. A unit runs on one thread start to end, so the bits do not depend on the
 * thread count. Replaces GatherSDPABackend's gather + SDPA for decode rows: profiled at ~30% of a batch-32
 * SmolLM2 step (2.6 ms an SDPA call, 1.5 ms a gather). */

long zoo_attn_scratch_floats(int H, int Hkv, int nt, int max_ctx) {
  return (long)nt * ((long)(H / Hkv) * max_ctx + 16) + 16;
}

/* q: row b's H heads at q + b * ldq (head-major, D each); out: row b's [H * D] at out + b * ldo.
 * Returns 0, or < 0 (nothing computed) for bad input. */
int zoo_paged_decode_attention(const float *q, long ldq, const float *kv, long kv_half, long num_blocks, int bs,
                               int H, int Hkv, int D, const long *tables, int W, const long *seq_lens, int B,
                               float *out, long ldo, float *scratch, long scratch_floats, int nt) {
  if (B < 1 || nt < 1 || bs < 1 || Hkv < 1 || H % Hkv != 0 || D < 1) return -1;
  int max_ctx = 0;
  for (int b = 0; b < B; b++) {
    const long n = seq_lens[b];
    if (n < 1 || n > (long)W * bs) return -2;
    for (long j = 0; j < (n + bs - 1) / bs; j++)
      if (tables[(long)b * W + j] < 0 || tables[(long)b * W + j] >= num_blocks) return -2;
    if (n > max_ctx) max_ctx = (int)n;
  }
  if (zoo_attn_scratch_floats(H, Hkv, nt, max_ctx) > scratch_floats) return -3;
  const int g = H / Hkv;
  const long tok = (long)Hkv * D, per_thread = (long)g * max_ctx + 16;
  const float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    float *restrict sc = scratch + (((long)t * per_thread + 15) & ~15L);
    for (int u = t; u < B * Hkv; u += T) {
      const int b = u / Hkv, kh = u % Hkv, n = (int)seq_lens[b];
      const float *K = kv + (long)kh * D, *V = kv + kv_half + (long)kh * D;
      const float *qb = q + (long)b * ldq + (long)kh * g * D;
      float *ob = out + (long)b * ldo + (long)kh * g * D;
      const long *table = tables + (long)b * W;
      if (D == 64)
        attend_unit(qb, K, V, table, n, bs, tok, g, 64, scale, sc, ob);
      else if (D == 128)
        attend_unit(qb, K, V, table, n, bs, tok, g, 128, scale, sc, ob);
      else
        attend_unit(qb, K, V, table, n, bs, tok, g, D, scale, sc, ob);
    }
  }
  return 0;
}
