// The CPU decode kernel (backends/torch/csrc/cpu_decode.c) as an XLA FFI custom call, so a jitted JAX
// program runs a whole fp32 decode step of a few rows in one call (backends/jax/cpu_kernel.py builds and
// registers it; the JAX runner selects it).
//
// Operands (all row-major, fp32 unless said):
//   tokens [B] s32, positions [B] s32, tables [B, W] s32       the step's rows (every row a real request)
//   threads [] s32                                              OpenMP threads for this call (an operand, not
//                                                               an attribute: changing it compiles nothing)
//   kv [L, 2, NB, bs, Hkv, D]                                   the JAX runner's stacked cache, aliased to
//                                                               result 1 (written in place)
//   rope_signed [2, P, D] (sin's first half negated), embed_t [E, V], head_t [E, V] (head = 2: the head
//   packed in column panels [ceil(V / 32), E, 32], cpu_decode.c's HEAD_PANELS), norm [E]
//   then per layer: input_norm [E], qkv [E, (H + 2 Hkv) D], o [H D, E], post_norm [E], gate_up [E, 2 I],
//   down [I, E]  (the [in, out] layout both runners keep)
// Results: logits [B, V] (attribute head = 1 or 2; head = 0: the final RMSNorm's output [B, E]), kv (the same
// buffer as operand kv).
// Attributes: num_heads, num_kv_heads (s32), eps (f32), head (s32: 0 none, 1 over head_t [E, V], 2 over panels).
//
// The zoo_model struct below mirrors cpu_decode.c's; tests/backends/jax/test_cpu_kernel.py checks the
// logits against the pure-XLA program, so a drift of the two layouts fails there.
#include <cstdint>
#include <string>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

extern "C" {
typedef struct {
  int num_layers, hidden, inter, num_heads, num_kv_heads, head_dim, vocab, block_size, max_positions;
  long num_blocks;
  float eps;
  const float *const *qkv;
  const float *const *o;
  const float *const *gate_up;
  const float *const *down;
  const float *const *norm_in;
  const float *const *norm_post;
  const float *norm_final;
  const float *embed_t;
  const float *head_t;
  float *const *kv;
  long kv_half;
  const float *rope;
} zoo_model;

long zoo_scratch_floats(const zoo_model *m, int B, int nt, int max_ctx);
int zoo_decode_step(const zoo_model *m, int B, const long *tokens, const long *pos, const long *tables, int W,
                    float *logits, float *scratch, long scratch_floats, int nt, int head);
}

namespace {

constexpr int kPerLayer = 6;

ffi::Error Invalid(const std::string &what) { return ffi::Error(ffi::ErrorCode::kInvalidArgument, what); }

ffi::Error DecodeStep(ffi::Buffer<ffi::S32> tokens, ffi::Buffer<ffi::S32> positions, ffi::Buffer<ffi::S32> tables,
                      ffi::Buffer<ffi::S32> threads, ffi::Buffer<ffi::F32> kv, ffi::Buffer<ffi::F32> rope, ffi::Buffer<ffi::F32> embed_t,
                      ffi::Buffer<ffi::F32> head_t, ffi::Buffer<ffi::F32> norm, ffi::RemainingArgs layers,
                      ffi::ResultBuffer<ffi::F32> logits, ffi::ResultBuffer<ffi::F32> kv_out, int32_t num_heads,
                      int32_t num_kv_heads, float eps, int32_t head) {
  if (threads.element_count() != 1 || threads.typed_data()[0] < 1) return Invalid("threads must be one int >= 1");
  const int num_threads = threads.typed_data()[0];
  const auto kv_dims = kv.dimensions();
  const auto et = embed_t.dimensions();
  const auto rd = rope.dimensions();
  const auto td = tables.dimensions();
  if (kv_dims.size() != 6 || et.size() != 2 || rd.size() != 3 || td.size() != 2) return Invalid("operand ranks");
  if (kv_out->untyped_data() != kv.untyped_data()) return Invalid("kv must be aliased to result 1");
  if (layers.size() % kPerLayer != 0 || layers.size() == 0) return Invalid("6 weight operands a layer");
  const int B = static_cast<int>(td[0]), W = static_cast<int>(td[1]);
  const int L = static_cast<int>(layers.size() / kPerLayer);
  if (kv_dims[0] != L || kv_dims[1] != 2) return Invalid("kv is not [L, 2, ...] for the layers given");
  if (tokens.element_count() != static_cast<size_t>(B) || positions.element_count() != static_cast<size_t>(B))
    return Invalid("tokens and positions must be [B]");

  std::vector<const float *> w[kPerLayer];
  std::vector<float *> kv_layers(L);
  for (auto &v : w) v.resize(L);
  for (int i = 0; i < L * kPerLayer; i++) {
    auto buf = layers.get<ffi::Buffer<ffi::F32>>(i);
    if (!buf.has_value()) return buf.error();
    w[i % kPerLayer][i / kPerLayer] = buf->typed_data();
  }
  const long layer_floats = static_cast<long>(kv.element_count() / L);
  float *kv_base = kv_out->typed_data();
  for (int l = 0; l < L; l++) kv_layers[l] = kv_base + l * layer_floats;
  const int E = static_cast<int>(et[0]);
  const int D = static_cast<int>(kv_dims[5]);
  // gate_up is [E, 2I]: I from its size
  auto gate_up0 = layers.get<ffi::Buffer<ffi::F32>>(4);
  if (!gate_up0.has_value()) return gate_up0.error();
  const int I = static_cast<int>(gate_up0->element_count() / (2 * static_cast<size_t>(E)));

  zoo_model m;
  m.num_layers = L;
  m.hidden = E;
  m.inter = I;
  m.num_heads = num_heads;
  m.num_kv_heads = num_kv_heads;
  m.head_dim = D;
  m.vocab = static_cast<int>(et[1]);
  m.block_size = static_cast<int>(kv_dims[3]);
  m.max_positions = static_cast<int>(rd[1]);
  m.num_blocks = static_cast<long>(kv_dims[2]);
  m.eps = eps;
  m.norm_in = w[0].data();
  m.qkv = w[1].data();
  m.o = w[2].data();
  m.norm_post = w[3].data();
  m.gate_up = w[4].data();
  m.down = w[5].data();
  m.norm_final = norm.typed_data();
  m.embed_t = embed_t.typed_data();
  m.head_t = head_t.typed_data();
  m.kv = kv_layers.data();
  m.kv_half = layer_floats / 2;
  m.rope = rope.typed_data();
  if (kv_dims[4] != num_kv_heads || num_kv_heads <= 0 || num_heads % num_kv_heads != 0)
    return Invalid("num_kv_heads does not fit the cache or num_heads");
  // head = 1 or 2: logits [B, V]; head = 0: the final norm's output [B, E] (the caller applies the output head)
  if (head < 0 || head > 2) return Invalid("head must be 0, 1 or 2");
  if (logits->element_count() != static_cast<size_t>(B) * (head ? m.vocab : E))
    return Invalid("result 0 must be [B, V] (head = 1 or 2) or [B, E] (head = 0)");
  const size_t head_cols = head == 2 ? (static_cast<size_t>(m.vocab) + 31) / 32 * 32 : static_cast<size_t>(m.vocab);
  if (head_t.element_count() != head_cols * E) return Invalid("head_t must be [E, V] (head = 0, 1) or [ceil(V/32), E, 32]");

  std::vector<long> tok(B), pos(B), tab(static_cast<size_t>(B) * W);
  int max_pos = 0;
  for (int b = 0; b < B; b++) {
    tok[b] = tokens.typed_data()[b];
    pos[b] = positions.typed_data()[b];
    if (pos[b] > max_pos) max_pos = static_cast<int>(pos[b]);
  }
  for (size_t i = 0; i < tab.size(); i++) tab[i] = tables.typed_data()[i];
  thread_local std::vector<float> scratch;
  const long need = zoo_scratch_floats(&m, B, num_threads, max_pos + 1);
  if (static_cast<long>(scratch.size()) < need) scratch.resize(need);
  const int rc = zoo_decode_step(&m, B, tok.data(), pos.data(), tab.data(), W, logits->typed_data(), scratch.data(),
                                 static_cast<long>(scratch.size()), num_threads, head);
  if (rc == -1) return Invalid("a token id or position out of range, or a bad row count");
  if (rc == -2) return Invalid("a block table too short or a block id out of range");
  if (rc != 0) return Invalid("decode kernel failed: " + std::to_string(rc));
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(ZooJaxDecodeStep, DecodeStep,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()  // tokens
                                  .Arg<ffi::Buffer<ffi::S32>>()  // positions
                                  .Arg<ffi::Buffer<ffi::S32>>()  // tables
                                  .Arg<ffi::Buffer<ffi::S32>>()  // threads
                                  .Arg<ffi::Buffer<ffi::F32>>()  // kv
                                  .Arg<ffi::Buffer<ffi::F32>>()  // rope_signed
                                  .Arg<ffi::Buffer<ffi::F32>>()  // embed_t
                                  .Arg<ffi::Buffer<ffi::F32>>()  // head_t
                                  .Arg<ffi::Buffer<ffi::F32>>()  // norm
                                  .RemainingArgs()               // 6 per layer
                                  .Ret<ffi::Buffer<ffi::F32>>()  // logits
                                  .Ret<ffi::Buffer<ffi::F32>>()  // kv (aliased)
                                  .Attr<int32_t>("num_heads")
                                  .Attr<int32_t>("num_kv_heads")
                                  .Attr<float>("eps")
                                  .Attr<int32_t>("head"));
