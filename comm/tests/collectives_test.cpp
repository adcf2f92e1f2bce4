// Every collective x dtype x size x in-place/out-of-place x group, with exact expected values.
//
// Rank r of a group of n contributes v(r, i) = (r + 1) * (i % 7 + 1) (plus a rank-specific offset
// where data must be told apart). Sums peak at 7 * n(n+1)/2 = 252 for n = 8, and every value
// involved is an integer below 256 or a half-integer below 128, so fp32, bf16 and int32 all hold the
// expected results exactly: results are compared with ==, not a tolerance.
#include <gtest/gtest.h>

#include <memory>
#include <sstream>

#include "comm/communicator.h"
#include "runtime/functors.h"
#include "tests/test_env.h"

namespace mt {
namespace {

using testing::test_context;
using testing::test_world;

enum class Op { AllreduceSum, AllreduceAvg, AllreduceMax, AllreduceMin, ReduceScatterSum, ReduceScatterAvg,
                ReduceScatterMax, Allgather, Broadcast, Alltoall, SendRecvRing };
enum class Group { World, Parity, Single };
enum class Size { Zero, One, Odd, Indivisible, Big64MiB };

struct Case {
  Op op;
  DType dtype;
  Size size;
  bool in_place;
  Group group;
};

const char* op_name(Op op) {
  switch (op) {
    case Op::AllreduceSum: return "allreduce_sum";
    case Op::AllreduceAvg: return "allreduce_avg";
    case Op::AllreduceMax: return "allreduce_max";
    case Op::AllreduceMin: return "allreduce_min";
    case Op::ReduceScatterSum: return "reduce_scatter_sum";
    case Op::ReduceScatterAvg: return "reduce_scatter_avg";
    case Op::ReduceScatterMax: return "reduce_scatter_max";
    case Op::Allgather: return "allgather";
    case Op::Broadcast: return "broadcast";
    case Op::Alltoall: return "alltoall";
    case Op::SendRecvRing: return "sendrecv_ring";
  }
  return "?";
}
const char* size_name(Size s) {
  switch (s) {
    case Size::Zero: return "n0";
    case Size::One: return "n1";
    case Size::Odd: return "n37";
    case Size::Indivisible: return "indivisible";
    case Size::Big64MiB: return "64MiB";
  }
  return "?";
}
const char* group_name(Group g) {
  switch (g) {
    case Group::World: return "world";
    case Group::Parity: return "parity";
    case Group::Single: return "single";
  }
  return "?";
}

bool has_in_place(Op op) { return op != Op::Alltoall && op != Op::SendRecvRing && op != Op::Broadcast; }

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const Op ops[] = {Op::AllreduceSum, Op::AllreduceAvg, Op::AllreduceMax, Op::AllreduceMin, Op::ReduceScatterSum,
                    Op::ReduceScatterAvg, Op::ReduceScatterMax, Op::Allgather, Op::Broadcast, Op::Alltoall,
                    Op::SendRecvRing};
  for (Op op : ops) {
    for (DType dt : {DType::F32, DType::BF16, DType::I32}) {
      for (Size size : {Size::Zero, Size::One, Size::Odd, Size::Indivisible, Size::Big64MiB}) {
        for (bool in_place : {false, true}) {
          if (in_place && !has_in_place(op)) continue;
          for (Group g : {Group::World, Group::Parity, Group::Single}) {
            // 64 MiB buffers: fp32 on the world group is enough to exercise the large-message paths.
            if (size == Size::Big64MiB && (dt != DType::F32 || g != Group::World)) continue;
            cases.push_back({op, dt, size, in_place, g});
          }
        }
      }
    }
  }
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::ostringstream name;
  name << op_name(c.op) << '_' << dtype_name(c.dtype) << '_' << size_name(c.size) << '_'
       << (c.in_place ? "inplace" : "outofplace") << '_' << group_name(c.group);
  return name.str();
}

// Sub-communicators are made once, in the same order on every rank (split is collective).
Communicator& group_comm(Group g) {
  if (g == Group::World) return test_world();
  Communicator& world = test_world();
  std::vector<int> members;
  for (int r = 0; r < world.size(); ++r) {
    if (g == Group::Single ? r == world.rank() : r % 2 == world.rank() % 2) members.push_back(r);
  }
  return *testing::test_group(group_name(g), members);
}

// For reduce_scatter, allgather and alltoall this is the per-rank block (64 MiB: the whole tensor).
std::int64_t element_count(Size s, int group_size, DType dt) {
  switch (s) {
    case Size::Zero: return 0;
    case Size::One: return 1;
    case Size::Odd: return 37;
    case Size::Indivisible: return 1000 * group_size + 3;  // a remainder for any group of 2..8
    case Size::Big64MiB: return (64ll << 20) / static_cast<std::int64_t>(dtype_size(dt));
  }
  return 0;
}

double pattern(int rank, std::int64_t i) { return (rank + 1) * static_cast<double>(i % 7 + 1); }

// Host <-> tensor through doubles, whatever the dtype.
Tensor make_tensor(const std::vector<double>& values, DType dt) {
  DeviceContext& ctx = test_context();
  return dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> typed(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) typed[i] = narrow_to<T>(values[i]);
    return Tensor::from_host(typed, {static_cast<std::int64_t>(values.size())}, ctx);
  });
}

std::vector<double> read(const Tensor& t) {
  return dispatch_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> typed = t.to_host<T>();
    std::vector<double> out(typed.size());
    for (std::size_t i = 0; i < typed.size(); ++i) out[i] = static_cast<double>(widen(typed[i]));
    return out;
  });
}

double average(double sum, int n, DType dt) {
  if (dt == DType::I32) return static_cast<double>(static_cast<std::int32_t>(sum) / n);
  return sum / n;
}

// Compares without printing 16M lines on a mismatch.
void expect_equal(const std::vector<double>& got, const std::vector<double>& want, const Case& c) {
  ASSERT_EQ(got.size(), want.size());
  std::size_t bad = 0;
  std::size_t first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << op_name(c.op) << ": " << bad << " wrong elements; first at " << first << ": got "
                     << got[first] << ", want " << want[first];
}

class Collectives : public ::testing::TestWithParam<Case> {};

TEST_P(Collectives, ExactResult) {
  const Case c = GetParam();
  Communicator& comm = group_comm(c.group);
  const int n = comm.size();
  const int me = comm.rank();
  const std::int64_t count = element_count(c.size, n, c.dtype);

  switch (c.op) {
    case Op::AllreduceSum:
    case Op::AllreduceAvg:
    case Op::AllreduceMax:
    case Op::AllreduceMin: {
      std::vector<double> mine(static_cast<std::size_t>(count)), want(mine.size());
      for (std::int64_t i = 0; i < count; ++i) {
        mine[static_cast<std::size_t>(i)] = pattern(me, i);
        const double unit = static_cast<double>(i % 7 + 1);
        const double sum = unit * n * (n + 1) / 2;
        double w = sum;
        if (c.op == Op::AllreduceAvg) w = average(sum, n, c.dtype);
        if (c.op == Op::AllreduceMax) w = unit * n;
        if (c.op == Op::AllreduceMin) w = unit;
        want[static_cast<std::size_t>(i)] = w;
      }
      const ReduceOp rop = c.op == Op::AllreduceSum   ? ReduceOp::Sum
                           : c.op == Op::AllreduceAvg ? ReduceOp::Avg
                           : c.op == Op::AllreduceMax ? ReduceOp::Max
                                                      : ReduceOp::Min;
      Tensor in = make_tensor(mine, c.dtype);
      Tensor out = c.in_place ? in : Tensor::zeros({count}, c.dtype, test_context());
      WorkPtr work = comm.allreduce_async(in, out, {rop});
      work->wait();
      EXPECT_TRUE(work->test());
      EXPECT_EQ(work->desc().in_place(), c.in_place);
      expect_equal(read(out), want, c);
      if (!c.in_place) expect_equal(read(in), mine, c);  // out of place leaves the input alone
      break;
    }
    case Op::ReduceScatterSum:
    case Op::ReduceScatterAvg:
    case Op::ReduceScatterMax: {
      const std::int64_t block = c.size == Size::Big64MiB ? count / n : count;
      std::vector<double> mine(static_cast<std::size_t>(block * n)), want(static_cast<std::size_t>(block));
      // Element j of block b: rank r contributes (r + 1) * ((b * block + j) % 7 + 1).
      for (std::int64_t i = 0; i < block * n; ++i) mine[static_cast<std::size_t>(i)] = pattern(me, i);
      for (std::int64_t j = 0; j < block; ++j) {
        const double unit = static_cast<double>((me * block + j) % 7 + 1);
        const double sum = unit * n * (n + 1) / 2;
        want[static_cast<std::size_t>(j)] = c.op == Op::ReduceScatterSum   ? sum
                                            : c.op == Op::ReduceScatterAvg ? average(sum, n, c.dtype)
                                                                           : unit * n;
      }
      const ReduceOp rop = c.op == Op::ReduceScatterSum   ? ReduceOp::Sum
                           : c.op == Op::ReduceScatterAvg ? ReduceOp::Avg
                                                          : ReduceOp::Max;
      Tensor in = make_tensor(mine, c.dtype);
      Tensor out = c.in_place ? in.flat_slice(me * block, block) : Tensor::zeros({block}, c.dtype, test_context());
      comm.reduce_scatter_async(in, out, {rop})->wait();
      expect_equal(read(out), want, c);
      break;
    }
    case Op::Allgather: {
      const std::int64_t block = c.size == Size::Big64MiB ? count / n : count;
      std::vector<double> mine(static_cast<std::size_t>(block)), want(static_cast<std::size_t>(block * n));
      for (std::int64_t i = 0; i < block; ++i) mine[static_cast<std::size_t>(i)] = pattern(me, i);
      for (int r = 0; r < n; ++r) {
        for (std::int64_t i = 0; i < block; ++i) want[static_cast<std::size_t>(r * block + i)] = pattern(r, i);
      }
      Tensor out;
      Tensor in;
      if (c.in_place) {
        std::vector<double> staged(static_cast<std::size_t>(block * n), -1.0);
        std::copy(mine.begin(), mine.end(), staged.begin() + me * block);
        out = make_tensor(staged, c.dtype);
        in = out.flat_slice(me * block, block);
      } else {
        in = make_tensor(mine, c.dtype);
        out = Tensor::zeros({block * n}, c.dtype, test_context());
      }
      comm.allgather_async(in, out)->wait();
      expect_equal(read(out), want, c);
      break;
    }
    case Op::Broadcast: {
      const int root = n - 1;  // not always rank 0
      std::vector<double> mine(static_cast<std::size_t>(count)), want(mine.size());
      for (std::int64_t i = 0; i < count; ++i) {
        mine[static_cast<std::size_t>(i)] = me == root ? pattern(root, i) : -1.0;
        want[static_cast<std::size_t>(i)] = pattern(root, i);
      }
      Tensor t = make_tensor(mine, c.dtype);
      comm.broadcast_async(t, {root})->wait();
      expect_equal(read(t), want, c);
      break;
    }
    case Op::Alltoall: {
      const std::int64_t block = c.size == Size::Big64MiB ? count / n : count;
      // Block b of rank r's input goes to rank b. Values name the sender and the receiver and stay
      // below 256, exact in bf16: (from + 1) * 10 + (to + i) % 9.
      auto value = [&](int from, int to, std::int64_t i) { return (from + 1) * 10.0 + static_cast<double>((to + i) % 9); };
      std::vector<double> mine(static_cast<std::size_t>(block * n)), want(mine.size());
      for (int b = 0; b < n; ++b) {
        for (std::int64_t i = 0; i < block; ++i) {
          mine[static_cast<std::size_t>(b * block + i)] = value(me, b, i);
          want[static_cast<std::size_t>(b * block + i)] = value(b, me, i);
        }
      }
      Tensor in = make_tensor(mine, c.dtype);
      Tensor out = Tensor::zeros({block * n}, c.dtype, test_context());
      comm.alltoall_async(in, out)->wait();
      expect_equal(read(out), want, c);
      break;
    }
    case Op::SendRecvRing: {
      // Everyone sends to the next rank and receives from the previous one, both posted before
      // either is waited for: only works if the backend progresses them together.
      const int next = (me + 1) % n;
      const int prev = (me + n - 1) % n;
      std::vector<double> mine(static_cast<std::size_t>(count)), want(mine.size());
      for (std::int64_t i = 0; i < count; ++i) {
        mine[static_cast<std::size_t>(i)] = pattern(me, i);
        want[static_cast<std::size_t>(i)] = pattern(prev, i);
      }
      Tensor send = make_tensor(mine, c.dtype);
      Tensor recv = Tensor::zeros({count}, c.dtype, test_context());
      WorkPtr r = comm.recv_async(recv, prev, {3});
      WorkPtr s = comm.send_async(send, next, {3});
      r->wait();
      s->wait();
      expect_equal(read(recv), want, c);
      break;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, Collectives, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace mt
