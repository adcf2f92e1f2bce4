#include "train/step_batch.h"

#include <span>
#include <utility>

namespace mt {

StepBatch::StepBatch(DeviceContext& ctx, int micro_batches, int micro_batch, int seq_len, int vocab_size,
                     Reads reads, std::vector<std::int64_t> positions)
    : ctx_(ctx),
      micro_batches_(micro_batches),
      micro_batch_(micro_batch),
      seq_len_(seq_len),
      rows_(positions.empty() ? seq_len : static_cast<int>(positions.size())),
      tokens_per_micro_(static_cast<std::int64_t>(micro_batch) * rows_),
      vocab_size_(vocab_size),
      reads_(reads),
      positions_(std::move(positions)),
      uploaded_(ctx.device()) {
  MT_CHECK(micro_batches > 0 && micro_batch > 0 && seq_len > 0, "a step batch of ", micro_batches, " x ",
           micro_batch, " sequences of ", seq_len, " tokens");
  MT_CHECK(reads.inputs || reads.targets, "a step batch that reads neither inputs nor targets");
  std::vector<char> seen(static_cast<std::size_t>(seq_len), 0);
  for (const std::int64_t p : positions_) {
    MT_CHECK(p >= 0 && p < seq_len && !seen[static_cast<std::size_t>(p)], "position ", p,
             " is outside a sequence of ", seq_len, " or held twice");
    seen[static_cast<std::size_t>(p)] = 1;
  }
  if (!positions_.empty()) whole_.resize(2 * static_cast<std::size_t>(micro_batches) * micro_batch * seq_len);
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
  const int sequences = micro_batches_ * micro_batch_;
  if (positions_.empty()) {
    loader.read(first_sequence, sequences, std::span<std::int32_t>(ids, static_cast<std::size_t>(all)),
                std::span<std::int32_t>(ids + all, static_cast<std::size_t>(all)));
  } else {
    // Whole sequences, then this rank's rows of each: inputs and targets alike.
    const std::size_t whole = whole_.size() / 2;
    loader.read(first_sequence, sequences, std::span<std::int32_t>(whole_.data(), whole),
                std::span<std::int32_t>(whole_.data() + whole, whole));
    std::int32_t* out = ids;
    for (const std::int32_t* from : {whole_.data(), whole_.data() + whole})
      for (int n = 0; n < sequences; ++n)
        for (const std::int64_t p : positions_) *out++ = from[static_cast<std::int64_t>(n) * seq_len_ + p];
  }
  const int checked = loader.options().vocab_size;
  const std::int64_t begin = reads_.inputs ? 0 : all, end = reads_.targets ? 2 * all : all;  // what is read
  if (checked <= 0 || checked > vocab_size_) {
    for (std::int64_t i = begin; i < end; ++i)
      MT_CHECK(ids[i] >= 0 && ids[i] < vocab_size_, i < all ? "input" : "target", " token ", ids[i],
               " of sequence ", first_sequence + (i % all) / rows_, " is outside the vocabulary [0, ",
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
