#include "optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_set>

#include "runtime/backend.h"          // defines: backend::Cpu::adamw_multi, backend::Cuda::adamw, adamw_multi, cast
#include "runtime/op_profile.h"       // defines: OpScope

namespace mt {
namespace {

bool finite_nonnegative(float x) { return std::isfinite(x) && x >= 0.0f; }

void check_slot(const DeviceContext& ctx, const ParamSlot& s) {
  MT_CHECK(!s.name.empty(), "AdamW slot without a name");
  MT_CHECK(s.param.defined() && s.grad.defined(), "AdamW slot '", s.name, "': parameter ", s.param.describe(),
           ", gradient ", s.grad.describe());
  MT_CHECK(s.param.dtype() == DType::F32 && s.grad.dtype() == DType::F32, "AdamW slot '", s.name,
           "' needs fp32 parameter and gradient, got ", s.param.describe(), " and ", s.grad.describe());
  MT_CHECK(s.param.shape() == s.grad.shape(), "AdamW slot '", s.name, "': gradient ", s.grad.describe(),
           " is not shaped like parameter ", s.param.describe());
  MT_CHECK(s.param.device() == ctx.device() && s.grad.device() == ctx.device(), "AdamW slot '", s.name,
           "': parameter ", s.param.describe(), " and gradient ", s.grad.describe(), " used with a context on ",
           ctx.device().str());
  MT_CHECK(s.param.numel() == 0 || s.param.data() != s.grad.data(), "AdamW slot '", s.name,
           "': parameter and gradient are the same memory");
}

}  // namespace

void validate(const AdamWConfig& c) {
  MT_REQUIRE(std::isfinite(c.beta1) && c.beta1 >= 0.0f && c.beta1 < 1.0f, "AdamW beta1 must be in [0, 1), got ",
           c.beta1);
  MT_REQUIRE(std::isfinite(c.beta2) && c.beta2 >= 0.0f && c.beta2 < 1.0f, "AdamW beta2 must be in [0, 1), got ",
           c.beta2);
  MT_REQUIRE(std::isfinite(c.eps) && c.eps > 0.0f, "AdamW eps must be finite and > 0, got ", c.eps);
  MT_REQUIRE(finite_nonnegative(c.weight_decay), "AdamW weight_decay must be finite and >= 0, got ", c.weight_decay);
}

AdamW::AdamW(DeviceContext& ctx, std::vector<ParamSlot> slots, AdamWConfig config, std::vector<Tensor> compute)
    : ctx_(&ctx), slots_(std::move(slots)), compute_(std::move(compute)), config_(config) {
  validate(config_);
  std::unordered_set<std::string_view> names;
  for (const ParamSlot& s : slots_) {
    check_slot(ctx, s);
    MT_CHECK(names.insert(s.name).second, "AdamW slot name '", s.name, "' given twice");
  }
  MT_CHECK(compute_.empty() || compute_.size() == slots_.size(), "AdamW: ", compute_.size(), " bf16 copies for ",
           slots_.size(), " slots");
  compute_.resize(slots_.size());
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Tensor& c = compute_[i];
    if (!c.defined()) continue;
    MT_CHECK(c.dtype() == DType::BF16 && c.shape() == slots_[i].param.shape() && c.device() == ctx.device(),
             "AdamW slot '", slots_[i].name, "': its bf16 copy ", c.describe(), " is not a bf16 tensor shaped like ",
             slots_[i].param.describe());
  }
  m_.reserve(slots_.size());
  v_.reserve(slots_.size());
  for (const ParamSlot& s : slots_) {
    m_.push_back(Tensor::zeros(s.param.shape(), DType::F32, ctx));
    v_.push_back(Tensor::zeros(s.param.shape(), DType::F32, ctx));
  }

  // The table of one pass, cut once: the split never changes, so neither do the bits.
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const ParamSlot& s = slots_[i];
    AdamWTensor t;
    t.param = s.param.data_as<float>();
    t.grad = s.grad.data_as<float>();
    t.m = m_[i].data_as<float>();
    t.v = v_[i].data_as<float>();
    t.param_bf16 = compute_[i].defined() ? compute_[i].data_as<bf16>() : nullptr;
    t.numel = s.param.numel();
    t.weight_decay = s.decay ? config_.weight_decay : 0.0f;
    table_.push_back(t);
    for (std::int64_t begin = 0; begin < t.numel; begin += kAdamWChunk)
      chunks_.push_back({static_cast<std::int64_t>(i), begin, std::min(kAdamWChunk, t.numel - begin)});
  }
  if (ctx.device().is_cuda() && !chunks_.empty()) {
    const std::size_t table_bytes = table_.size() * sizeof(AdamWTensor);
    const std::size_t bytes = table_bytes + chunks_.size() * sizeof(AdamWChunk);
    std::vector<float> host((bytes + sizeof(float) - 1) / sizeof(float), 0.0f);
    std::memcpy(host.data(), table_.data(), table_bytes);
    std::memcpy(reinterpret_cast<char*>(host.data()) + table_bytes, chunks_.data(), bytes - table_bytes);
    device_table_ = Tensor::empty({static_cast<std::int64_t>(host.size())}, DType::F32, ctx);
    device_table_.copy_from_host(host.data(), host.size() * sizeof(float), ctx.stream());
    ctx.synchronize();  // `host` goes out of scope
  }
}

void AdamW::step(float lr, float grad_scale) {
  MT_CHECK(finite_nonnegative(lr), "AdamW learning rate must be finite and >= 0, got ", lr, " at step ",
           step_count_ + 1);
  MT_CHECK(finite_nonnegative(grad_scale), "AdamW grad_scale must be finite and >= 0, got ", grad_scale,
           " at step ", step_count_ + 1, " (a non-finite gradient norm?)");
  const std::int64_t t = step_count_ + 1;
  AdamWStepArgs args;
  args.lr = lr;
  args.beta1 = config_.beta1;
  args.beta2 = config_.beta2;
  args.one_minus_beta1 = 1.0f - config_.beta1;
  args.one_minus_beta2 = 1.0f - config_.beta2;
  // In double, then rounded once. Never 0 for t >= 1 since beta < 1 (beta = 0 gives 1).
  const auto bias_correction = [t](float beta) {
    return static_cast<float>(1.0 - std::pow(static_cast<double>(beta), static_cast<double>(t)));
  };
  args.bias_correction1 = bias_correction(config_.beta1);
  args.bias_correction2 = bias_correction(config_.beta2);
  args.eps = config_.eps;
  args.grad_scale = grad_scale;
  const auto chunks = static_cast<std::int64_t>(chunks_.size());
  if (ctx_->device().is_cpu()) {
    const OpScope scope(*ctx_, "adamw_multi");
    backend::Cpu::adamw_multi(args, table_.data(), chunks_.data(), chunks, ctx_->cpu_threads());
  } else if (ctx_->cuda_kernels().uses(OpFamily::Optimizer)) {
    const OpScope scope(*ctx_, "adamw_multi");
    // No device table when no slot has elements (chunks == 0: nothing to launch).
    const auto* table = device_table_.defined() ? static_cast<const char*>(device_table_.data()) : nullptr;
    const auto* chunk_table =
        table == nullptr ? nullptr : reinterpret_cast<const AdamWChunk*>(table + table_.size() * sizeof(AdamWTensor));
    backend::Cuda::adamw_multi(args, reinterpret_cast<const AdamWTensor*>(table), chunk_table, chunks,
                               ctx_->stream().handle());
  } else {
    // The reference: one launch per slot, then the bf16 copy cast from the result.
    for (const AdamWTensor& e : table_) {
      args.weight_decay = e.weight_decay;
      {
        const OpScope scope(*ctx_, "adamw");
        backend::Cuda::adamw(args, e.param, e.grad, e.m, e.v, e.numel, ctx_->stream().handle());
      }
      if (e.param_bf16 == nullptr || e.numel == 0) continue;
      const OpScope scope(*ctx_, "cast");
      backend::Cuda::cast(e.param, DType::F32, e.param_bf16, DType::BF16, e.numel, ctx_->stream().handle());
    }
  }
  step_count_ = t;
}

void AdamW::set_step_count(std::int64_t steps) {
  MT_CHECK(steps >= 0, "AdamW step count must be >= 0, got ", steps);
  step_count_ = steps;
}

const ParamSlot& AdamW::slot(std::size_t i) const {
  MT_CHECK(i < slots_.size(), "AdamW slot ", i, " of ", slots_.size());
  return slots_[i];
}

std::size_t AdamW::index_of(std::string_view name) const {
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].name == name) return i;
  }
  MT_FAIL("AdamW has no slot named '", name, "' (", slots_.size(), " slots)");
}

const Tensor& AdamW::m(std::size_t i) const {
  MT_CHECK(i < m_.size(), "AdamW slot ", i, " of ", m_.size());
  return m_[i];
}

const Tensor& AdamW::v(std::size_t i) const {
  MT_CHECK(i < v_.size(), "AdamW slot ", i, " of ", v_.size());
  return v_[i];
}

}  // namespace mt
