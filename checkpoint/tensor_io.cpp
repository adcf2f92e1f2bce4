#include "checkpoint/tensor_io.h"

#include <unistd.h>  // defines: truncate

#include <cerrno>
#include <system_error>
#include <utility>

#include "runtime/error.h"

namespace mt::ckpt {
namespace fs = std::filesystem;

RankWriter::RankWriter(fs::path partial, int rank, std::int64_t step, std::optional<SaveFault> fault)
    : partial_(std::move(partial)), rank_(rank), step_(step), fault_(std::move(fault)) {
  contribution_.rank = rank;
}

void RankWriter::add(const std::string& tensor, const Shape& shape, const Slice& slice, std::span<const float> data) {
  validate_slice(shape, slice, "rank " + std::to_string(rank_) + ": saving tensor " + tensor);
  MT_REQUIRE(static_cast<std::int64_t>(data.size()) == slice.numel(), "rank ", rank_, ": saving tensor ", tensor, ": ",
             data.size(), " values given for a slice of ", slice.numel());
  bool known = false;
  for (const TensorEntry& t : contribution_.tensors) {
    if (t.name != tensor) continue;
    MT_REQUIRE(t.shape == shape, "rank ", rank_, ": tensor ", tensor, " saved with two different shapes");
    known = true;
  }
  if (!known) contribution_.tensors.push_back(TensorEntry{tensor, shape});

  if (!writer_) writer_ = std::make_unique<ShardWriter>(partial_ / shard_file_name(rank_), rank_, step_);
  const std::int64_t offset = writer_->append(data);
  contribution_.pieces.push_back(PieceEntry{tensor, slice, shard_file_name(rank_), offset});
}

RankContribution RankWriter::finish() {
  if (fault_ && fault_->fires("shard", step_, rank_) && writer_) {
    // A crash in the middle of writing: what was written reaches the file, then it is cut in half.
    const fs::path path = partial_ / shard_file_name(rank_);
    const std::int64_t half = writer_->bytes() / 2;
    writer_.reset();
    MT_REQUIRE(::truncate(path.c_str(), half) == 0, "cannot cut ", path.string(),
               " short (injected fault): ", std::error_code(errno, std::generic_category()).message());
  }
  maybe_crash(fault_, "shard", step_, rank_);
  if (writer_) contribution_.file = writer_->finish();
  maybe_crash(fault_, "sidecar", step_, rank_);
  write_sidecar(partial_, contribution_);
  return contribution_;
}

CheckpointReader::CheckpointReader(fs::path step_dir) : CheckpointReader(step_dir, read_manifest(step_dir)) {}

CheckpointReader::CheckpointReader(fs::path step_dir, Manifest manifest)
    : dir_(std::move(step_dir)), manifest_(std::move(manifest)) {}

const Shape& CheckpointReader::shape(const std::string& tensor) const {
  const TensorEntry* entry = manifest_.find_tensor(tensor);
  MT_REQUIRE(entry, "checkpoint ", dir_.string(), " has no tensor ", tensor);
  return entry->shape;
}

namespace {

// How to fill `target` of `tensor` from its `pieces`; Error naming the checkpoint when they do not cover it.
std::vector<Transfer> plan(const fs::path& dir, const std::string& tensor, const Shape& tensor_shape,
                           const std::vector<const PieceEntry*>& pieces, const Slice& target) {
  std::vector<Slice> sources;
  sources.reserve(pieces.size());
  for (const PieceEntry* piece : pieces) sources.push_back(piece->slice);
  try {
    return plan_transfers(tensor_shape, target, sources, tensor);
  } catch (const Error& e) {
    MT_FAIL("checkpoint ", dir.string(), ": ", e.message());  // which checkpoint lacks it
  }
}

}  // namespace

void CheckpointReader::read(const std::string& tensor, const Slice& target, std::span<float> out) {
  const std::vector<const PieceEntry*> pieces = manifest_.pieces_of(tensor);
  const std::vector<Transfer> transfers = plan(dir_, tensor, shape(tensor), pieces, target);
  MT_REQUIRE(static_cast<std::int64_t>(out.size()) == target.numel(), "checkpoint ", dir_.string(), ": reading ",
             tensor, " into room for ", out.size(), " values, the slice has ", target.numel());
  for (const Transfer& t : transfers) {
    const PieceEntry& piece = *pieces[t.source];
    shard(piece.file)
        .read(piece.byte_offset + t.from * std::int64_t{sizeof(float)},
              out.subspan(static_cast<std::size_t>(t.to), static_cast<std::size_t>(t.count)));
  }
}

std::vector<float> CheckpointReader::read_whole(const std::string& tensor) {
  const Slice whole = Slice::whole(shape(tensor));
  // The size is the manifest's word: allocate only once the pieces cover it and the files holding
  // them are verified, so real file sizes bound it (a manifest claiming a tensor of 10^12 elements
  // aborted in the allocation; found with checkpoint/tests/fuzz_manifest.cpp).
  const std::vector<const PieceEntry*> pieces = manifest_.pieces_of(tensor);
  for (const PieceEntry* piece : pieces) shard(piece->file);
  plan(dir_, tensor, shape(tensor), pieces, whole);
  std::vector<float> out(static_cast<std::size_t>(whole.numel()));
  read(tensor, whole, out);
  return out;
}

const ShardReader& CheckpointReader::shard(const std::string& file) {
  auto it = open_.find(file);
  if (it == open_.end()) {
    const FileEntry* entry = manifest_.find_file(file);
    MT_CHECK(entry != nullptr, "manifest of ", dir_.string(), " has a piece in unlisted file ", file);
    it = open_.emplace(file, ShardReader(dir_, *entry)).first;
  }
  return it->second;
}

}  // namespace mt::ckpt
