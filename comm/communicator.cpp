#include "comm/communicator.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "comm/desync_check.h"
#include "comm/watchdog.h"

namespace mt {

bool CollectiveDesc::in_place() const {
  if (!input.defined() || !output.defined() || !input.same_storage(output)) return false;
  const auto* in = static_cast<const char*>(input.data());
  const auto* out = static_cast<const char*>(output.data());
  switch (kind) {
    case CollectiveKind::ReduceScatter: return out == in + static_cast<std::ptrdiff_t>(group_rank) * output.nbytes();
    case CollectiveKind::Allgather: return in == out + static_cast<std::ptrdiff_t>(group_rank) * input.nbytes();
    default: return in == out;
  }
}

std::size_t CollectiveDesc::bytes() const {
  if (kind == CollectiveKind::Batch) {
    std::size_t total = 0;
    for (const PointToPoint& m : messages) total += m.tensor.defined() ? m.tensor.nbytes() : 0;
    return total;
  }
  std::size_t in = input.defined() ? input.nbytes() : 0;
  std::size_t out = output.defined() ? output.nbytes() : 0;
  return std::max(in, out);
}

std::string CollectiveDesc::describe() const { return record().describe(); }

OpRecord CollectiveDesc::record() const {
  OpRecord r;
  r.kind = kind;
  r.sequence = sequence;
  const Tensor& t = input.defined() ? input : output;
  r.has_data = t.defined();
  if (r.has_data) {
    r.dtype = t.dtype();
    r.count = t.numel();
  }
  r.bytes = bytes();
  r.op = op;
  r.root = root;
  r.peer = peer;
  r.tag = tag;
  r.group_size = group_size;
  r.in_place = in_place();
  r.messages.reserve(messages.size());
  for (const PointToPoint& m : messages) {
    const bool defined = m.tensor.defined();
    r.messages.push_back(MessageRecord{m.kind == PointToPoint::Kind::Send, defined ? m.tensor.dtype() : DType::F32,
                                       defined ? m.tensor.numel() : 0, m.peer, m.tag});
  }
  r.where = where;
  return r;
}

std::chrono::milliseconds CommOptions::wait_limit() const {
  return watchdog ? timeout + watchdog->reporting_time() : timeout;
}

Work::Work(CollectiveDesc desc, std::chrono::milliseconds default_timeout)
    : record_(desc.record()), default_timeout_(default_timeout), desc_(std::move(desc)) {}

bool Work::test() {
  std::lock_guard lock(mutex_);
  return done_;
}

void Work::wait(std::chrono::milliseconds timeout) {
  // wait_for converts to the clock's nanoseconds: keep far-future timeouts from overflowing.
  timeout = std::min(timeout, std::chrono::milliseconds(std::chrono::hours(24 * 365 * 100)));
  std::unique_lock lock(mutex_);
  if (!done_cv_.wait_for(lock, timeout, [this] { return done_; })) {
    MT_FAIL_AS(TimeoutError, "timed out after ", timeout.count(), " ms waiting for ", describe());
  }
  if (error_) std::rethrow_exception(error_);
}

std::exception_ptr Work::error() const {
  std::lock_guard lock(mutex_);
  return error_;
}

void Work::end(std::exception_ptr error, bool keep_tensors) {
  {
    std::lock_guard lock(mutex_);
    if (done_) return;
    done_ = true;
    error_ = std::move(error);
    // In the same critical section as done_: a waiter that sees the op ended finds the tensors
    // released, so its caller's references are the last and the memory returns on its thread.
    if (!keep_tensors) desc_ = CollectiveDesc{};
  }
  done_cv_.notify_all();
}

namespace {
// MPI guarantees tags below 32768 (MPI_TAG_UB is at least 32767).
constexpr int kMaxTag = 1 << 15;

void check_same_device_and_dtype(const CollectiveDesc& d) {
  if (!d.input.defined() || !d.output.defined()) return;
  MT_CHECK(d.input.dtype() == d.output.dtype(), collective_name(d.kind), ": input ", d.input.describe(),
           " and output ", d.output.describe(), " differ in dtype");
  MT_CHECK(d.input.device() == d.output.device(), collective_name(d.kind), ": input ", d.input.describe(),
           " and output ", d.output.describe(), " are on different devices");
}

void check_sizes(const CollectiveDesc& d) {
  const std::int64_t n = d.group_size;
  const char* name = collective_name(d.kind);
  switch (d.kind) {
    case CollectiveKind::Allreduce:
      MT_CHECK(d.input.numel() == d.output.numel(), name, ": input has ", d.input.numel(), " elements, output ",
               d.output.numel());
      break;
    case CollectiveKind::ReduceScatter:
      MT_CHECK(d.input.numel() == d.output.numel() * n, name, ": input must hold group size (", n,
               ") x output elements, got ", d.input.numel(), " and ", d.output.numel());
      break;
    case CollectiveKind::Allgather:
      MT_CHECK(d.output.numel() == d.input.numel() * n, name, ": output must hold group size (", n,
               ") x input elements, got ", d.output.numel(), " and ", d.input.numel());
      break;
    case CollectiveKind::Alltoall:
      MT_CHECK(d.input.numel() == d.output.numel() && d.input.numel() % n == 0, name,
               ": input and output must hold the same count, divisible by the group size (", n, "), got ",
               d.input.numel(), " and ", d.output.numel());
      break;
    default: break;
  }
  const bool overlapping = d.input.defined() && d.output.defined() && d.input.same_storage(d.output);
  if (overlapping && d.kind != CollectiveKind::Broadcast && d.kind != CollectiveKind::Send &&
      d.kind != CollectiveKind::Recv) {
    if (d.kind == CollectiveKind::Alltoall) {
      const char* in = static_cast<const char*>(d.input.data());
      const char* out = static_cast<const char*>(d.output.data());
      MT_CHECK(in + d.input.nbytes() <= out || out + d.output.nbytes() <= in, name,
               ": input and output overlap (alltoall cannot run in place)");
    }
    MT_CHECK(d.in_place() || d.kind == CollectiveKind::Alltoall, name,
             ": input and output share storage but are not in place (see CollectiveDesc::in_place)");
  }
}
}  // namespace

WorkPtr Communicator::submit(CollectiveDesc desc) {
  desc.group_size = size_;
  desc.group_rank = rank_;
  check_same_device_and_dtype(desc);
  check_sizes(desc);
  if (desc.kind == CollectiveKind::Broadcast) {
    MT_CHECK(desc.root >= 0 && desc.root < size_, "broadcast root ", desc.root, " outside a group of ", size_);
  }
  if (desc.kind == CollectiveKind::Send || desc.kind == CollectiveKind::Recv) {
    MT_CHECK(desc.peer >= 0 && desc.peer < size_, collective_name(desc.kind), " peer ", desc.peer,
             " outside a group of ", size_);
    MT_CHECK(desc.tag >= 0 && desc.tag < kMaxTag, collective_name(desc.kind), " tag ", desc.tag,
             " outside [0, ", kMaxTag, ")");
    desc.sequence = p2p_sequence_++;
  } else if (desc.kind == CollectiveKind::Batch) {
    check_batch(desc);
    desc.sequence = p2p_sequence_++;
  } else {
    desc.sequence = collective_sequence_++;
  }
  if (options_.watchdog && !progress_) progress_ = options_.watchdog->join(label_, world_ranks());
  if (options_.debug_collectives && !is_point_to_point(desc.kind)) check_in_step(desc);
  WorkPtr work = launch(std::move(desc));
  if (options_.watchdog) options_.watchdog->track(work, progress_);
  return work;
}

void Communicator::check_batch(const CollectiveDesc& desc) const {
  const std::vector<PointToPoint>& all = desc.messages;
  // "p2p batch message 2 (recv from 1 tag 8)": which message, in the caller's numbering.
  auto which = [&](std::size_t i) {
    const PointToPoint& m = all[i];
    const bool send = m.kind == PointToPoint::Kind::Send;
    return "p2p batch message " + std::to_string(i) + " (" + (send ? "send to " : "recv from ") +
           std::to_string(m.peer) + " tag " + std::to_string(m.tag) + ")";
  };
  for (std::size_t i = 0; i < all.size(); ++i) {
    const PointToPoint& m = all[i];
    MT_CHECK(m.kind == PointToPoint::Kind::Send || m.kind == PointToPoint::Kind::Recv, which(i), ": unknown kind ",
             static_cast<int>(m.kind));
    MT_CHECK(m.tensor.defined(), which(i), ": no tensor");
    MT_CHECK(m.peer >= 0 && m.peer < size_, which(i), ": peer ", m.peer, " outside a group of ", size_);
    MT_CHECK(m.peer != rank_, which(i), ": the peer is this rank (", rank_,
             "); a batch exchanges with other ranks only: copy the tensor instead");
    MT_CHECK(m.tag >= 0 && m.tag < kMaxTag, which(i), ": tag ", m.tag, " outside [0, ", kMaxTag, ")");
    MT_CHECK(m.tensor.device() == all.front().tensor.device(), which(i), ": ", m.tensor.describe(),
             " is on another device than message 0 (", all.front().tensor.describe(),
             "); a batch runs on one device");
  }
  // A receive writes while the batch runs: no other message of it may read or write that memory.
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (all[i].kind != PointToPoint::Kind::Recv) continue;
    const Tensor& into = all[i].tensor;
    const char* lo = static_cast<const char*>(into.data());
    const char* hi = lo + into.nbytes();
    for (std::size_t j = 0; j < all.size(); ++j) {
      const Tensor& other = all[j].tensor;
      if (j == i || !other.same_storage(into) || into.nbytes() == 0 || other.nbytes() == 0) continue;
      const char* olo = static_cast<const char*>(other.data());
      MT_CHECK(hi <= olo || olo + other.nbytes() <= lo, which(i), " receives into memory that ", which(j),
               " also uses");
    }
  }
}

void Communicator::check_in_step(const CollectiveDesc& desc) {
  const CollectiveFingerprint mine = fingerprint_of(desc);
  std::vector<CollectiveFingerprint> all(static_cast<std::size_t>(size_));
  // The exchange is watched like an op: a member that never calls it is named by the watchdog.
  auto exchange = std::make_shared<Work>(desc, options_.wait_limit());
  if (options_.watchdog) options_.watchdog->track(exchange, progress_, true, "the desync check before ");
  allgather_host_bytes(&mine, all.data(), sizeof mine);
  exchange->complete();
  const auto report = find_desync(all, world_ranks(), label_);
  if (!report) return;
  // Every member has the same report: the group's first member prints it.
  if (options_.watchdog) options_.watchdog->end_job(*report, rank_ == 0);
  MT_FAIL(*report);
}

namespace {
CollectiveDesc make_desc(CollectiveKind kind, const Tensor& input, const Tensor& output, std::source_location where) {
  CollectiveDesc d;
  d.kind = kind;
  d.input = input;
  d.output = output;
  d.where = where;
  return d;
}
}  // namespace

WorkPtr Communicator::allreduce_async(const Tensor& input, const Tensor& output, AllreduceOptions opts, Here where) {
  CollectiveDesc d = make_desc(CollectiveKind::Allreduce, input, output, where);
  d.op = opts.op;
  return submit(std::move(d));
}

WorkPtr Communicator::reduce_scatter_async(const Tensor& input, const Tensor& output, ReduceScatterOptions opts,
                                           Here where) {
  CollectiveDesc d = make_desc(CollectiveKind::ReduceScatter, input, output, where);
  d.op = opts.op;
  return submit(std::move(d));
}

WorkPtr Communicator::allgather_async(const Tensor& input, const Tensor& output, Here where) {
  return submit(make_desc(CollectiveKind::Allgather, input, output, where));
}

WorkPtr Communicator::broadcast_async(const Tensor& tensor, BroadcastOptions opts, Here where) {
  CollectiveDesc d = make_desc(CollectiveKind::Broadcast, tensor, tensor, where);
  d.root = opts.root;
  return submit(std::move(d));
}

WorkPtr Communicator::alltoall_async(const Tensor& input, const Tensor& output, Here where) {
  return submit(make_desc(CollectiveKind::Alltoall, input, output, where));
}

WorkPtr Communicator::send_async(const Tensor& tensor, int peer, PointToPointOptions opts, Here where) {
  CollectiveDesc d = make_desc(CollectiveKind::Send, tensor, Tensor(), where);
  d.peer = peer;
  d.tag = opts.tag;
  return submit(std::move(d));
}

WorkPtr Communicator::recv_async(const Tensor& tensor, int peer, PointToPointOptions opts, Here where) {
  CollectiveDesc d = make_desc(CollectiveKind::Recv, Tensor(), tensor, where);
  d.peer = peer;
  d.tag = opts.tag;
  return submit(std::move(d));
}

WorkPtr Communicator::barrier_async(Here where) {
  return submit(make_desc(CollectiveKind::Barrier, Tensor(), Tensor(), where));
}

WorkPtr Communicator::batch_async(std::vector<PointToPoint> messages, Here where) {
  CollectiveDesc d = make_desc(CollectiveKind::Batch, Tensor(), Tensor(), where);
  d.messages = std::move(messages);
  if (d.messages.empty()) {
    // Nothing to exchange (a pipeline step with no neighbour traffic): done, and no op of the group.
    d.group_size = size_;
    d.group_rank = rank_;
    auto done = std::make_shared<Work>(std::move(d), options_.wait_limit());
    done->complete();
    return done;
  }
  return submit(std::move(d));
}

std::unique_ptr<Communicator> Communicator::split(const std::vector<int>& members, std::string label) {
  std::set<int> unique(members.begin(), members.end());
  MT_CHECK(unique.size() == members.size(), "split: a member is listed twice");
  for (int m : members) MT_CHECK(m >= 0 && m < size_, "split: member ", m, " outside a group of ", size_);
  auto me = std::find(members.begin(), members.end(), rank_);
  MT_CHECK(members.empty() || me != members.end(), "split: rank ", rank_, " lists a group it is not in");
  if (members.empty()) return split_by_color(-1, 0, members);
  // The smallest member names the group: disjoint groups get distinct colors.
  const int color = *std::min_element(members.begin(), members.end());
  auto group = split_by_color(color, static_cast<int>(me - members.begin()), members);
  if (group) group->label_ = label.empty() ? label_ + "/split" : std::move(label);
  return group;
}

}  // namespace mt
