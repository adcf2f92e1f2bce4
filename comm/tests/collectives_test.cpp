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
#include "runtime/ops/elementwise.h"
#include "tests/test_env.h"

namespace mt {
namespace {

using testing::test_context;
using testing::test_world;

enum class Op { AllreduceSum, AllreduceAvg, AllreduceMax, AllreduceMin, ReduceScatterSum, ReduceScatterAvg,
                ReduceScatterMax, Allgather, Broadcast, Alltoall, SendRecvRing };
enum class Group { World, Parity, Single };
enum class Size { Zero, One, Odd, Indivisible, Big16MiB };

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
    case Size::Big16MiB: return "16MiB";
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

bool is_reduction(Op op) {
  return op == Op::AllreduceSum || op == Op::AllreduceAvg || op == Op::AllreduceMax || op == Op::AllreduceMin ||
         op == Op::ReduceScatterSum || op == Op::ReduceScatterAvg || op == Op::ReduceScatterMax;
}

ReduceOp reduce_op_of(Op op) {
  switch (op) {
    case Op::AllreduceAvg:
    case Op::ReduceScatterAvg: return ReduceOp::Avg;
    case Op::AllreduceMax:
    case Op::ReduceScatterMax: return ReduceOp::Max;
    case Op::AllreduceMin: return ReduceOp::Min;
    default: return ReduceOp::Sum;
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const Op ops[] = {Op::AllreduceSum, Op::AllreduceAvg, Op::AllreduceMax, Op::AllreduceMin, Op::ReduceScatterSum,
                    Op::ReduceScatterAvg, Op::ReduceScatterMax, Op::Allgather, Op::Broadcast, Op::Alltoall,
                    Op::SendRecvRing};
  for (Op op : ops) {
    for (DType dt : {DType::F32, DType::BF16, DType::I32}) {
      for (Size size : {Size::Zero, Size::One, Size::Odd, Size::Indivisible, Size::Big16MiB}) {
        for (bool in_place : {false, true}) {
          if (in_place && !has_in_place(op)) continue;
          for (Group g : {Group::World, Group::Parity, Group::Single}) {
            // 16 MiB buffers on the world group: far beyond where MPI switches to its segmented,
            // rendezvous algorithms (a few hundred KiB), so the large-message paths run; 64 MiB took
            // four times as long on the shared 2-core CI for no other path. Data movement is the
            // same bytes whatever the dtype: fp32 covers it; reductions differ by dtype (bf16 is a
            // user-defined MPI op applied to segments of a large message), so every dtype reduces 16 MiB.
            if (size == Size::Big16MiB && (g != Group::World || (dt != DType::F32 && !is_reduction(op)))) continue;
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

// For reduce_scatter, allgather and alltoall this is the per-rank block (16 MiB: the whole tensor).
std::int64_t element_count(Size s, int group_size, DType dt) {
  switch (s) {
    case Size::Zero: return 0;
    case Size::One: return 1;
    case Size::Odd: return 37;
    case Size::Indivisible: return 1000 * group_size + 3;  // a remainder for any group of 2..8
    case Size::Big16MiB: return (16ll << 20) / static_cast<std::int64_t>(dtype_size(dt));
  }
  return 0;
}

double pattern(int rank, std::int64_t i) { return (rank + 1) * static_cast<double>(i % 7 + 1); }

// Tensors are filled and checked through functions of the element index, in the tensor's own
// type: no 16 MiB arrays of doubles per rank (eight ranks share two cores and their memory).
template <class Value>
Tensor make_tensor(std::int64_t n, DType dt, Value value) {
  return dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> typed(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) typed[static_cast<std::size_t>(i)] = narrow_to<T>(value(i));
    return Tensor::from_host(typed, {n}, test_context());
  });
}

// Every element of `t` equals want(i) exactly; a mismatch reports the count and the first one.
template <class Want>
void expect_values(const Tensor& t, Want want, const Case& c, const char* what) {
  dispatch_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const std::vector<T> got = t.to_host<T>();
    std::size_t bad = 0;
    std::int64_t first = 0;
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(got.size()); ++i) {
      if (static_cast<double>(widen(got[static_cast<std::size_t>(i)])) != want(i) && bad++ == 0) first = i;
    }
    EXPECT_EQ(bad, 0u) << op_name(c.op) << ' ' << what << ": " << bad << " wrong elements; first at " << first
                       << ": got " << (got.empty() ? 0.0 : static_cast<double>(widen(got[static_cast<std::size_t>(first)])))
                       << ", want " << want(first);
  });
}

double average(double sum, int n, DType dt) {
  if (dt == DType::I32) return static_cast<double>(static_cast<std::int32_t>(sum) / n);
  return sum / n;
}


// The reduction over all ranks of the group of (r + 1) * unit: sum n(n+1)/2, max n, min 1 units.
double reduced(ReduceOp op, double unit, int n, DType dt) {
  const double sum = unit * n * (n + 1) / 2;
  switch (op) {
    case ReduceOp::Sum: return sum;
    case ReduceOp::Avg: return average(sum, n, dt);
    case ReduceOp::Max: return unit * n;
    case ReduceOp::Min: return unit;
  }
  return sum;
}

class Collectives : public ::testing::TestWithParam<Case> {};

TEST_P(Collectives, ExactResult) {
  const Case c = GetParam();
  Communicator& comm = group_comm(c.group);
  const int n = comm.size();
  const int me = comm.rank();
  const std::int64_t count = element_count(c.size, n, c.dtype);
  // 16 MiB is the size of the largest tensor of the op; smaller sizes are per-rank blocks.
  const std::int64_t block = c.size == Size::Big16MiB ? count / n : count;
  auto mine = [me](std::int64_t i) { return pattern(me, i); };

  switch (c.op) {
    case Op::AllreduceSum:
    case Op::AllreduceAvg:
    case Op::AllreduceMax:
    case Op::AllreduceMin: {
      const ReduceOp rop = reduce_op_of(c.op);
      Tensor in = make_tensor(count, c.dtype, mine);
      Tensor out = c.in_place ? in : Tensor::zeros({count}, c.dtype, test_context());
      WorkPtr work = comm.allreduce_async(in, out, {rop});
      work->wait();
      EXPECT_TRUE(work->test());
      EXPECT_EQ(work->record().in_place, c.in_place);
      expect_values(out, [&](std::int64_t i) { return reduced(rop, static_cast<double>(i % 7 + 1), n, c.dtype); }, c,
                    "output");
      if (!c.in_place) expect_values(in, mine, c, "input (left alone out of place)");
      break;
    }
    case Op::ReduceScatterSum:
    case Op::ReduceScatterAvg:
    case Op::ReduceScatterMax: {
      // Element j of this rank's block is element me * block + j of every rank's input.
      const ReduceOp rop = reduce_op_of(c.op);
      Tensor in = make_tensor(block * n, c.dtype, mine);
      Tensor out = c.in_place ? in.flat_slice(me * block, block) : Tensor::zeros({block}, c.dtype, test_context());
      WorkPtr work = comm.reduce_scatter_async(in, out, {rop});
      work->wait();
      EXPECT_EQ(work->record().in_place, c.in_place);
      expect_values(out, [&](std::int64_t j) {
        return reduced(rop, static_cast<double>((me * block + j) % 7 + 1), n, c.dtype);
      }, c, "output");
      break;
    }
    case Op::Allgather: {
      Tensor in;
      Tensor out;
      if (c.in_place) {
        // This rank's block already sits in the output; the rest is garbage to be overwritten.
        out = make_tensor(block * n, c.dtype, [&](std::int64_t i) { return i / block == me ? pattern(me, i % block) : -1.0; });
        in = out.flat_slice(me * block, block);
      } else {
        in = make_tensor(block, c.dtype, mine);
        out = Tensor::zeros({block * n}, c.dtype, test_context());
      }
      WorkPtr work = comm.allgather_async(in, out);
      work->wait();
      EXPECT_EQ(work->record().in_place, c.in_place);
      expect_values(out, [&](std::int64_t i) { return pattern(static_cast<int>(i / block), i % block); }, c, "output");
      break;
    }
    case Op::Broadcast: {
      const int root = n - 1;  // not always rank 0
      Tensor t = make_tensor(count, c.dtype, [&](std::int64_t i) { return me == root ? pattern(root, i) : -1.0; });
      comm.broadcast_async(t, {root})->wait();
      expect_values(t, [&](std::int64_t i) { return pattern(root, i); }, c, "tensor");
      break;
    }
    case Op::Alltoall: {
      // Block b of rank r's input goes to rank b. Values name the sender and the receiver and stay
      // below 256, exact in bf16: (from + 1) * 10 + (to + i) % 9.
      auto value = [](int from, int to, std::int64_t i) { return (from + 1) * 10.0 + static_cast<double>((to + i) % 9); };
      Tensor in = make_tensor(block * n, c.dtype, [&](std::int64_t i) { return value(me, static_cast<int>(i / block), i % block); });
      Tensor out = Tensor::zeros({block * n}, c.dtype, test_context());
      comm.alltoall_async(in, out)->wait();
      expect_values(out, [&](std::int64_t i) { return value(static_cast<int>(i / block), me, i % block); }, c, "output");
      break;
    }
    case Op::SendRecvRing: {
      // Everyone sends to the next rank and receives from the previous one, both posted before
      // either is waited for: only works if the backend progresses them together.
      const int next = (me + 1) % n;
      const int prev = (me + n - 1) % n;
      Tensor send = make_tensor(count, c.dtype, mine);
      Tensor recv = Tensor::zeros({count}, c.dtype, test_context());
      WorkPtr r = comm.recv_async(recv, prev, {3});
      WorkPtr s = comm.send_async(send, next, {3});
      r->wait();
      s->wait();
      expect_values(recv, [&](std::int64_t i) { return pattern(prev, i); }, c, "received");
      break;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, Collectives, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace mt
