/* Part of cpu_decode.c (included once, in place): the register-blocked products used from GEMM_MIN_ROWS rows on.
 * Not a standalone header. */
/* ---- more rows: a register-blocked matrix product ----------------------------------------------------------
 * From GEMM_MIN_ROWS rows on, the weights are reused across rows enough that the product is compute-bound: the
 * broadcast-and-accumulate loop above is load-bound there (one L1 load per FMA). Here a block of RB rows x 32
 * columns keeps its 2 RB accumulator vectors in registers for the whole K loop (16 of AVX-512's 32 at RB = 8),
 * each k loads two weight vectors and RB broadcasts of x: the classic outer-product micro-kernel (Goto & van
 * de Geijn, "Anatomy of high-performance matrix multiplication", ACM TOMS 2008), over the stored [in, out]
 * weights as they are (no packing). Each output sums k = 0..K-1 in order in one accumulator, then adds y: the
 * bits do not depend on how columns are split over threads. */
#if defined(__AVX512F__)
#define RB 8
#else
#define RB 4
#endif
typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));

/* y[0:rb, 0:nv*16] (=, or += with add) x[0:rb, 0:K] @ W[0:K, 0:nv*16]; nv = 1 or 2 vectors of columns.
 * pf: the next block's columns (prefetched while this block streams its panel), or NULL */
static inline __attribute__((always_inline)) void micro(const float *restrict W, long ldw, const float *restrict x,
                                                        long ldx, int K, const int rb, const int nv,
                                                        float *restrict y, long ldy, int add, const float *pf) {
  v16 acc[RB][2];
#pragma GCC unroll 8
  for (int r = 0; r < rb; r++) acc[r][0] = acc[r][1] = (v16){0};
  for (int k = 0; k < K; k++) {
    const float *w = W + (long)k * ldw;
    if (pf) {
      __builtin_prefetch(pf + (long)k * ldw);
      __builtin_prefetch(pf + (long)k * ldw + 16);
    }
    const v16 w0 = *(const v16u *)w;
    const v16 w1 = nv == 2 ? *(const v16u *)(w + 16) : (v16){0};
#pragma GCC unroll 8
    for (int r = 0; r < rb; r++) {
      const float a = x[(long)r * ldx + k];
      acc[r][0] += a * w0;
      if (nv == 2) acc[r][1] += a * w1;
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < rb; r++) {
    for (int v = 0; v < nv; v++) {
      v16u *out = (v16u *)(y + (long)r * ldy + 16 * v);
      *out = add ? *out + acc[r][v] : acc[r][v];
    }
  }
}

/* y[0:B, 0:n] (=, or += with add) x[0:B, 0:K] @ W[0:K, 0:n], n <= 32 columns: rows in blocks of RB */
static void gemm_block(const float *W, long ldw, const float *x, long ldx, int B, int K, float *y, long ldy, int n,
                       int add, const float *pf) {
  if (n == 32 || n == 16) {
    const int nv = n / 16;
    int r = 0;
    for (; r + RB <= B; r += RB) {
      const float *xr = x + (long)r * ldx;
      float *yr = y + (long)r * ldy;
      if (nv == 2)
        micro(W, ldw, xr, ldx, K, RB, 2, yr, ldy, add, pf);
      else
        micro(W, ldw, xr, ldx, K, RB, 1, yr, ldy, add, pf);
    }
    for (; r < B; r++) { /* leftover rows one at a time */
      if (nv == 2)
        micro(W, ldw, x + (long)r * ldx, ldx, K, 1, 2, y + (long)r * ldy, ldy, add, 0);
      else
        micro(W, ldw, x + (long)r * ldx, ldx, K, 1, 1, y + (long)r * ldy, ldy, add, 0);
    }
    return;
  }
  for (int b = 0; b < B; b++) /* a last few columns */
    for (int j = 0; j < n; j++) {
      float s = 0.0f;
      for (int k = 0; k < K; k++) s += x[(long)b * ldx + k] * W[(long)k * ldw + j];
      y[(long)b * ldy + j] = add ? y[(long)b * ldy + j] + s : s;
    }
}

/* 1 / (1 + e^-x) from e^-|x| (never overflows), vectorizable: expf is a libm call per element, ~20% of a
 * batch-32 step's CPU time when it computed silu here */
static inline float sigmoid(float x) {
  const float e = exp_nonpos_rint(x < 0.0f ? x : -x);
  const float r = 1.0f / (1.0f + e);
  return x < 0.0f ? e * r : r;
}

static inline int block_width(int left) { return left >= 32 ? 32 : left >= 16 ? 16 : left; }

/* y[:, c0:c1] (=, or += with add) x @ W[:, c0:c1] in 32-column blocks */
static void gemm_cols(const float *W, int N, const float *x, long ldx, int B, int K, float *y, long ldy, int c0,
                      int c1, int add) {
  for (int c = c0; c < c1;) {
    const int n = block_width(c1 - c);
    const float *pf = c + n < c1 ? W + c + n : 0;
    gemm_block(W + c, N, x, ldx, B, K, y + c, ldy, n, add, pf);
    c += n;
  }
}

/* act[:, c0:c1] = silu(x @ Wg[:, c]) * (x @ Wu[:, c]) in 32-column blocks; tmp: 2 * B * 32 floats */
static void gate_up_gemm(const float *W, int I, const float *x, long ldx, int B, int K, float *act, int c0, int c1,
                         float *tmp) {
  float *up = tmp + (long)B * 32;
  for (int c = c0; c < c1;) {
    const int n = block_width(c1 - c);
    gemm_block(W + c, 2L * I, x, ldx, B, K, tmp, 32, n, 0, W + I + c);
    gemm_block(W + I + c, 2L * I, x, ldx, B, K, up, 32, n, 0, c + n < c1 ? W + c + n : 0);
    for (int b = 0; b < B; b++) {
      const float *g = tmp + (long)b * 32, *u = up + (long)b * 32;
      float *out = act + (long)b * I + c;
#pragma omp simd
      for (int j = 0; j < n; j++) out[j] = g[j] * sigmoid(g[j]) * u[j];
    }
    c += n;
  }
}

/* act[b, c0:c1] = silu(gu[b, c]) * gu[b, I + c]: the LoRA path's gate_up, its products and deltas first summed in
 * the shared [B, 2I] buffer; silu as gate_up_gemm (from GEMM_MIN_ROWS rows) or gate_up_cols (fewer) computes it */
static void silu_mul_cols(const float *gu, int I, int B, float *act, int c0, int c1, int blocked) {
  for (int b = 0; b < B; b++) {
    const float *g = gu + (long)b * 2 * I, *u = g + I;
    float *out = act + (long)b * I;
    if (blocked) {
#pragma omp simd
      for (int j = c0; j < c1; j++) out[j] = g[j] * sigmoid(g[j]) * u[j];
    } else {
      for (int j = c0; j < c1; j++) out[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
    }
  }
}
