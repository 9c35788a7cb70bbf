/* Part of cpu_decode.c (included once, in place, by cpu_decode_lora.h): the LoRA rows' two products for the rows
 * of one slot run. Not a standalone header.
 *
 * shrink  t[r, 0:nR] = x[r, 0:K] @ A[0:K, 0:nR]    A: the group's A^T side by side, nR = R .. 3 R floats a row
 * expand  y[r, 0:n] += t[r, 0:R] @ B[0:R, 0:n]     B: one module's B (scaling folded in), row stride ldb
 *
 * Both stream an adapter's weights once per run of rows (a row per adapter at 32 adapters: every weight is used
 * once, the products are reads). Measured (micro-benchmark, one core of this 2-core EPYC) over 32 rank-16
 * adapters of SmolLM2 (all 7 modules, 30 layers, 307 MB of A, 319 MB of B): the generic broadcast loop
 * (gemv_acc) shrank at 8 GB/s (38 ms a step): its 16 columns a row of A made every output vector one chain of
 * dependent FMAs through the whole K loop. Here four partial sums (k mod 4) run four chains a vector: 18-19 GB/s
 * (16 ms), near a plain read of the same bytes (~23 GB/s).
 * The expand keeps gemv_acc's order of sums (y + t_0 b_0 + t_1 b_1 + ... per column) in blocks of 64
 * columns (four accumulators in registers over the R rows of B): 18 GB/s against its 15-16 GB/s (20 -> 17 ms).
 * Each row's result depends only on its inputs and its slot: not on the thread count, the other rows or how
 * the rows are split into runs. */
typedef float lv16 __attribute__((vector_size(64)));
typedef float lv16u __attribute__((vector_size(64), aligned(4)));

/* t[r, 0:16 nv] = x[r, 0:K] @ A[0:K, 0:16 nv] (A's row stride lda) for rb = 1 or 2 rows: four partial sums per
 * output vector (k mod 4), added as (p0 + p1) + (p2 + p3), then the last K mod 4 terms in order */
static inline __attribute__((always_inline)) void shrink_tile(const float *restrict A, long lda,
                                                              const float *restrict x, long ldx, int K, const int rb,
                                                              const int nv, float *restrict t, long ldt) {
  lv16 acc[2][4][3];
  for (int r = 0; r < rb; r++)
    for (int p = 0; p < 4; p++)
      for (int v = 0; v < nv; v++) acc[r][p][v] = (lv16){0};
  int k = 0;
  for (; k + 4 <= K; k += 4) {
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
      const float *w = A + (long)(k + p) * lda;
      lv16 wv[3];
      for (int v = 0; v < nv; v++) wv[v] = *(const lv16u *)(w + 16 * v);
      for (int r = 0; r < rb; r++) {
        const float a = x[(long)r * ldx + k + p];
        for (int v = 0; v < nv; v++) acc[r][p][v] += a * wv[v];
      }
    }
  }
  for (int r = 0; r < rb; r++)
    for (int v = 0; v < nv; v++) {
      lv16 s = (acc[r][0][v] + acc[r][1][v]) + (acc[r][2][v] + acc[r][3][v]);
      for (int kk = k; kk < K; kk++) s += x[(long)r * ldx + kk] * *(const lv16u *)(A + (long)kk * lda + 16 * v);
      *(lv16u *)(t + (long)r * ldt + 16 * v) = s;
    }
}

/* the same sums for columns c0..c1 (fewer than 16: a rank that is no multiple of 16), one float at a time */
static void shrink_tail(const float *A, long lda, const float *x, int K, float *t, int c0, int c1) {
  for (int c = c0; c < c1; c++) {
    float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int k = 0;
    for (; k + 4 <= K; k += 4)
      for (int q = 0; q < 4; q++) p[q] += x[k + q] * A[(long)(k + q) * lda + c];
    float s = (p[0] + p[1]) + (p[2] + p[3]);
    for (; k < K; k++) s += x[k] * A[(long)k * lda + c];
    t[c] = s;
  }
}

/* one row pair's (rb = 2) or row's columns: tiles of 48, 32, 16 columns, then the tail */
static inline __attribute__((always_inline)) void shrink_rows(const float *A, int nR, const float *x, long ldx,
                                                              int K, const int rb, float *t, long ldt) {
  int c = 0;
  for (; c + 48 <= nR; c += 48) shrink_tile(A + c, nR, x, ldx, K, rb, 3, t + c, ldt);
  if (c + 32 <= nR) shrink_tile(A + c, nR, x, ldx, K, rb, 2, t + c, ldt), c += 32;
  if (c + 16 <= nR) shrink_tile(A + c, nR, x, ldx, K, rb, 1, t + c, ldt), c += 16;
  for (int r = 0; r < rb && c < nR; r++) shrink_tail(A, nR, x + (long)r * ldx, K, t + (long)r * ldt, c, nR);
}

/* t[r] = x[r] @ A for the n rows of a run (row r at x + r ldx, t + r nR): pairs, their A read once */
static void shrink_run(const float *A, int nR, const float *x, long ldx, int n, int K, float *t) {
  int r = 0;
  for (; r + 2 <= n; r += 2) shrink_rows(A, nR, x + (long)r * ldx, ldx, K, 2, t + (long)r * nR, nR);
  if (r < n) shrink_rows(A, nR, x + (long)r * ldx, ldx, K, 1, t + (long)r * nR, nR);
}

/* y[r, 0:16 nv] += t[r, 0:R] @ Bm[0:R, 0:16 nv] for the run's rows: the block's R x 16 nv floats come from
 * memory for the first row, from L1 for the others */
static inline __attribute__((always_inline)) void expand_block(const float *restrict Bm, long ldb,
                                                               const float *restrict t, long ldt, int rows, int R,
                                                               float *restrict y, long ldy, const int nv) {
  for (int r = 0; r < rows; r++) {
    const float *tr = t + (long)r * ldt;
    float *yr = y + (long)r * ldy;
    lv16 acc[4];
    for (int v = 0; v < nv; v++) acc[v] = *(const lv16u *)(yr + 16 * v);
    for (int k = 0; k < R; k++) {
      const float a = tr[k], *w = Bm + (long)k * ldb;
      for (int v = 0; v < nv; v++) acc[v] += a * *(const lv16u *)(w + 16 * v);
    }
    for (int v = 0; v < nv; v++) *(lv16u *)(yr + 16 * v) = acc[v];
  }
}

/* y[r, 0:n] += t[r, 0:R] @ Bm[0:R, 0:n] for the rows < rows of a run, 64 columns a block */
static void expand_run(const float *Bm, long ldb, const float *t, long ldt, int rows, int R, float *y, long ldy,
                       int n) {
  int j = 0;
  for (; j + 64 <= n; j += 64) expand_block(Bm + j, ldb, t, ldt, rows, R, y + j, ldy, 4);
  for (; j + 16 <= n; j += 16) expand_block(Bm + j, ldb, t, ldt, rows, R, y + j, ldy, 1);
  for (; j < n; j++)
    for (int r = 0; r < rows; r++) {
      float s = y[(long)r * ldy + j];
      for (int k = 0; k < R; k++) s += t[(long)r * ldt + k] * Bm[(long)k * ldb + j];
      y[(long)r * ldy + j] = s;
    }
}
