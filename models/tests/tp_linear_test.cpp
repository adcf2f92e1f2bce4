// The column- and row-parallel linears (models/tp_linear.h) on a world that is one tp group (2 and
// 4 ranks), against the unsplit Linear on the same inputs, with and without sequence parallelism:
//  - column-parallel: each rank's output is its columns of X A; backward_input is every rank's
//    input gradient summed (all of it, or this rank's rows with sequence parallelism); the weight
//    and bias gradients are the rank's rows of the unsplit ones; a part replicated on every rank
//    gets the group's sum of the partial weight gradients;
//  - row-parallel: the forward is the whole X B + b (the bias once), or its rows here; output_grad
//    gives every rank the whole dY; the input and weight gradients are the rank's columns.
// The unsplit GEMMs sum in another order than the split ones: within 1e-5.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "models/tp_linear.h"
#include "tests/test_env.h"

namespace mt {
namespace {

constexpr std::int64_t kRows = 8, kIn = 12, kOut = 16;  // divisible by 2 and 4

std::vector<float> values(std::int64_t n, float seed) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(seed + 0.37f * static_cast<float>(i));
  return v;
}

// Columns [begin, begin + count) of a row-major [rows, cols] matrix.
std::vector<float> columns(const std::vector<float>& m, std::int64_t cols, std::int64_t begin, std::int64_t count) {
  std::vector<float> out;
  for (std::size_t r = 0; r < m.size() / static_cast<std::size_t>(cols); ++r)
    for (std::int64_t c = begin; c < begin + count; ++c) out.push_back(m[r * static_cast<std::size_t>(cols) + static_cast<std::size_t>(c)]);
  return out;
}

// Rows [begin, begin + count) of a row-major matrix of `cols` columns.
std::vector<float> rows(const std::vector<float>& m, std::int64_t cols, std::int64_t begin, std::int64_t count) {
  return {m.begin() + begin * cols, m.begin() + (begin + count) * cols};
}

Tensor tensor(const std::vector<float>& v, Shape shape) { return Tensor::from_host(v, std::move(shape), testing::test_context()); }

Linear linear(const std::vector<float>& w, std::int64_t out, std::int64_t in, const std::vector<float>& b) {
  DeviceContext& ctx = testing::test_context();
  Linear l;
  l.weight = tensor(w, {out, in});
  l.compute_weight = l.weight;
  l.dweight = Tensor::zeros({out, in}, DType::F32, ctx);
  if (!b.empty()) {
    l.bias = tensor(b, {out});
    l.dbias = Tensor::zeros({out}, DType::F32, ctx);
  }
  return l;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << what << " at " << i;
}

class TpLinear : public ::testing::TestWithParam<bool> {
 protected:
  TpLinear() : tp_(&testing::test_world()), region_(tp_, GetParam()) {}
  int p() const { return tp_.size(); }
  int r() const { return tp_.rank(); }
  // This rank's rows of an [kRows, cols] activation outside the region.
  std::int64_t local_rows() const { return GetParam() ? kRows / p() : kRows; }
  std::vector<float> here(const std::vector<float>& m, std::int64_t cols) const {
    return GetParam() ? rows(m, cols, r() * local_rows(), local_rows()) : m;
  }
  TensorParallel tp_;
  TpRegion region_;
};

TEST_P(TpLinear, ColumnParallelAgainstTheUnsplitLinear) {
  DeviceContext& ctx = testing::test_context();
  const std::int64_t out = kOut / p(), first = r() * out;
  const auto w = values(kOut * kIn, 1), b = values(kOut, 2), x = values(kRows * kIn, 3), dy = values(kRows * kOut, 4);
  Linear whole = linear(w, kOut, kIn, b);
  Tensor y = Tensor::empty({kRows, kOut}, DType::F32, ctx), dx = Tensor::empty({kRows, kIn}, DType::F32, ctx);
  whole.forward(ctx, tensor(x, {kRows, kIn}), y);
  whole.backward(ctx, tensor(dy, {kRows, kOut}), tensor(x, {kRows, kIn}), &dx);

  ColumnParallelLinear split({{linear(rows(w, kIn, first, out), out, kIn, rows(b, 1, first, out))}}, region_);
  Tensor full = Tensor::empty({kRows, kIn}, DType::F32, ctx), y_i = Tensor::empty({kRows, out}, DType::F32, ctx);
  const Tensor x_here = tensor(here(x, kIn), {local_rows(), kIn});
  split.forward(ctx, x_here, full, y_i);
  expect_near(y_i.to_host<float>(), columns(y.to_host<float>(), kOut, first, out), "y");

  Tensor dx_here = Tensor::empty({local_rows(), kIn}, DType::F32, ctx), dpartial = Tensor::empty({kRows, kIn}, DType::F32, ctx);
  split.backward(ctx, tensor(columns(dy, kOut, first, out), {kRows, out}), x_here, full, dx_here, dpartial);
  expect_near(dx_here.to_host<float>(), here(dx.to_host<float>(), kIn), "dx");
  expect_near(split.part(0).dweight.to_host<float>(), rows(whole.dweight.to_host<float>(), kIn, first, out), "dweight");
  expect_near(split.part(0).dbias.to_host<float>(), rows(whole.dbias.to_host<float>(), 1, first, out), "dbias");
}

// A part held whole on every rank, of which each rank's output gradient reaches only its share
// (llama's kv heads replicated over tp): its weight gradient is the sum over the group.
TEST_P(TpLinear, ReplicatedPartSumsItsWeightGradientOverTheGroup) {
  DeviceContext& ctx = testing::test_context();
  const std::int64_t out = kOut / p(), width = out + kOut;  // [split part | replicated part]
  const auto w = values(kOut * kIn, 5), x = values(kRows * kIn, 6);
  const auto dy = values(kRows * width, 7.0f + static_cast<float>(r()));  // differs per rank
  ColumnParallelLinear split({{linear(rows(w, kIn, r() * out, out), out, kIn, {})}, {linear(w, kOut, kIn, {}), true}},
                             region_);
  ASSERT_EQ(split.replicated_part(), &split.part(1));
  Tensor full = Tensor::empty({kRows, kIn}, DType::F32, ctx), scratch = Tensor::empty({kOut, kIn}, DType::F32, ctx);
  const Tensor x_here = tensor(here(x, kIn), {local_rows(), kIn});
  const Tensor& input = split.input(ctx, x_here, full);
  split.backward_weights(ctx, tensor(dy, {kRows, width}), input, &scratch);

  std::vector<float> want(static_cast<std::size_t>(kOut * kIn), 0.0f);
  for (int rank = 0; rank < p(); ++rank) {  // the unsplit linear on each rank's gradient, summed
    Linear one = linear(w, kOut, kIn, {});
    one.backward_weights(ctx, tensor(columns(values(kRows * width, 7.0f + static_cast<float>(rank)), width, out, kOut),
                                     {kRows, kOut}),
                         tensor(x, {kRows, kIn}));
    const auto d = one.dweight.to_host<float>();
    for (std::size_t i = 0; i < want.size(); ++i) want[i] += d[i];
  }
  expect_near(split.part(1).dweight.to_host<float>(), want, "replicated dweight");
}

TEST_P(TpLinear, RowParallelAgainstTheUnsplitLinear) {
  DeviceContext& ctx = testing::test_context();
  const std::int64_t in = kOut / p(), first = r() * in;  // B's rows: the column-parallel layer's outputs
  const auto w = values(kIn * kOut, 8), b = values(kIn, 9), x = values(kRows * kOut, 10), dy = values(kRows * kIn, 11);
  Linear whole = linear(w, kIn, kOut, b);
  Tensor y = Tensor::empty({kRows, kIn}, DType::F32, ctx), dx = Tensor::empty({kRows, kOut}, DType::F32, ctx);
  whole.forward(ctx, tensor(x, {kRows, kOut}), y);
  whole.backward(ctx, tensor(dy, {kRows, kIn}), tensor(x, {kRows, kOut}), &dx);

  RowParallelLinear split(linear(columns(w, kOut, first, in), kIn, in, b), region_);
  const Tensor x_i = tensor(columns(x, kOut, first, in), {kRows, in});
  Tensor partial = Tensor::empty({kRows, kIn}, DType::F32, ctx), local = Tensor::empty({local_rows(), kIn}, DType::F32, ctx);
  expect_near(split.forward(ctx, x_i, partial, local).to_host<float>(), here(y.to_host<float>(), kIn), "y");

  Tensor dy_here = tensor(here(dy, kIn), {local_rows(), kIn}), dfull = Tensor::empty({kRows, kIn}, DType::F32, ctx);
  const Tensor& dY = split.output_grad(ctx, dy_here, dfull);
  expect_near(dY.to_host<float>(), dy, "dY");
  Tensor kept = Tensor::empty({kRows, kIn}, DType::F32, ctx);
  split.keep_output_grad(ctx, dy_here, kept);
  EXPECT_EQ(kept.to_host<float>(), dY.to_host<float>());
  Tensor dx_i = Tensor::empty({kRows, in}, DType::F32, ctx);
  split.backward(ctx, dY, x_i, dx_i);
  expect_near(dx_i.to_host<float>(), columns(dx.to_host<float>(), kOut, first, in), "dx");
  expect_near(split.linear().dweight.to_host<float>(), columns(whole.dweight.to_host<float>(), kOut, first, in), "dweight");
  // Every rank's dbias is the whole one: the bias is added once, but each rank sees all of dY.
  expect_near(split.linear().dbias.to_host<float>(), whole.dbias.to_host<float>(), "dbias");
}

INSTANTIATE_TEST_SUITE_P(Layouts, TpLinear, ::testing::Values(false, true),
                         [](const auto& layout) { return layout.param ? "SequenceParallel" : "TensorParallel"; });

}  // namespace
}  // namespace mt
