#include "models/gpt_sharding.h"

#include <algorithm>
#include <sstream>

#include "runtime/error.h"

namespace mt {

GptPartition GptPartition::whole(const GptConfig& config) {
  GptPartition p;
  p.chunks = {{0, config.layers}};
  return p;
}

// What the layout plan guarantees (its checks name the options: parallel/layout_check.h); a
// partition that breaks it is our bug, not the user's.
void GptPartition::validate(const GptConfig& config) const {
  MT_CHECK(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size, "tensor-parallel rank ", tp_rank, " of ", tp_size);
  MT_CHECK(config.heads % tp_size == 0 && config.mlp_hidden() % tp_size == 0 && config.vocab_rows() % tp_size == 0,
           "tp ", tp_size, " does not divide the heads, the MLP width or the padded vocabulary of ", config.describe());
  int previous_end = 0;
  for (const LayerRange& c : chunks) {
    MT_CHECK(c.begin >= previous_end && c.end > c.begin && c.end <= config.layers, "layer chunk [", c.begin, ", ",
             c.end, ") is empty, overlaps another or lies outside the ", config.layers, " layers");
    previous_end = c.end;
  }
  MT_CHECK(!chunks.empty() || (embedding && head), "a partition without layers must hold the whole model's ends");
}

std::string GptPartition::describe() const {
  std::ostringstream out;
  out << "layers ";
  for (std::size_t i = 0; i < chunks.size(); ++i)
    out << (i ? ", " : "") << chunks[i].begin << "-" << chunks[i].end - 1;
  if (embedding) out << " + embedding";
  if (head) out << " + head";
  if (tp_size > 1) out << ", tp shard " << tp_rank << "/" << tp_size;
  return out.str();
}

std::vector<std::pair<std::int64_t, std::int64_t>> ParamShard::full_runs() const {
  if (split_dim < 0) return {{0, full.numel()}};
  std::vector<std::pair<std::int64_t, std::int64_t>> runs;
  const auto& shape = full.shape;
  if (split_dim == 0) {
    std::int64_t inner = 1;
    for (std::size_t d = 1; d < shape.size(); ++d) inner *= shape[d];
    const std::int64_t block_rows = shape[0] / blocks, rows = block_rows / parts;
    for (int b = 0; b < blocks; ++b) runs.push_back({(b * block_rows + part * rows) * inner, rows * inner});
  } else {
    MT_CHECK(split_dim == 1 && shape.size() == 2 && blocks == 1, "unsupported split of ", full.name);
    const std::int64_t cols = shape[1] / parts;
    for (std::int64_t r = 0; r < shape[0]; ++r) runs.push_back({r * shape[1] + part * cols, cols});
  }
  return runs;
}

std::vector<ParamShard> gpt_param_shards(const GptConfig& config, const GptPartition& partition, int pieces) {
  partition.validate(config);
  MT_CHECK(pieces >= 1 && config.vocab_rows() / partition.tp_size % pieces == 0, pieces,
           " vocabulary pieces do not divide the ", config.vocab_rows() / partition.tp_size, " rows of a rank");
  auto holds_layer = [&](int layer) {
    for (const LayerRange& c : partition.chunks)
      if (layer >= c.begin && layer < c.end) return true;
    return false;
  };
  std::vector<ParamShard> shards;
  for (const ParamSpec& spec : gpt_parameter_specs(config)) {
    bool held = false;
    switch (spec.kind) {
      case ParamKind::TokenEmbedding: held = partition.embedding || (partition.head && config.tied_head()); break;
      case ParamKind::PositionEmbedding: held = partition.embedding; break;
      case ParamKind::LnfWeight:
      case ParamKind::LnfBias:
      case ParamKind::LmHead: held = partition.head; break;
      default: held = holds_layer(spec.layer); break;
    }
    if (!held) continue;
    ParamShard s{spec, spec};
    s.parts = partition.tp_size;
    s.part = partition.tp_rank;
    switch (spec.kind) {
      case ParamKind::TokenEmbedding:
      case ParamKind::LmHead:
      case ParamKind::QueryWeight:
      case ParamKind::FcBias: s.split_dim = 0; break;
      case ParamKind::FcWeight: s.split_dim = 0; s.blocks = config.is_llama() ? 2 : 1; break;  // [gate | up]
      case ParamKind::KeyValueWeight:
        if (partition.splits_kv_heads(config)) s.split_dim = 0, s.blocks = 2;  // [k | v]
        break;
      case ParamKind::QkvWeight:
      case ParamKind::QkvBias: s.split_dim = 0; s.blocks = 3; break;
      case ParamKind::AttnProjWeight:
      case ParamKind::FcProjWeight: s.split_dim = 1; break;
      default: break;
    }
    if (partition.tp_size == 1) s.split_dim = -1, s.blocks = 1;  // nothing to split
    if (s.split_dim >= 0) s.local.shape[static_cast<std::size_t>(s.split_dim)] /= partition.tp_size;
    if (pieces > 1 && (spec.kind == ParamKind::TokenEmbedding || spec.kind == ParamKind::LmHead)) {
      s.split_dim = 0;
      s.parts = partition.tp_size * pieces;
      s.local.shape[0] /= pieces;
      for (int k = 0; k < pieces; ++k) {
        s.part = partition.tp_rank * pieces + k;
        s.local.name = spec.name + "#" + std::to_string(k);  // a store name of its own
        shards.push_back(s);
      }
      continue;
    }
    shards.push_back(std::move(s));
  }
  return shards;
}

int vocab_pieces(std::int64_t local_vocab_rows, std::int64_t channels, std::int64_t unit_numel) {
  MT_CHECK(local_vocab_rows >= 1 && channels >= 1 && unit_numel >= 1, "vocabulary pieces of ", local_vocab_rows,
           " x ", channels, " against a unit of ", unit_numel);
  for (std::int64_t k = 1; k < local_vocab_rows; ++k)
    if (local_vocab_rows % k == 0 && local_vocab_rows / k * channels <= unit_numel) return static_cast<int>(k);
  return static_cast<int>(local_vocab_rows);
}

int gpt_vocab_pieces(const GptConfig& config, int tp_size, int zero_stage) {
  if (zero_stage < 3 || config.layers < 1) return 1;
  // Layer 0 on tp rank 0 (every rank's layers are cut alike) of a one-layer copy: the layout search
  // asks this per layout, and a whole model's shards would be listed each time.
  GptConfig one = config;
  one.layers = 1;
  GptPartition one_layer = GptPartition::whole(one);
  one_layer.tp_size = tp_size;
  std::vector<ParamSpec> specs;
  for (const ParamShard& s : gpt_param_shards(one, one_layer)) specs.push_back(s.local);
  std::int64_t largest = 0;
  for (const ParamUnit& u : gpt_param_units(specs)) {
    if (specs[u.first].layer != 0) continue;
    std::int64_t numel = 0;
    for (std::size_t p = u.first; p < u.first + u.count; ++p) numel += specs[p].numel();
    largest = std::max(largest, numel);
  }
  return vocab_pieces(config.vocab_rows() / tp_size, config.channels, largest);
}

bool is_primary_copy(const ParamShard& shard, const GptPartition& partition) {
  if (shard.replicated() && partition.tp_rank != 0) return false;
  return !(shard.full.kind == ParamKind::TokenEmbedding && !partition.embedding);
}

std::vector<ParamUnit> gpt_param_units(const std::vector<ParamSpec>& specs) {
  std::vector<ParamUnit> units;
  for (std::size_t i = 0; i < specs.size();) {
    const ParamSpec& s = specs[i];
    ParamUnit unit{"", i, 1};
    if (s.layer >= 0) {
      // A layer is two units: its attention (ln1 to attn.proj), then its MLP (from ln2 on). Each
      // is used alone in the forward and the backward, so ZeRO-3 holds half a layer at a time.
      const bool mlp = s.kind == ParamKind::Ln2Weight;
      unit.name = "h." + std::to_string(s.layer) + (mlp ? ".mlp" : ".attn");
      while (i + unit.count < specs.size() && specs[i + unit.count].layer == s.layer &&
             (mlp || specs[i + unit.count].kind != ParamKind::Ln2Weight))
        ++unit.count;
    } else if (s.kind == ParamKind::TokenEmbedding || s.kind == ParamKind::LmHead) {
      // llama's untied LM head is "head". Vocabulary pieces (GptOptions::vocab_pieces) are a unit
      // each, "embedding.<k>"; wpe joins the last.
      const std::string name = s.kind == ParamKind::LmHead ? "head" : "embedding";
      std::size_t pieces = 1;
      while (i + pieces < specs.size() && specs[i + pieces].kind == s.kind) ++pieces;
      for (std::size_t k = 0; k + 1 < pieces; ++k) units.push_back({name + "." + std::to_string(k), i + k, 1});
      unit = {pieces > 1 ? name + "." + std::to_string(pieces - 1) : name, i + pieces - 1, 1};
      i += pieces - 1;
      if (i + 1 < specs.size() && specs[i + 1].kind == ParamKind::PositionEmbedding) unit.count = 2;
    } else if (s.kind == ParamKind::LnfWeight) {
      unit.name = "lnf";
      if (i + 1 < specs.size() && specs[i + 1].kind == ParamKind::LnfBias) unit.count = 2;
    } else {
      MT_FAIL("parameter '", s.name, "' belongs to no unit");
    }
    MT_CHECK(i + unit.count <= specs.size(), "unit '", unit.name, "' runs past the parameters");
    i += unit.count;
    units.push_back(std::move(unit));
  }
  return units;
}

}  // namespace mt
