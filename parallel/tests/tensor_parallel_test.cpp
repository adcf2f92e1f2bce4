// TensorParallel's forward/backward pairs over a tp group: the whole world and, at 4 ranks, also
// two pairs {0,1} and {2,3}. Proves that
//  - a default TensorParallel is a group of one where every pair is the identity (bit for bit);
//  - copy/reduce/allreduce give exact sums and maxima (small integers: fp32 sums are exact);
//  - gather puts rank r's local [rows, cols] at columns [r*cols, (r+1)*cols) of the full tensor on
//    every rank (2-D and 3-D), scatter keeps exactly this rank's block, and each backward is the
//    other's forward, so scatter-then-gather round-trips;
//  - the pairs are adjoint: <forward(x), y> == <x, backward(y)> summed over the group as the
//    replication demands, for random x and y (within 1e-5 relative, fp32 rounding of short dots);
//  - the sequence pair: gather puts rank r's rows [r N/tp, (r+1) N/tp) in place on every rank,
//    reduce-scatter leaves each rank its rows of the sum, each backward is the other's forward,
//    and the two are adjoint;
//  - a shape mismatch throws mt::Error on every rank before anything is sent (no hang).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "parallel/tensor_parallel.h"
#include "tests/test_env.h"

namespace mt {
namespace {

using testing::test_context;
using testing::test_world;

// The tp groups this rank tests: the world, plus its own pair at 4 ranks (split is collective, so
// every rank asks for the same name; each names the members of its own pair).
std::vector<Communicator*> tp_groups() {
  Communicator& world = test_world();
  std::vector<Communicator*> groups{&world};
  if (world.size() == 4) {
    const int first = world.rank() / 2 * 2;
    groups.push_back(testing::test_group("tp_pair", {first, first + 1}));
  }
  return groups;
}

Tensor make(const std::vector<float>& values, Shape shape) {
  return Tensor::from_host(values, std::move(shape), test_context());
}
Tensor zeros(Shape shape) { return Tensor::zeros(std::move(shape), DType::F32, test_context()); }

// Rank r's local value at (row, col): tells rank, row and column apart, exact in fp32.
float local_value(int r, std::int64_t row, std::int64_t col) { return float(100 * r + 10 * row + col); }

std::vector<float> random_values(std::int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

double dot(const Tensor& a, const Tensor& b) {
  const auto x = a.to_host<float>(), y = b.to_host<float>();
  double s = 0;
  for (std::size_t i = 0; i < x.size(); ++i) s += double(x[i]) * y[i];
  return s;
}

// Sum of a per-rank scalar over the group (as fp32, which bounds the comparison's tolerance).
double group_sum(const TensorParallel& tp, double v) {
  Tensor t = make({float(v)}, {1});
  tp.allreduce(t, ReduceOp::Sum);
  return t.to_host<float>()[0];
}

void expect_close(double a, double b) { EXPECT_NEAR(a, b, 1e-5 * (1 + std::abs(a) + std::abs(b))); }

TEST(TensorParallel, DefaultIsAGroupOfOneAndEveryPairIsTheIdentity) {
  const TensorParallel tp;
  EXPECT_EQ(tp.size(), 1);
  EXPECT_EQ(tp.rank(), 0);
  EXPECT_FALSE(tp.active());
  EXPECT_EQ(tp.group(), nullptr);
  const std::vector<float> values = random_values(12, 7);
  for (auto op : {&TensorParallel::copy_forward, &TensorParallel::copy_backward, &TensorParallel::reduce_forward,
                  &TensorParallel::reduce_backward}) {
    Tensor t = make(values, {3, 4});
    (tp.*op)(t);
    EXPECT_EQ(t.to_host<float>(), values);  // float ==: bit for bit for these finite values
  }
  Tensor t = make(values, {3, 4});
  tp.allreduce(t, ReduceOp::Max);
  EXPECT_EQ(t.to_host<float>(), values);
  for (auto op : {&TensorParallel::gather_forward, &TensorParallel::gather_backward,
                  &TensorParallel::scatter_forward, &TensorParallel::scatter_backward}) {
    Tensor src = make(values, {3, 4}), dst = zeros({3, 4});
    (tp.*op)(test_context(), src, dst);
    EXPECT_EQ(dst.to_host<float>(), values);
    EXPECT_FALSE(dst.same_storage(src));  // a copy, not an alias
  }
}

TEST(TensorParallel, CopyReduceAndAllreduceSumOrMaxOverTheGroup) {
  for (Communicator* group : tp_groups()) {
    const TensorParallel tp(group);
    const int n = tp.size(), r = tp.rank();
    ASSERT_EQ(tp.active(), n > 1);
    const std::vector<float> mine{float(r + 1), float(2 * r), -float(r), 5.f};
    const std::vector<float> sum{float(n * (n + 1) / 2), float(n * (n - 1)), -float(n * (n - 1) / 2), 5.f * n};
    const std::vector<float> max{float(n), float(2 * (n - 1)), 0.f, 5.f};
    Tensor t = make(mine, {2, 2});
    tp.copy_forward(t);
    EXPECT_EQ(t.to_host<float>(), mine);
    tp.copy_backward(t);
    EXPECT_EQ(t.to_host<float>(), sum);
    t = make(mine, {2, 2});
    tp.reduce_forward(t);
    EXPECT_EQ(t.to_host<float>(), sum);
    tp.reduce_backward(t);
    EXPECT_EQ(t.to_host<float>(), sum);
    t = make(mine, {2, 2});
    tp.allreduce(t, ReduceOp::Max);
    EXPECT_EQ(t.to_host<float>(), max);
  }
}

TEST(TensorParallel, GatherPlacesEachRanksColumnBlockAndScatterTakesItsOwn) {
  const std::int64_t cols = 3;
  for (Communicator* group : tp_groups()) {
    for (const Shape& lead : {Shape{4}, Shape{2, 3}}) {  // rows = product of the leading dims
      const TensorParallel tp(group);
      const int n = tp.size(), r = tp.rank();
      const std::int64_t rows = shape_numel(lead);
      Shape local_shape = lead, full_shape = lead;
      local_shape.push_back(cols);
      full_shape.push_back(cols * n);
      std::vector<float> local(rows * cols), full(rows * cols * n);
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols * n; ++j) {
          full[i * cols * n + j] = local_value(int(j / cols), i, j % cols);
          if (j / cols == r) local[i * cols + j % cols] = full[i * cols * n + j];
        }
      SCOPED_TRACE(::testing::Message() << "group of " << n << ", local " << shape_str(local_shape));

      Tensor gathered = zeros(full_shape), scattered_back = zeros(full_shape);
      tp.gather_forward(test_context(), make(local, local_shape), gathered);
      EXPECT_EQ(gathered.to_host<float>(), full);
      tp.scatter_backward(test_context(), make(local, local_shape), scattered_back);
      EXPECT_EQ(scattered_back.to_host<float>(), full);

      Tensor own = zeros(local_shape), grad_own = zeros(local_shape);
      tp.scatter_forward(test_context(), make(full, full_shape), own);
      EXPECT_EQ(own.to_host<float>(), local);
      tp.gather_backward(test_context(), make(full, full_shape), grad_own);
      EXPECT_EQ(grad_own.to_host<float>(), local);

      Tensor round_trip = zeros(full_shape);  // scatter then gather: the full tensor again
      tp.gather_forward(test_context(), own, round_trip);
      EXPECT_EQ(round_trip.to_host<float>(), full);
    }
  }
}

// Replicated operands (the same on every rank) use the same seed everywhere; per-rank ones a
// rank-specific seed. An inner product of replicated tensors is counted once, not once per rank.
TEST(TensorParallel, ForwardAndBackwardHalvesAreAdjoint) {
  const std::int64_t rows = 5, cols = 4;
  for (Communicator* group : tp_groups()) {
    const TensorParallel tp(group);
    const int n = tp.size(), r = tp.rank();
    const unsigned mine = 1000 + 17 * unsigned(r), shared = 99;
    SCOPED_TRACE(::testing::Message() << "group of " << n);

    // gather: x per rank -> full replicated. <G x, y> = sum_r <x_r, (G^T y)_r>.
    const Tensor x_local = make(random_values(rows * cols, mine), {rows, cols});
    const Tensor y_full = make(random_values(rows * cols * n, shared), {rows, cols * n});
    Tensor gx = zeros({rows, cols * n}), gty = zeros({rows, cols});
    tp.gather_forward(test_context(), x_local, gx);
    tp.gather_backward(test_context(), y_full, gty);
    expect_close(dot(gx, y_full), group_sum(tp, dot(x_local, gty)));

    // scatter: full replicated -> x per rank. sum_r <S x, y_r> = <x, S^T y>.
    const Tensor x_full = make(random_values(rows * cols * n, shared + 1), {rows, cols * n});
    const Tensor y_local = make(random_values(rows * cols, mine + 1), {rows, cols});
    Tensor sx = zeros({rows, cols}), sty = zeros({rows, cols * n});
    tp.scatter_forward(test_context(), x_full, sx);
    tp.scatter_backward(test_context(), y_local, sty);
    expect_close(group_sum(tp, dot(sx, y_local)), dot(x_full, sty));

    // copy: x replicated -> a copy per rank. sum_r <x, y_r> = <x, copy_backward(y)>.
    const std::vector<float> x_rep = random_values(rows * cols, shared + 2);
    const Tensor y_rank = make(random_values(rows * cols, mine + 2), {rows, cols});
    Tensor cx = make(x_rep, {rows, cols}), cty = make(y_rank.to_host<float>(), {rows, cols});
    tp.copy_forward(cx);
    tp.copy_backward(cty);
    expect_close(group_sum(tp, dot(cx, y_rank)), dot(make(x_rep, {rows, cols}), cty));

    // reduce: x per rank -> the sum, replicated. <R x, y> = sum_r <x_r, reduce_backward(y)>.
    const Tensor x_rank = make(random_values(rows * cols, mine + 3), {rows, cols});
    const std::vector<float> y_rep = random_values(rows * cols, shared + 3);
    Tensor rx = make(x_rank.to_host<float>(), {rows, cols}), rty = make(y_rep, {rows, cols});
    tp.reduce_forward(rx);
    tp.reduce_backward(rty);
    expect_close(dot(rx, make(y_rep, {rows, cols})), group_sum(tp, dot(x_rank, rty)));
  }
}

TEST(TensorParallel, SequenceGatherAndReduceScatterWorkOnContiguousRowBlocks) {
  const std::int64_t rows = 3, cols = 2;  // this rank's rows
  for (Communicator* group : tp_groups()) {
    const TensorParallel tp(group);
    const int n = tp.size(), r = tp.rank();
    SCOPED_TRACE(::testing::Message() << "group of " << n);
    std::vector<float> local(rows * cols), full(rows * cols * n), partial(rows * cols * n), sum_rows(rows * cols);
    for (std::int64_t i = 0; i < rows * n; ++i)
      for (std::int64_t j = 0; j < cols; ++j) {
        const auto k = static_cast<std::size_t>(i * cols + j);
        full[k] = local_value(int(i / rows), i % rows, j);
        partial[k] = float(r + 1) * float(i * cols + j);  // sums exactly: n(n+1)/2 (i cols + j)
        if (i / rows == r) {
          local[static_cast<std::size_t>((i % rows) * cols + j)] = full[k];
          sum_rows[static_cast<std::size_t>((i % rows) * cols + j)] = float(n * (n + 1) / 2) * float(i * cols + j);
        }
      }
    Tensor gathered = zeros({rows * n, cols}), gathered_back = zeros({rows * n, cols});
    tp.sequence_gather_forward(test_context(), make(local, {rows, cols}), gathered);
    EXPECT_EQ(gathered.to_host<float>(), full);
    tp.sequence_reduce_scatter_backward(test_context(), make(local, {rows, cols}), gathered_back);
    EXPECT_EQ(gathered_back.to_host<float>(), full);
    Tensor mine = zeros({rows, cols}), dmine = zeros({rows, cols});
    tp.sequence_reduce_scatter_forward(test_context(), make(partial, {rows * n, cols}), mine);
    EXPECT_EQ(mine.to_host<float>(), sum_rows);
    tp.sequence_gather_backward(test_context(), make(partial, {rows * n, cols}), dmine);
    EXPECT_EQ(dmine.to_host<float>(), sum_rows);

    // Adjoint: <G x, y>, summed over ranks as each holds its own y, = sum_r <x_r, (G^T y)_r>.
    const Tensor x = make(random_values(rows * cols, 500 + 3 * unsigned(r)), {rows, cols});
    const Tensor y = make(random_values(rows * cols * n, 700 + 3 * unsigned(r)), {rows * n, cols});
    Tensor gx = zeros({rows * n, cols}), gty = zeros({rows, cols});
    tp.sequence_gather_forward(test_context(), x, gx);
    tp.sequence_gather_backward(test_context(), y, gty);
    expect_close(group_sum(tp, dot(gx, y)), group_sum(tp, dot(x, gty)));
  }
}

TEST(TensorParallel, ShapeMismatchThrowsOnEveryRankBeforeCommunicating) {
  for (Communicator* group : tp_groups()) {
    const TensorParallel tp(group);
    const int n = tp.size();
    const std::uint64_t issued = group->collectives_issued();
    const Tensor local = zeros({2, 3});
    Tensor wrong_cols = zeros({2, 3 * n + 1}), wrong_rows = zeros({3, 3 * n}), dlocal = zeros({2, 3});
    EXPECT_THROW(tp.gather_forward(test_context(), local, wrong_cols), Error);
    EXPECT_THROW(tp.gather_forward(test_context(), local, wrong_rows), Error);
    EXPECT_THROW(tp.scatter_backward(test_context(), local, wrong_cols), Error);
    EXPECT_THROW(tp.scatter_forward(test_context(), wrong_cols, dlocal), Error);
    EXPECT_THROW(tp.gather_backward(test_context(), wrong_rows, dlocal), Error);
    Tensor rows_short = zeros({2 * n - 1, 3}), cols_wrong = zeros({2 * n, 4});
    EXPECT_THROW(tp.sequence_gather_forward(test_context(), local, rows_short), Error);
    EXPECT_THROW(tp.sequence_gather_forward(test_context(), local, cols_wrong), Error);
    EXPECT_THROW(tp.sequence_reduce_scatter_forward(test_context(), rows_short, dlocal), Error);
    EXPECT_EQ(group->collectives_issued(), issued);  // nothing was sent
  }
  test_world().barrier();  // every rank got here: none is stuck in a collective
}

}  // namespace
}  // namespace mt
