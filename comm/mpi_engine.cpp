#include "comm/mpi_engine.h"

namespace mt {

MpiEngine::MpiEngine() : doorbell_comm_(MpiComm(MPI_COMM_SELF, false).dup()) {
  thread_ = std::thread([this] { run(); });
}

MpiEngine::~MpiEngine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  ring_doorbell();
  thread_.join();
  if (doorbell_request_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&doorbell_request_);
    MPI_Wait(&doorbell_request_, MPI_STATUS_IGNORE);
  }
}

void MpiEngine::submit(MpiTask task) {
  bool ring = false;
  {
    std::lock_guard lock(mutex_);
    MT_CHECK(!stopping_, "operation submitted to a stopped MPI engine");
    queue_.push_back(std::move(task));
    ring = in_mpi_wait_;
  }
  wake_.notify_one();
  if (ring) ring_doorbell();
}

void MpiEngine::ring_doorbell() {
  char bell = 0;
  MPI_Send(&bell, 0, MPI_BYTE, 0, 0, doorbell_comm_.get());
}

void MpiEngine::post_doorbell() {
  static char sink = 0;
  MPI_Irecv(&sink, 0, MPI_BYTE, 0, 0, doorbell_comm_.get(), &doorbell_request_);
}

void MpiEngine::finish(Active& active, std::exception_ptr error) {
  if (!error && active.task.finish) {
    try {
      active.task.finish();
    } catch (...) {
      error = std::current_exception();
    }
  }
  active.task.work->complete(error);
}

void MpiEngine::run() {
  post_doorbell();
  for (;;) {
    std::deque<MpiTask> queued;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty() || !active_.empty(); });
      if (stopping_ && queue_.empty() && active_.empty()) return;
      queued.swap(queue_);
    }
    start_queued(queued);
    if (!active_.empty()) wait_some();
  }
}

void MpiEngine::start_queued(std::deque<MpiTask>& queued) {
  for (MpiTask& task : queued) {
    Active active{std::move(task), {}, 0};
    try {
      active.task.start(active.requests);
    } catch (...) {
      // Requests already posted stay in flight; the error is the op's, reported by its Work.
      active.task.work->complete(std::current_exception());
      continue;
    }
    active.pending = static_cast<int>(active.requests.size());
    if (active.pending == 0) {
      finish(active, nullptr);
    } else {
      active_.push_back(std::move(active));
    }
  }
}

void MpiEngine::wait_some() {
  {
    // Submissions that arrived while starting the last batch must ring from now on.
    std::lock_guard lock(mutex_);
    if (!queue_.empty()) return;
    in_mpi_wait_ = true;
  }
  std::vector<MPI_Request> all;
  std::vector<std::pair<std::size_t, std::size_t>> owner;  // (active index, request index)
  for (std::size_t a = 0; a < active_.size(); ++a) {
    for (std::size_t r = 0; r < active_[a].requests.size(); ++r) {
      if (active_[a].requests[r] == MPI_REQUEST_NULL) continue;
      all.push_back(active_[a].requests[r]);
      owner.emplace_back(a, r);
    }
  }
  all.push_back(doorbell_request_);
  std::vector<int> indices(all.size());
  std::vector<MPI_Status> statuses(all.size());
  int count = 0;
  int rc = MPI_Waitsome(static_cast<int>(all.size()), all.data(), &count, indices.data(), statuses.data());
  {
    std::lock_guard lock(mutex_);
    in_mpi_wait_ = false;
  }
  std::exception_ptr failure;
  if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
    try {
      MT_FAIL("MPI_Waitsome failed: ", mpi_error_string(rc));
    } catch (...) {
      failure = std::current_exception();
    }
  }
  for (int i = 0; i < count && count != MPI_UNDEFINED; ++i) {
    const auto k = static_cast<std::size_t>(indices[static_cast<std::size_t>(i)]);
    if (k == owner.size()) {
      post_doorbell();
      continue;
    }
    auto [a, r] = owner[k];
    active_[a].requests[r] = MPI_REQUEST_NULL;
    --active_[a].pending;
  }
  // A failed wait leaves the request states unknown: fail everything in flight.
  for (auto it = active_.begin(); it != active_.end();) {
    if (failure || it->pending == 0) {
      finish(*it, failure);
      it = active_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace mt
