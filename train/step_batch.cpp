#include "train/step_batch.h"

#include <span>

namespace mt {

StepBatch::StepBatch(DeviceContext& ctx, int micro_batches, int micro_batch, int seq_len, int vocab_size,
                     Reads reads)
    : ctx_(ctx),
      micro_batches_(micro_batches),
      micro_batch_(micro_batch),
      seq_len_(seq_len),
      tokens_per_micro_(static_cast<std::int64_t>(micro_batch) * seq_len),
      vocab_size_(vocab_size),
      reads_(reads),
      uploaded_(ctx.device()) {
  MT_CHECK(micro_batches > 0 && micro_batch > 0 && seq_len > 0, "a step batch of ", micro_batches, " x ",
           micro_batch, " sequences of ", seq_len, " tokens");
  MT_CHECK(reads.inputs || reads.targets, "a step batch that reads neither inputs nor targets");
  const std::int64_t n = 2 * micro_batches_ * tokens_per_micro_;
  host_ = PinnedHostBuffer(static_cast<std::size_t>(n) * sizeof(std::int32_t), ctx.device());
  device_ = Tensor::empty({n}, DType::I32, ctx);
}

void StepBatch::load(const data::DataLoader& loader, std::int64_t first_sequence) {
  MT_CHECK(loader.seq_len() == seq_len_, "a loader of ", loader.seq_len(), "-token sequences for a batch of ",
           seq_len_, "-token sequences");
  if (loaded_ && !uploaded_.query()) uploaded_.synchronize();  // the host memory is the last upload's source
  const std::int64_t all = micro_batches_ * tokens_per_micro_;
  auto* ids = reinterpret_cast<std::int32_t*>(host_.data());
  const std::span<std::int32_t> inputs(ids, static_cast<std::size_t>(all));
  const std::span<std::int32_t> targets(ids + all, static_cast<std::size_t>(all));
  loader.read(first_sequence, micro_batches_ * micro_batch_, inputs, targets);
  const int checked = loader.options().vocab_size;
  const std::int64_t begin = reads_.inputs ? 0 : all, end = reads_.targets ? 2 * all : all;  // what is read
  if (checked <= 0 || checked > vocab_size_) {
    for (std::int64_t i = begin; i < end; ++i)
      MT_CHECK(ids[i] >= 0 && ids[i] < vocab_size_, i < all ? "input" : "target", " token ", ids[i],
               " of sequence ", first_sequence + (i % all) / seq_len_, " is outside the vocabulary [0, ",
               vocab_size_, ")");
  }
  Tensor read = device_.flat_slice(begin, end - begin);
  read.upload(host_, static_cast<std::size_t>(begin) * sizeof(std::int32_t), ctx_.stream());
  uploaded_.record(ctx_.stream());
  loaded_ = true;
}

Gpt::DeviceTokens StepBatch::micro(int m) const {
  MT_CHECK(m >= 0 && m < micro_batches_, "micro-batch ", m, " of ", micro_batches_);
  const std::int64_t all = micro_batches_ * tokens_per_micro_;
  return {reads_.inputs ? device_.flat_slice(m * tokens_per_micro_, tokens_per_micro_) : Tensor{},
          reads_.targets ? device_.flat_slice(all + m * tokens_per_micro_, tokens_per_micro_) : Tensor{}};
}

}  // namespace mt
