/* Part of cpu_decode.c (included once, in place): the LoRA rows of zoo_decode_step_lora. Not a standalone header. */
/* ---- LoRA rows (zoo_decode_step_lora) ---------------------------------------------------------------------
 * Per row a device slot of backends/torch/lora_slots.py (or -1: the base model), its tensors read in place:
 * a[group] [layers, S, in, n R] (the group's A^T side by side), b[module] [layers, S, R, out] with the scaling
 * folded in (backends/lora_store.py). Groups: 0 qkv (q k v), 1 o, 2 gate_up (gate up), 3 down. After a group's
 * base product (its columns split over the threads), t = x A_s (n R floats a row) is split over the threads by
 * rows (lora_shrink: each thread a share of the rows with a slot, into the shared t, so each A is read once a
 * step), then after a barrier each thread adds t_j B_s,j to its own columns of each module's output j. With
 * LoRA rows the gate and up products go to a shared [B, 2I] buffer, get their deltas there, then silu * mul.
 * The products of a run of rows are cpu_decode_lora_k.h's. Punica's BGMV (Chen et al., "Punica: Multi-Tenant
 * LoRA Serving", 2023), per row.
 * Measured (32 rank-16 adapters on all 7 modules of SmolLM2, 625 MB of A and B a step, 1 thread, CPU time of
 * the step, shared machine): the LoRA part took ~60 ms before cpu_decode_lora_k.h (shrink ~35, expand ~20) and
 * ~33 ms after (shrink ~22, expand ~11), near a plain read of the same bytes here (~27 ms at 23 GB/s); the
 * gate | up products through the buffer measured ~5 ms a step faster than the fused gate_up_gemm. Before the
 * row split each thread recomputed every row's t (A read by both threads): the 32-adapter step cost more at 2
 * threads than at 1. Issuing the LoRA reads as prefetches from inside the base product (to overlap them with
 * its compute) measured no faster on this machine: a group's 2-9 MB does not stay in the shared L3 (a 4 MB
 * read after prefetching ran 3x faster, an 8 MB one 1.2x). */
#include "cpu_decode_lora_k.h"

typedef struct {
  int rank;                /* R: every slot's rank (zero-padded) */
  int num_slots;           /* S */
  const int *row_slot;     /* [B]: the row's slot, or -1 */
  const float *a[4];       /* per group: qkv, o, gate_up, down */
  const float *b[7];       /* per module: q, k, v, o, gate, up, down */
  float *work;             /* zoo_lora_work_floats(m, B, nt, R) floats */
} zoo_lora;

/* the part of one step's LoRA work a thread does for the current layer and group */
typedef struct {
  const zoo_lora *L;
  int layer, B, nR;
  const float *t;  /* [B, nR], shared */
} lora_ctx;

/* the shared t [B, 3R] at work, the shared gate | up products [B, 2I] after it */
static long lora_t_floats(int B, int rank) { return ((long)B * 3 * rank + 16 + 15) & ~15L; }

long zoo_lora_work_floats(const zoo_model *m, int B, int nt, int rank) {
  (void)nt; /* every part is shared */
  return lora_t_floats(B, rank) + 2L * B * m->inter + 16;
}

/* rows b..b+n-1 share row b's slot (the runner puts an adapter's rows side by side: its A and B are then read
 * once for all of them) */
static inline int same_slot_run(const zoo_lora *L, int b, int B) {
  int n = 1;
  while (b + n < B && L->row_slot[b + n] == L->row_slot[b]) n++;
  return n;
}

/* t[b] = x[b] @ A_s (group g, in floats of input) for thread th's share of the rows with a slot: of the N
 * such rows (in row order), those numbered N th / T .. N (th + 1) / T; a run cut by the split is shrunk by
 * both threads, each its own rows (A then read twice, once a step) */
static void lora_shrink(const zoo_lora *L, int layer, int g, int n_mod, int in, const float *x, long ldx, int B,
                        float *t, int th, int T) {
  const int nR = n_mod * L->rank;
  int N = 0;
  for (int b = 0; b < B; b++) N += L->row_slot[b] >= 0;
  const int lo = (int)((long)N * th / T), hi = (int)((long)N * (th + 1) / T);
  for (int b = 0, n, seen = 0; b < B && seen < hi; b += n) { /* seen: rows with a slot before row b */
    const int s = L->row_slot[b];
    n = same_slot_run(L, b, B);
    if (s < 0) continue;
    const int r0 = lo > seen ? lo - seen : 0, r1 = hi - seen < n ? hi - seen : n;
    if (r0 < r1)
      shrink_run(L->a[g] + ((long)layer * L->num_slots + s) * in * nR, nR, x + (long)(b + r0) * ldx, ldx, r1 - r0,
                 in, t + (long)(b + r0) * nR);
    seen += n;
  }
}

/* y[b, 0:n] += t[b, j R:(j+1) R] @ B_s,module[:, col:col+n] (module's out columns) for the rows with a slot */
static void lora_expand(const lora_ctx *c, int module, int j, int out, int col, int n, float *y, long ldy) {
  const zoo_lora *L = c->L;
  const int R = L->rank;
  if (n <= 0) return;
  for (int b = 0, rows; b < c->B; b += rows) {
    const int s = L->row_slot[b];
    rows = same_slot_run(L, b, c->B);
    if (s < 0) continue;
    const float *Bm = L->b[module] + ((long)c->layer * L->num_slots + s) * R * out + col;
    expand_run(Bm, out, c->t + (long)b * c->nR + j * R, c->nR, rows, R, y + (long)b * ldy, ldy, n);
  }
}

/* a group's deltas into y[:, c0:c1] (the fused output: module j at columns [begin[j], begin[j+1])) */
static void lora_add_cols(const lora_ctx *c, int first_module, int n_mod, const int *begin, float *y, long ldy,
                          int c0, int c1) {
  for (int j = 0; j < n_mod; j++) {
    const int lo = c0 > begin[j] ? c0 : begin[j], hi = c1 < begin[j + 1] ? c1 : begin[j + 1];
    if (lo < hi)
      lora_expand(c, first_module + j, j, begin[j + 1] - begin[j], lo - begin[j], hi - lo, y + lo, ldy);
  }
}
