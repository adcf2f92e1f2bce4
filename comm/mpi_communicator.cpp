#include "comm/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>

#include "comm/mpi_types.h"
#include "runtime/cuda_api.h"
#include "runtime/pinned_buffer.h"
#include "runtime/ops/elementwise.h"

namespace mt {
namespace {

// Host addresses the MPI calls use. For host tensors, the tensors themselves; for device tensors,
// a pinned copy of the storage window both tensors live in (so in-place layouts stay in place).
struct HostView {
  char* input = nullptr;
  char* output = nullptr;
  std::shared_ptr<PinnedHostBuffer> staging;  // page-locked: fast DMA both ways
};

HostView stage(const CollectiveDesc& d) {
  HostView v;
  const Tensor& any = d.input.defined() ? d.input : d.output;
  if (!any.defined()) return v;
  if (any.device().is_cpu()) {
    v.input = d.input.defined() ? static_cast<char*>(d.input.data()) : nullptr;
    v.output = d.output.defined() ? static_cast<char*>(d.output.data()) : nullptr;
    return v;
  }
  // The producer of the data runs on the caller's streams: let it finish before copying out.
  const int device = any.device().index;
  cuda::set_device(device);
  cuda::synchronize_device();
  const bool shared = d.input.defined() && d.output.defined() && d.input.same_storage(d.output);
  if (shared) {
    // One pinned copy of the window from the lower start to the higher end of the two tensors.
    const char* in = static_cast<const char*>(d.input.data());
    const char* out = static_cast<const char*>(d.output.data());
    const char* lo = std::min(in, out);
    const char* hi = std::max(in + d.input.nbytes(), out + d.output.nbytes());
    const auto bytes = static_cast<std::size_t>(hi - lo);
    v.staging = std::make_shared<PinnedHostBuffer>(bytes, Device::cuda(device));
    copy_bytes(v.staging->data(), Device::cpu(), lo, d.input.device(), bytes, Stream(d.input.device()));
    v.input = v.staging->data() + (in - lo);
    v.output = v.staging->data() + (out - lo);
    return v;
  }
  // Separate storage: one buffer, input first, then output.
  const std::size_t in_bytes = d.input.defined() ? d.input.nbytes() : 0;
  const std::size_t out_bytes = d.output.defined() ? d.output.nbytes() : 0;
  v.staging = std::make_shared<PinnedHostBuffer>(in_bytes + out_bytes, Device::cuda(device));
  if (in_bytes) {
    v.input = v.staging->data();
    copy_bytes(v.input, Device::cpu(), d.input.data(), d.input.device(), in_bytes, Stream(d.input.device()));
  }
  if (out_bytes) v.output = v.staging->data() + in_bytes;
  return v;
}

// Device tensors get the staged result back.
void unstage(const CollectiveDesc& d, const HostView& v) {
  if (!v.staging || !d.output.defined() || d.kind == CollectiveKind::Send) return;
  copy_bytes(d.output.data(), d.output.device(), v.output, Device::cpu(), d.output.nbytes(), Stream(d.output.device()));
}

void divide(char* data, DType dtype, std::int64_t n, int divisor) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = reinterpret_cast<T*>(data);
    for (std::int64_t i = 0; i < n; ++i) p[i] = narrow_to<T>(widen(p[i]) / static_cast<decltype(widen(p[i]))>(divisor));
  });
}

int checked_count(std::int64_t n, const CollectiveDesc& d) {
  MT_CHECK(n <= INT_MAX, d.describe(), ": more than 2^31-1 elements in one MPI call");
  return static_cast<int>(n);
}

}  // namespace

MpiCommunicator::MpiCommunicator(MpiComm comm, std::shared_ptr<MpiEngine> engine, CommOptions options)
    : Communicator(comm.rank(), comm.size(), options),
      control_(std::move(comm)),
      data_(std::make_shared<MpiComm>(control_.dup())),
      engine_(std::move(engine)),
      world_ranks_(control_.world_ranks()) {}

std::unique_ptr<MpiCommunicator> MpiCommunicator::world(CommOptions options) {
  return std::make_unique<MpiCommunicator>(MpiComm::world().dup(), std::make_shared<MpiEngine>(options.timeout),
                                           options);
}

std::unique_ptr<Communicator> MpiCommunicator::split_by_color(int color, int key, const std::vector<int>& members) {
  MpiComm group = control_.split_by_color(color, key, members);
  if (!group.valid()) return nullptr;
  return std::make_unique<MpiCommunicator>(std::move(group), engine_, options());
}

void MpiCommunicator::allgather_host_bytes(const void* mine, void* all, std::size_t bytes) {
  MT_MPI_CHECK(MPI_Allgather(mine, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes), MPI_BYTE, control_.get()));
}

WorkPtr MpiCommunicator::launch_batch(CollectiveDesc desc) {
  // Each message as a send or receive of its own, staged like one: device tensors go through
  // pinned host memory, copied in now and out once every message of the batch has completed.
  struct Message {
    CollectiveDesc part;
    HostView view;
    MPI_Datatype type;
  };
  auto messages = std::make_shared<std::vector<Message>>();
  messages->reserve(desc.messages.size());
  for (const PointToPoint& m : desc.messages) {
    const bool send = m.kind == PointToPoint::Kind::Send;
    CollectiveDesc part;
    part.kind = send ? CollectiveKind::Send : CollectiveKind::Recv;
    part.sequence = desc.sequence;
    part.group_size = desc.group_size;
    part.group_rank = desc.group_rank;
    part.where = desc.where;
    (send ? part.input : part.output) = m.tensor;
    part.peer = m.peer;
    part.tag = m.tag;
    checked_count(m.tensor.numel(), desc);
    HostView view = stage(part);
    messages->push_back(Message{std::move(part), std::move(view), mpi_datatype(m.tensor.dtype())});
  }
  auto work = std::make_shared<Work>(std::move(desc), options().wait_limit());
  MpiTask task;
  task.work = work;
  // Started in the caller's order, so per peer (and tag) they match the other side's in order.
  task.start = [messages, data = data_](std::vector<MPI_Request>& requests) {
    const MPI_Comm comm = data->get();
    for (const Message& m : *messages) {
      MPI_Request req = MPI_REQUEST_NULL;
      if (m.part.kind == CollectiveKind::Send) {
        const int n = static_cast<int>(m.part.input.numel());
        MT_MPI_CHECK(MPI_Isend(m.view.input, n, m.type, m.part.peer, m.part.tag, comm, &req));
      } else {
        const int n = static_cast<int>(m.part.output.numel());
        MT_MPI_CHECK(MPI_Irecv(m.view.output, n, m.type, m.part.peer, m.part.tag, comm, &req));
      }
      requests.push_back(req);
    }
  };
  task.finish = [messages]() {
    for (const Message& m : *messages) unstage(m.part, m.view);
  };
  engine_->submit(std::move(task));
  return work;
}

WorkPtr MpiCommunicator::launch(CollectiveDesc desc) {
  if (desc.kind == CollectiveKind::Batch) return launch_batch(std::move(desc));
  const Tensor& any = desc.input.defined() ? desc.input : desc.output;
  const DType dtype = any.defined() ? any.dtype() : DType::F32;
  // Created here, on the caller's thread, before the engine thread needs them.
  const MPI_Datatype type = mpi_datatype(dtype);
  const MPI_Op op = mpi_reduce_op(desc.op, dtype);
  auto work = std::make_shared<Work>(desc, options().wait_limit());
  auto view = std::make_shared<HostView>(stage(desc));
  const int size = this->size();
  const int rank = this->rank();
  const std::size_t esize = dtype_size(dtype);

  MpiTask task;
  task.work = work;
  task.start = [desc, view, type, op, data = data_, size](std::vector<MPI_Request>& requests) {
    const MPI_Comm comm = data->get();
    MPI_Request req = MPI_REQUEST_NULL;
    const bool in_place = desc.in_place();
    char* in = view->input;
    char* out = view->output;
    switch (desc.kind) {
      case CollectiveKind::Allreduce: {
        const int n = checked_count(desc.output.numel(), desc);
        MT_MPI_CHECK(MPI_Iallreduce(in_place ? MPI_IN_PLACE : in, out, n, type, op, comm, &req));
        break;
      }
      case CollectiveKind::ReduceScatter: {
        const int n = checked_count(desc.output.numel(), desc);
        // MPI leaves an in-place result at the start of the buffer; finish() moves it to our block.
        if (in_place) {
          MT_MPI_CHECK(MPI_Ireduce_scatter_block(MPI_IN_PLACE, in, n, type, op, comm, &req));
        } else {
          MT_MPI_CHECK(MPI_Ireduce_scatter_block(in, out, n, type, op, comm, &req));
        }
        break;
      }
      case CollectiveKind::Allgather: {
        const int n = checked_count(desc.input.numel(), desc);
        if (in_place) {
          MT_MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, n, type, comm, &req));
        } else {
          MT_MPI_CHECK(MPI_Iallgather(in, n, type, out, n, type, comm, &req));
        }
        break;
      }
      case CollectiveKind::Broadcast: {
        const int n = checked_count(desc.output.numel(), desc);
        MT_MPI_CHECK(MPI_Ibcast(out, n, type, desc.root, comm, &req));
        break;
      }
      case CollectiveKind::Alltoall: {
        const int n = checked_count(desc.input.numel() / size, desc);
        MT_MPI_CHECK(MPI_Ialltoall(in, n, type, out, n, type, comm, &req));
        break;
      }
      case CollectiveKind::Send: {
        const int n = checked_count(desc.input.numel(), desc);
        MT_MPI_CHECK(MPI_Isend(in, n, type, desc.peer, desc.tag, comm, &req));
        break;
      }
      case CollectiveKind::Recv: {
        const int n = checked_count(desc.output.numel(), desc);
        MT_MPI_CHECK(MPI_Irecv(out, n, type, desc.peer, desc.tag, comm, &req));
        break;
      }
      case CollectiveKind::Barrier: MT_MPI_CHECK(MPI_Ibarrier(comm, &req)); break;
      case CollectiveKind::Batch: MT_CHECK(false, "a batch goes through launch_batch"); break;
    }
    requests.push_back(req);
  };
  task.finish = [desc, view, size, rank, esize, dtype]() {
    if (desc.kind == CollectiveKind::ReduceScatter && desc.in_place() && rank != 0) {
      std::memmove(view->output, view->input, static_cast<std::size_t>(desc.output.numel()) * esize);
    }
    if (desc.op == ReduceOp::Avg &&
        (desc.kind == CollectiveKind::Allreduce || desc.kind == CollectiveKind::ReduceScatter)) {
      divide(view->output, dtype, desc.output.numel(), size);
    }
    unstage(desc, *view);
  };
  engine_->submit(std::move(task));
  return work;
}

}  // namespace mt
