// A decoder-only transformer with explicit forward and backward, in the two families of
// models/gpt_config.h, trained with softmax cross-entropy (mean over positions):
// - gpt2: token + position embedding, pre-LN blocks (layernorm, causal self-attention with a fused
//   QKV projection, residual; layernorm, MLP with tanh GELU, residual), a final layernorm and an LM
//   head tied to the token embedding;
// - llama: token embedding, pre-norm blocks (RMSNorm, q and [k | v] projections into one [q | k | v]
//   activation, RoPE on q and k (Hugging Face's half-split rotation, which its checkpoints expect),
//   grouped-query causal attention, residual; RMSNorm, SwiGLU over [gate | up], down projection,
//   residual), a final RMSNorm and an untied LM head (its own unit, "head"). No biases.
// The families share everything but what happens inside a layer, a block of models/blocks/, and
// which weight the head reads: the layer loop, chunks, slots, recomputation, sequence parallelism,
// the split backward, the chunked head and the parameter store. Each residual add followed by a
// norm on the same chunk runs in that norm's pass (the next layer's ln1, or lnf; Norm::add_forward),
// with the bits of the add and then the norm; a chunk that hands its output to the next stage adds
// its last one on its own.
//
// One class for every layout. A rank holds the part a GptPartition names (models/gpt_sharding.h):
// - tensor parallel over the group in `tp`: column-parallel QKV and MLP-up, row-parallel attention
//   output and MLP-down, each owning its communication (models/tp_linear.h), its share of the heads,
//   and a vocab-parallel embedding and cross-entropy that never gather the full logits;
// - pipeline parallel: chunks of layers. The pipeline API runs one chunk on one micro-batch; the
//   activations of every micro-batch in flight live in their own slot until release(). The first
//   global chunk embeds tokens, the others start from an activation the caller received into
//   input_buffer(); the last computes the loss, the others hand output() to the next stage.
// The single-rank calls (forward, backward) are that API on the only chunk and micro-batch 0.
//
// The LM head and the loss never keep the logits ([N, Vp/tp] per micro-batch, N = B x T: the
// largest activation of a GPT-2 sized model). The head's forward makes them in chunks of rows
// (models/head_chunks.h) in one scratch buffer shared by every slot: each chunk's logits, its
// rows' losses (tp > 1: the vocab-parallel statistics allreduced per chunk) and, in a training
// forward, at once their gradient dlogits (d(loss_weight x mean loss)/d logits, in place), the tied
// embedding's gradient dwte += dlogits^T lnf and this rank's part of lnf's output gradient dlogits
// wte. So the loss weight is a forward's argument, the head's weight gradient is added by the
// forward, and the slot keeps [N, C] of gradient instead of the logits; the backward starts there
// (its tensor-parallel sum, then lnf). Only forward_logits (sampling) makes the whole logits.
//
// Compute dtype: fp32 (the default, and what the CPU is for), or bf16 with fp32 master weights
// (meant for CUDA; on the CPU it runs, slowly, so that it can be tested). With bf16:
//   - the ParameterStore keeps the parameters and gradients in fp32; the optimizer, checkpoints and
//     gradient norms see only those;
//   - every forward starts by casting the whole master into the store's bf16 copy (one kernel; a
//     few bytes per parameter next to the forward's work, and never stale, whoever changed the
//     master: the optimizer, a checkpoint load, a test). The GEMMs, the LM head included, read it;
//   - activations and their gradients are bf16; layernorm statistics, attention probabilities,
//     losses and log-sum-exps stay fp32, as the kernels keep them;
//   - weight gradients accumulate in fp32 through bf16 x bf16 -> fp32 GEMMs; bias, layernorm and
//     embedding gradients are fp32 sums of the bf16 activation gradients (runtime/nn_kernels.h).
// The same code runs both: the dtype of the activation tensors picks the kernels.
// defines: Gpt
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "models/gpt_config.h"
#include "models/gpt_sharding.h"
#include "models/layer_attention.h"
#include "models/layers.h"
#include "models/param_use.h"
#include "models/tp_linear.h"
#include "runtime/attention_kernel.h"
#include "runtime/nn_kernels.h"  // defines: nn::AttentionHeads
#include "models/parameter_store.h"
#include "parallel/memory_options.h"
#include "parallel/tensor_parallel.h"

namespace mt {

class Block;

// How a Gpt trades compute and communication for memory (parallel/memory_options.h).
struct GptOptions {
  // Full: a slot keeps per layer only its input; backward reruns the layer's forward (up to GELU)
  // into one scratch layer. Selective: the attention probabilities and GELU output are recomputed.
  // Either way the same kernels on the same inputs: the bits of None.
  Recompute recompute = Recompute::None;
  bool sequence_parallel = false;  // needs a tensor-parallel group of 2 or more
  // ZeRO-2/3: the store is built in these blocks (ParameterStore), none of them resident: their
  // owner (zero/unit_shards.h) takes and frees their memory. Empty: flat buffers.
  std::vector<StoreBlock> store_blocks = {};
  // The parameter units those blocks were cut from (zero/unit_shards.h: UnitCut), which become
  // param_units(). Empty: gpt_param_units of the stage's parameters.
  std::vector<ParamUnit> param_units = {};
  // ZeRO-1 under bf16: the flat store's region of each parameter (ParameterStore), so that no
  // gradient bucket mixes the GEMM weights with the parameters read in fp32 (zero_flat_regions).
  // Empty: one region, the specs' order.
  std::vector<int> flat_regions = {};
  // Rows per chunk of the LM head's logits; 0: from the byte budget (models/head_chunks.h). Tests
  // force several chunks on tiny models.
  std::int64_t head_chunk_rows = 0;
  // Vocabulary-row pieces of wte and lm_head (gpt_vocab_pieces, models/gpt_sharding.h): each its own
  // parameter and unit, so ZeRO-3 gathers one piece at a time. Above 1 the LM head makes each row
  // chunk's logits piece by piece into their columns, and its gradients the same way.
  int vocab_pieces = 1;
  // Context parallelism: the group each sequence is split over (null: none). A micro-batch's T is
  // then this rank's rows of each sequence (seq_len / cp: chunks r and 2cp-1-r of the causal split,
  // parallel/causal_split.h), the position embedding and RoPE read their global positions, attention
  // runs as ring attention over the group (models/layer_attention.h), and the loss is the mean over
  // this rank's rows: the mean of the cp ranks' losses is the sequence's.
  Communicator* context_parallel = nullptr;
};

class Gpt {
 public:
  // Told a parameter's index as soon as its gradient for the step is complete, during a backward
  // that finishes the step's gradients: data parallelism starts reducing buckets from it. The tied
  // embedding is reported only where embedding and head share a rank (elsewhere it must first be
  // summed between stages).
  using GradReady = std::function<void(std::size_t)>;

  // compute: fp32 or bf16 (see above). partition: empty chunks means every layer. tp: the
  // tensor-parallel group of partition.tp_size ranks. pad_multiple: see ParameterStore.
  Gpt(DeviceContext& ctx, const GptConfig& config, DType compute = DType::F32, GptPartition partition = {},
      TensorParallel tp = {}, std::int64_t pad_multiple = 1, GptOptions options = {});
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptConfig& config() const { return config_; }
  const GptPartition& partition() const { return partition_; }
  const std::vector<ParamShard>& shards() const { return shards_; }  // one per stored parameter
  DType compute_dtype() const { return store_.compute_dtype(); }
  ParameterStore& parameters() { return store_; }
  const ParameterStore& parameters() const { return store_; }
  void init(std::uint64_t seed);  // GPT-2's initialization (models/init.h), shard by shard
  // The same values for one unit's parameters alone (ZeRO-3 makes one unit resident at a time).
  void init_unit(std::uint64_t seed, int unit);
  const GptOptions& options() const { return options_; }

  // The store's parameters in units (models/param_use.h), in store order: "embedding" (wte and wpe,
  // or the tied wte alone on a last stage that holds no embedding layer), "h.<l>.attn" and
  // "h.<l>.mlp" per layer (a full recomputation holds both through the layer's backward), "lnf",
  // llama's "head". The head uses "lnf", then "embedding" (its tied wte) or "head". With
  // vocabulary pieces, "embedding.<k>" per wte piece (the last with wpe) and "head.<k>".
  const std::vector<ParamUnit>& param_units() const { return units_; }
  // Told around every use of a unit from now on (null: nobody). Must outlive the model's use of it.
  void set_param_hooks(ParamUseHooks* hooks) { hooks_ = hooks; }

  // A forward's loss weight: training adds loss_weight x d(mean loss)/d(parameter) to every
  // gradient (with gradient accumulation over k micro-batches, 1/k gives the gradient of the mean),
  // the LM head's part in the forward itself, the rest in the backward. kEvaluation: the loss
  // alone (validation): no gradient is made or touched, and no backward may follow.
  static constexpr std::optional<float> kEvaluation{};

  // --- Whole model on this rank (no pipeline; tensor parallel allowed) ---
  // B sequences of T tokens (row-major host arrays). Returns the mean cross-entropy over B x T
  // positions; the activations are kept for backward().
  float forward(std::span<const std::int32_t> inputs, std::span<const std::int32_t> targets, int B, int T,
                std::optional<float> loss_weight);
  // The same from ids on the device (DeviceTokens below), the mean loss added into loss_sum (fp32 [1]
  // on the device): no host wait.
  struct DeviceTokens;
  void forward(const DeviceTokens& tokens, int B, int T, std::optional<float> loss_weight, Tensor& loss_sum);
  // Forward without a loss: logits() then holds [B*T, Vp/tp] (this rank's vocabulary slice).
  void forward_logits(std::span<const std::int32_t> inputs, int B, int T);
  // Adds the rest of the last (training) forward's gradients.
  void backward(const GradReady& ready = {});
  const Tensor& logits() const;  // after forward_logits() only: a forward with targets keeps none
  // Per-position losses of the last forward with targets, [B*T] fp32 on the device.
  const Tensor& losses() const;

  // --- Pipeline API: local chunk `chunk` on micro-batch `micro` ---
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  bool chunk_has_embedding(int chunk) const;
  bool chunk_has_head(int chunk) const;
  // Where the previous stage's activation [B*T, C] goes (chunks without the embedding).
  Tensor input_buffer(int chunk, int micro, int B, int T);
  // Runs the chunk. The embedding chunk reads `inputs`, the head chunk `targets` and returns the
  // mean loss (others return 0 and may pass empty spans); loss_weight as for forward() (the head
  // chunk makes its gradients with it; the other chunks do nothing with it). The head's gradient is
  // in the parameters' from here on, released or not: a second training forward of the same slot
  // before its backward is an error.
  // Host ids are checked against the vocabulary and uploaded; the loss comes back with a host wait.
  float forward_chunk(int chunk, int micro, int B, int T, std::span<const std::int32_t> inputs,
                      std::span<const std::int32_t> targets, std::optional<float> loss_weight);
  // A micro-batch's token ids already on the device, [B*T] int32 each (a chunk without the
  // embedding or the head may leave its tensor undefined), checked against the vocabulary when they
  // were read: the data loader checks every id (train/step_batch.h).
  struct DeviceTokens {
    Tensor inputs, targets;
  };
  // The same chunk with nothing waiting for the host: the head chunk adds its mean loss into
  // loss_sum (fp32 [1] on the device; kernels::accumulate_mean) instead of returning it. The slot
  // keeps views of the tokens until its backward: they must stay unchanged until then.
  void forward_chunk(int chunk, int micro, int B, int T, const DeviceTokens& tokens, std::optional<float> loss_weight,
                     Tensor& loss_sum);
  // Whether the store's bf16 copy is kept current by whoever changes the master (the optimizer's
  // update writes it): forward_chunk then does not cast it at micro-batch 0. Off by default: a
  // forward follows the master whoever wrote it.
  void set_compute_copy_kept(bool kept) { compute_copy_kept_ = kept; }
  Tensor output(int chunk, int micro) const;             // the activation for the next stage
  Tensor output_grad_buffer(int chunk, int micro) const; // where the next stage's gradient goes
  // Adds the rest of this micro-batch's gradients (with its forward's loss weight). Afterwards
  // input_grad() holds the gradient for the previous stage. `ready` is told each parameter as it
  // completes.
  void backward_chunk(int chunk, int micro, const GradReady& ready = {});
  // The same backward split in two, for zero-bubble schedules; B then W adds exactly the gradients
  // backward_chunk adds, bit for bit (runs of W for one chunk in micro-batch order, as the fused
  // backward runs them).
  // B: every activation gradient through the chunk, down to input_grad() (ready to send), and all
  // tensor-parallel collectives of the backward but W's below. What W reads is kept in the slot: per layer the
  // gradients at the two row-parallel outputs, the two layernorms' upstream gradients and dqkv
  // (4 x [B*T, C] + [B*T, 3C/tp], compute dtype; dfch overwrites the forward's pre-GELU activation,
  // which W no longer needs); the head's lnf gradient is the slot's (its weight gradient dwte was
  // made in the forward: W adds lnf's); the embedding's is the slot's input gradient. Allocated at the slot's
  // first B, then pooled with it and counted in activation_bytes(). With recompute, B also
  // recomputes what W reads and the slot dropped; that and the layers' gradients above sit in a set
  // taken at B and given back at W (pooled by the model), so only slots between B and W hold one.
  // With sequence parallelism B makes the fused backward's sequence gathers and reduce-scatters in
  // its order, and keeps per layer the two row-parallel output gradients gathered ([B*T, C]), the
  // layernorms' upstream gradients as this rank's rows ([B*T/tp, C]), dqkv, and the two layernorm
  // outputs gathered ([B*T, C], what the column-parallel weight gradients read); the head's dlnf
  // reduce-scattered into [B*T/tp, C], and the embedding chunk's input gradient kept gathered ([B*T, C]).
  void backward_chunk_input(int chunk, int micro);
  // W: the parameter gradients of that B; `ready` as in backward_chunk, the same parameters in the
  // same order. It communicates nothing, except with sequence parallelism (each layernorm's [2C]
  // parameter gradients are allreduced over tp, as the fused backward does) and for llama's kv
  // heads replicated over tp (each layer's partial kv weight gradient is summed over tp); every tp
  // rank runs the same W's in the same order, so these collectives match. Afterwards the slot may
  // be released.
  void backward_chunk_weights(int chunk, int micro, const GradReady& ready = {});
  Tensor input_grad(int chunk, int micro) const;
  // The slot's buffers go back to a pool for later micro-batches. Not between B and W.
  void release(int chunk, int micro);

  std::int64_t activation_bytes() const;  // held by live slots, scratch and ring attention's buffers
  // What ring attention's transfers cost so far (zero without context parallelism).
  RingAttentionStats context_parallel_stats() const { return attention_->stats(); }

 private:
  class UnitUse;
  struct LayerActs;
  struct LayerGrads;
  struct Slot;
  struct WeightInputs;
  struct Scratch;
  struct Residual;
  struct ChunkInfo {
    LayerRange layers;
    int first_block = 0;  // index into blocks_
    bool embedding = false, head = false;
  };
  Slot& acquire(int chunk, int micro, int B, int T);
  Slot& live(int chunk, int micro) const;
  Scratch& scratch(int B, int T);
  void embed(Slot& s, const Tensor& tokens);  // [B*T] ids on the device
  void lookup(const Tensor& tokens, const Tensor* wpe, Tensor& out, const Tensor& positions);
  std::int64_t vocab_piece_begin(int k) const;
  void head_logits(const Tensor& x, Tensor& logits, bool piece_uses);
  // The head's forward: lnf of the last layer's output into the scratch (gathered with sequence
  // parallelism), then the chunks.
  const Tensor& head_input(const Residual& last, Slot& s, Scratch& w);
  void head_loss(Slot& s, const Residual& last, const Tensor& targets, std::optional<float> loss_weight,
                 Tensor& loss_sum);
  void chunk_loss(Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& lse, Scratch& w,
                  std::int64_t first_row);
  std::int64_t head_rows_per_chunk(std::int64_t rows) const;
  void take_head_gradient(Slot& s);  // a backward's start: the forward's dlnf, once
  const Tensor& head_dlnf(Slot& s) const;  // summed over tp by B: where W reads it
  void head_backward(Slot& s, Scratch& w);
  void head_backward_input(Slot& s);
  void head_backward_weights(Slot& s);
  Residual run_blocks_forward(const ChunkInfo& c, Slot& s, Scratch& w);
  Residual layer_forward(Block& blk, const Residual& in, LayerActs& a, Scratch& w, Tensor* out);
  void norm_forward(const Norm& norm, const Residual& r, Tensor& out, Tensor& mean, Tensor& rstd);
  void settle(const Residual& r);
  LayerActs layer_buffers(Slot& s, Scratch& w, int i, const WeightInputs* kept) const;
  void recompute_layer(Block& blk, Slot& s, Scratch& w, int i, LayerActs& a);
  LayerActs new_layer(unsigned fields, int B, int T, std::int64_t& bytes);
  // Which LayerActs fields the slot keeps, the scratch layer holds, and a split backward's W keeps.
  unsigned slot_fields() const;
  unsigned scratch_fields() const;
  unsigned weight_input_fields() const;
  std::vector<LayerGrads> new_layer_grads(int layers, int B, int T, std::int64_t& bytes);
  void take_weight_inputs(Slot& s);
  void give_back_weight_inputs(Slot& s);
  void run_blocks_backward(const ChunkInfo& c, Slot& s, Scratch& w);
  void run_blocks_backward_input(const ChunkInfo& c, Slot& s, Scratch& w);
  void run_blocks_backward_weights(const ChunkInfo& c, Slot& s, Scratch& w);
  void embedding_backward(Slot& s, bool gathered_by_b = false);
  void keep_weight_inputs(Slot& s);
  // A layernorm's backward; with sequence parallelism its parameter gradients from this rank's rows
  // are summed over the tp group before they are added (each rank normalized other rows).
  void layernorm_backward(Norm& ln, const Tensor& dout, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                          Tensor& dx, Scratch& w);
  // Its parameter gradients alone (the same sum over tp with sequence parallelism): W's half.
  void layernorm_backward_params(Norm& ln, const Tensor& dout, const Tensor& x, const Tensor& mean,
                                 const Tensor& rstd, Scratch& w);
  std::int64_t local_rows(int B, int T) const;  // rows of the residual stream on this rank
  std::int64_t qkv_local_width() const;  // [q | k | v] of this rank's heads
  // Attention's backward into dqkv, then the block's adjoint of what made [q | k | v] after its projections.
  void attention_backward(const Block& blk, const Tensor& datty, const LayerActs& a, Tensor& dqkv);
  void ready(std::size_t first, std::size_t count);
  void check_tokens(std::span<const std::int32_t> ids, const char* what) const;
  // Host ids of a B x T batch ("input" or "target"), checked against the vocabulary, on the device.
  Tensor upload_tokens(std::span<const std::int32_t> ids, int B, int T, const char* what);
  void expect_tokens(const Tensor& ids, const Slot& s, const char* what) const;

  DeviceContext& ctx_;
  GptConfig config_;
  GptPartition partition_;
  TensorParallel tp_;
  GptOptions options_;
  // The tensor-parallel region's edges for this layout (copy and reduce, or the sequence gather and
  // reduce-scatter), which the layers' linears, the embedding and the head share.
  TpRegion region_;
  std::vector<ParamShard> shards_;
  ParameterStore store_;
  std::vector<std::unique_ptr<Block>> blocks_;  // one per layer held (models/blocks/)
  std::vector<ChunkInfo> chunks_;
  Norm lnf_;
  // Parameter indices (-1: not held). head_weight_: what the LM head reads (wte tied, or lm_head).
  // wte, lm_head and head_weight_ are the first of vocab_pieces consecutive row pieces.
  std::int64_t wte_ = -1, wpe_ = -1, lnf_first_ = -1, lm_head_ = -1, head_weight_ = -1;
  std::vector<Linear> head_pieces_;  // the LM head's weight, by vocabulary piece, as bias-free linears
  nn::AttentionHeads attention_heads_;  // this rank's q and kv heads (models/gpt_sharding.h)
  std::unique_ptr<LayerAttention> attention_;  // every layer's: the kernel chosen once, or the ring
  std::vector<ParamUnit> units_;
  bool compute_copy_kept_ = false;
  // Indices into units_ (-1: not held). embedding_unit_: the unit with wpe and (uncut) wte; with
  // vocab pieces, wte_units_[k] is piece k's and head_units_ the head's (the last with wpe).
  int embedding_unit_ = -1, lnf_unit_ = -1;
  std::vector<int> wte_units_, head_units_;
  ParamUseHooks* hooks_ = nullptr;
  std::map<std::pair<int, int>, std::unique_ptr<Slot>> live_;
  std::vector<std::unique_ptr<Slot>> pool_;
  std::vector<std::unique_ptr<WeightInputs>> weight_input_pool_;  // recompute's, between B and W
  std::unique_ptr<Scratch> scratch_;
  Tensor host_loss_;  // the loss the host-id forwards read back (fp32 [1])
  const GradReady* grad_ready_ = nullptr;  // during a backward call that was given one
};

}  // namespace mt
