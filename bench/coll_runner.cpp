#include "bench/coll_runner.h"

#include <algorithm>
#include <chrono>
#include <sstream>

#include "bench/bench_env.h"
#include "comm/agreement.h"
#include "runtime/device.h"

namespace mt {

struct CollRunner::Buffers {
  Tensor whole;  // in place: the one buffer input and output are views of
  Tensor input;
  Tensor output;
};

namespace {

// Values in `dtype` on the tensor's device; rounding through the dtype is exact for our values.
void write_values(const Tensor& t, const std::vector<double>& values, DeviceContext& ctx) {
  dispatch_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> host(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      if constexpr (std::is_same_v<T, bf16>) {
        host[i] = bf16::from_float(static_cast<float>(values[i]));
      } else {
        host[i] = static_cast<T>(values[i]);
      }
    }
    Tensor view = t;  // copy_from_host is not const
    view.copy_from_host(host.data(), host.size() * sizeof(T), ctx.stream());
    ctx.synchronize();  // `host` dies here
  });
}

std::vector<double> read_values(const Tensor& t) {
  return dispatch_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const std::vector<T> host = t.to_host<T>();
    std::vector<double> out(host.size());
    for (std::size_t i = 0; i < host.size(); ++i) {
      if constexpr (std::is_same_v<T, bf16>) {
        out[i] = host[i].to_float();
      } else {
        out[i] = static_cast<double>(host[i]);
      }
    }
    return out;
  });
}

double as_dtype(double v, DType dtype) {
  if (dtype == DType::BF16) return bf16::from_float(static_cast<float>(v)).to_float();
  if (dtype == DType::F32) return static_cast<float>(v);
  return v;
}

using clock_type = std::chrono::steady_clock;

}  // namespace

CollRunner::CollRunner(Communicator& comm, DeviceContext& ctx, RawColl& raw, CollSettings settings)
    : comm_(comm), ctx_(ctx), raw_(raw), settings_(settings), sync_(MpiComm::world().dup()) {
  if (raw_.host_memory_only() && !ctx_.device().is_cpu()) host_ctx_ = std::make_unique<DeviceContext>(DeviceOptions{});
}

bool CollRunner::runs(const CollOpInfo& op, Placement p) const {
  if (comm_.size() < op.min_ranks) return false;
  return p == Placement::OutOfPlace ? settings_.out_of_place && op.has_out_of_place
                                    : settings_.in_place && op.has_in_place;
}

std::optional<Placement> CollRunner::raw_placement(const CollOpInfo& op) const {
  if (runs(op, Placement::OutOfPlace)) return Placement::OutOfPlace;
  if (runs(op, Placement::InPlace)) return Placement::InPlace;
  return std::nullopt;
}

CollRunner::Buffers CollRunner::make_buffers(CollOp op, const CollShape& shape, Placement p, DeviceContext& ctx) const {
  Buffers b;
  if (p == Placement::OutOfPlace) {
    b.input = Tensor::empty({shape.in_elems}, settings_.dtype, ctx);
    b.output = Tensor::empty({shape.out_elems}, settings_.dtype, ctx);
    return b;
  }
  const int rank = comm_.rank();
  b.whole = Tensor::empty({in_place_elements(shape)}, settings_.dtype, ctx);
  b.input = b.whole.flat_slice(input_offset_in_place(op, shape, rank), shape.in_elems);
  b.output = b.whole.flat_slice(output_offset_in_place(op, shape, rank), shape.out_elems);
  return b;
}

void CollRunner::fill(const Buffers& b, CollOp op, const CollShape& shape, Placement p, DeviceContext& ctx) const {
  const int rank = comm_.rank();
  // Broadcast: only the root has data; the others' buffer must be overwritten.
  const bool has_input = op != CollOp::Broadcast || rank == 0;
  if (p == Placement::OutOfPlace) {
    std::vector<double> in(static_cast<std::size_t>(shape.in_elems), sentinel_value());
    for (std::int64_t i = 0; has_input && i < shape.in_elems; ++i) in[static_cast<std::size_t>(i)] = fill_value(rank, i);
    write_values(b.input, in, ctx);
    write_values(b.output, std::vector<double>(static_cast<std::size_t>(shape.out_elems), sentinel_value()), ctx);
    return;
  }
  std::vector<double> whole(static_cast<std::size_t>(in_place_elements(shape)), sentinel_value());
  const std::int64_t offset = input_offset_in_place(op, shape, rank);
  for (std::int64_t i = 0; has_input && i < shape.in_elems; ++i) {
    whole[static_cast<std::size_t>(offset + i)] = fill_value(rank, i);
  }
  write_values(b.whole, whole, ctx);
}

std::optional<std::string> CollRunner::check(const Tensor& output, const CollOpInfo& op, const CollShape& shape,
                                             Placement p, const std::string& who) const {
  const std::vector<double> got = read_values(output);
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto index = static_cast<std::int64_t>(i);
    const double want = as_dtype(expected_output(op.op, shape, comm_.rank(), comm_.size(), index), settings_.dtype);
    if (got[i] == want) continue;
    std::ostringstream msg;
    msg << "--check: " << who << ' ' << op.name << ' ' << placement_name(p) << ", " << shape.bytes << " B ("
        << shape.count << " x " << dtype_name(settings_.dtype) << " per call): rank " << comm_.rank() << "'s output element " << i << " is "
        << got[i] << ", expected " << want;
    return msg.str();
  }
  return std::nullopt;
}

void CollRunner::agree(const std::optional<std::string>& error) { agree_on_error(comm_, ctx_, error); }

void CollRunner::start_ours(CollOp op, const Buffers& b, std::vector<WorkPtr>& works) {
  switch (op) {
    case CollOp::Allreduce: works.push_back(comm_.allreduce_async(b.input, b.output)); break;
    case CollOp::ReduceScatter: works.push_back(comm_.reduce_scatter_async(b.input, b.output)); break;
    case CollOp::Allgather: works.push_back(comm_.allgather_async(b.input, b.output)); break;
    case CollOp::Broadcast: works.push_back(comm_.broadcast_async(b.output)); break;
    case CollOp::Alltoall: works.push_back(comm_.alltoall_async(b.input, b.output)); break;
    case CollOp::Sendrecv: {
      const int n = comm_.size(), rank = comm_.rank();
      const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
      // Even ranks send first, odd ranks receive first: no ring of blocking sends on NCCL.
      if (rank % 2 == 0) works.push_back(comm_.send_async(b.input, next));
      works.push_back(comm_.recv_async(b.output, prev));
      if (rank % 2 != 0) works.push_back(comm_.send_async(b.input, next));
      break;
    }
  }
}

double CollRunner::timed(int warmup, int iters, const std::function<void()>& start,
                         const std::function<void()>& wait_all) {
  const int batch = settings_.in_flight;
  for (int i = 0; i < warmup; ++i) {
    start();
    if ((i + 1) % batch == 0) wait_all();
  }
  wait_all();
  MT_MPI_CHECK(MPI_Barrier(sync_.get()));
  const auto t0 = clock_type::now();
  for (int i = 0; i < iters; ++i) {
    start();
    if ((i + 1) % batch == 0) wait_all();
  }
  wait_all();
  return slowest_rank_seconds(sync_.get(), std::chrono::duration<double>(clock_type::now() - t0).count() / iters);
}

CollRow CollRunner::run(const CollOpInfo& op, const CollShape& shape, int warmup, int iters) {
  CollRow row;
  row.shape = shape;
  row.warmup = warmup;
  row.iters = iters;
  const std::optional<Placement> raw_p = raw_placement(op);
  if (!raw_p) return row;
  row.raw_placement = *raw_p;

  std::vector<WorkPtr> works;
  const auto wait_ours = [&] {
    for (const WorkPtr& w : works) w->wait();
    works.clear();
  };
  std::array<std::optional<Buffers>, 2> ours;  // by Placement
  for (Placement p : {Placement::OutOfPlace, Placement::InPlace}) {
    if (!runs(op, p)) continue;
    Buffers& b = ours[static_cast<std::size_t>(p)].emplace(make_buffers(op.op, shape, p, ctx_));
    fill(b, op.op, shape, p, ctx_);
    if (settings_.check) {
      start_ours(op.op, b, works);
      wait_ours();
      agree(check(b.output, op, shape, p, "ours:"));
    }
  }
  // The raw side runs on ours' buffers of its placement, or on host copies where it must.
  const Buffers rb = host_ctx_ ? make_buffers(op.op, shape, *raw_p, *host_ctx_) : *ours[static_cast<std::size_t>(*raw_p)];
  fill(rb, op.op, shape, *raw_p, host_ctx_ ? *host_ctx_ : ctx_);
  auto start_raw = [&] { raw_.start(op.op, *raw_p, shape, settings_.dtype, rb.input.data(), rb.output.data()); };
  if (settings_.check) {
    start_raw();
    raw_.wait_all();
    Tensor out = rb.output;
    if (op.op == CollOp::ReduceScatter && *raw_p == Placement::InPlace) {
      out = rb.whole.flat_slice(raw_.reduce_scatter_in_place_offset(shape, comm_.rank()), shape.count);
    }
    agree(check(out, op, shape, *raw_p, "raw " + raw_.name() + ":"));
  }

  // Rounds alternate ours and raw, so a change in the machine's load hits both alike.
  const auto keep_fastest = [](CollTiming& t, double seconds) {
    t.seconds = t.ran ? std::min(t.seconds, seconds) : seconds;
    t.ran = true;
  };
  for (int round = 0; round < settings_.rounds; ++round) {
    for (Placement p : {Placement::OutOfPlace, Placement::InPlace}) {
      const std::optional<Buffers>& b = ours[static_cast<std::size_t>(p)];
      if (!b) continue;
      keep_fastest(row.ours[static_cast<std::size_t>(p)],
                   timed(warmup, iters, [&] { start_ours(op.op, *b, works); }, wait_ours));
    }
    keep_fastest(row.raw, timed(warmup, iters, start_raw, [&] { raw_.wait_all(); }));
  }
  return row;
}

}  // namespace mt
