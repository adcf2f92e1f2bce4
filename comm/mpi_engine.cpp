#include "comm/mpi_engine.h"

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <utility>

namespace mt {

struct MpiEngine::State {
  struct Active {
    MpiTask task;
    std::vector<MPI_Request> requests;
    int pending = 0;
    std::exception_ptr error;  // the first failed request's
  };

  MpiComm doorbell_comm = MpiComm(MPI_COMM_SELF, false).dup();  // private, for waking the thread
  MPI_Request doorbell_request = MPI_REQUEST_NULL;
  char doorbell_sink = 0;

  std::mutex mutex;
  std::condition_variable wake;
  std::condition_variable exited_cv;
  std::deque<MpiTask> queue;
  bool stopping = false;
  bool in_mpi_wait = false;
  bool exited = false;
  // Left behind as an error ends the job (~MpiEngine detached the thread): MPI may be finalizing on
  // the main thread, so the thread makes no MPI call on its way out.
  bool abandoned = false;
  std::vector<WorkPtr> in_flight;  // queued or started, for the shutdown message (under mutex)

  // Engine thread only.
  std::vector<Active> active;
  std::vector<Active> poisoned;  // ops whose requests MPI may still use: kept alive, never freed

  void ring() {
    char bell = 0;
    MPI_Send(&bell, 0, MPI_BYTE, 0, 0, doorbell_comm.get());
  }
  void post_doorbell() { MPI_Irecv(&doorbell_sink, 0, MPI_BYTE, 0, 0, doorbell_comm.get(), &doorbell_request); }

  void forget(const Active& a) {
    std::lock_guard lock(mutex);
    std::erase(in_flight, a.task.work);
  }

  void finish(Active& a) {
    std::exception_ptr error = a.error;
    if (!error && a.task.finish) {
      try {
        a.task.finish();
      } catch (...) {
        error = std::current_exception();
      }
    }
    // The closures hold the op's tensors and staging: drop them before waking the waiter, so the
    // memory goes back to the allocator before wait() returns (not later, on this thread).
    a.task.start = nullptr;
    a.task.finish = nullptr;
    forget(a);
    a.task.work->complete(error);
  }

  void start_queued(std::deque<MpiTask>& queued) {
    for (MpiTask& task : queued) {
      Active a{std::move(task), {}, 0, nullptr};
      try {
        a.task.start(a.requests);
      } catch (...) {
        a.error = std::current_exception();
      }
      for (MPI_Request r : a.requests) a.pending += r != MPI_REQUEST_NULL ? 1 : 0;
      if (a.error && a.pending > 0) {
        // Some requests were posted before the failure: MPI may still use the buffers.
        forget(a);
        a.task.work->complete(a.error);
        poisoned.push_back(std::move(a));
      } else if (a.pending == 0) {
        finish(a);
      } else {
        active.push_back(std::move(a));
      }
    }
  }

  void wait_some() {
    {
      // Submissions that arrived while starting the last batch must ring from now on.
      std::lock_guard lock(mutex);
      if (!queue.empty()) return;
      in_mpi_wait = true;
    }
    std::vector<MPI_Request> all;
    std::vector<std::pair<std::size_t, std::size_t>> owner;  // (active index, request index)
    for (std::size_t a = 0; a < active.size(); ++a) {
      for (std::size_t r = 0; r < active[a].requests.size(); ++r) {
        if (active[a].requests[r] == MPI_REQUEST_NULL) continue;
        all.push_back(active[a].requests[r]);
        owner.emplace_back(a, r);
      }
    }
    all.push_back(doorbell_request);
    std::vector<int> indices(all.size());
    std::vector<MPI_Status> statuses(all.size());
    int count = 0;
    const int rc = MPI_Waitsome(static_cast<int>(all.size()), all.data(), &count, indices.data(), statuses.data());
    {
      std::lock_guard lock(mutex);
      in_mpi_wait = false;
    }
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
      // The state of every request is unknown: fail all in-flight ops, keep their buffers alive.
      std::exception_ptr failure;
      try {
        MT_FAIL("MPI_Waitsome failed: ", mpi_error_string(rc));
      } catch (...) {
        failure = std::current_exception();
      }
      for (Active& a : active) {
        forget(a);
        a.task.work->complete(failure);
        poisoned.push_back(std::move(a));
      }
      active.clear();
      return;
    }
    for (int i = 0; i < count && count != MPI_UNDEFINED; ++i) {
      const auto k = static_cast<std::size_t>(indices[static_cast<std::size_t>(i)]);
      if (k == owner.size()) {
        post_doorbell();
        continue;
      }
      auto [a, r] = owner[k];
      Active& op = active[a];
      op.requests[r] = MPI_REQUEST_NULL;
      --op.pending;
      const int status_error = statuses[static_cast<std::size_t>(i)].MPI_ERROR;
      if (rc == MPI_ERR_IN_STATUS && status_error != MPI_SUCCESS && status_error != MPI_ERR_PENDING && !op.error) {
        try {
          MT_FAIL(op.task.work->describe(), " failed: ", mpi_error_string(status_error));
        } catch (...) {
          op.error = std::current_exception();
        }
      }
    }
    for (auto it = active.begin(); it != active.end();) {
      if (it->pending == 0) {
        finish(*it);
        it = active.erase(it);
      } else {
        ++it;
      }
    }
  }
};

MpiEngine::MpiEngine(std::chrono::milliseconds shutdown_timeout)
    : state_(std::make_shared<State>()), shutdown_timeout_(shutdown_timeout) {
  thread_ = std::thread([state = state_] { run(state); });
}

void MpiEngine::run(const std::shared_ptr<State>& s) {
  s->post_doorbell();
  for (;;) {
    std::deque<MpiTask> queued;
    {
      std::unique_lock lock(s->mutex);
      s->wake.wait(lock, [&] { return s->stopping || !s->queue.empty() || !s->active.empty(); });
      if (s->stopping && s->queue.empty() && s->active.empty()) break;
      queued.swap(s->queue);
    }
    s->start_queued(queued);
    if (!s->active.empty()) s->wait_some();
  }
  {
    std::lock_guard lock(s->mutex);
    if (s->abandoned) return;
  }
  MPI_Cancel(&s->doorbell_request);
  MPI_Wait(&s->doorbell_request, MPI_STATUS_IGNORE);
  {
    std::lock_guard lock(s->mutex);
    s->exited = true;
  }
  s->exited_cv.notify_all();
}

MpiEngine::~MpiEngine() {
  bool abandon = false;
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
    abandon = !state_->in_flight.empty() && std::uncaught_exceptions() > 0;
    state_->abandoned = abandon;
  }
  state_->wake.notify_all();
  state_->ring();
  if (abandon) {
    // An error is on its way to the top level, which ends the job; waiting here for peers that
    // may never come would hang it instead. The thread keeps its state alive until then.
    thread_.detach();
    return;
  }
  std::unique_lock lock(state_->mutex);
  if (!state_->exited_cv.wait_for(lock, shutdown_timeout_, [&] { return state_->exited; })) {
    std::string ops;
    for (const WorkPtr& op : state_->in_flight) ops += "\n  " + op->describe();
    std::fprintf(stderr, "meshtrain: error: %s: communication still in flight %lld s after shutdown began:%s\n",
                 describe_location(std::source_location::current()).c_str(),
                 static_cast<long long>(shutdown_timeout_.count() / 1000), ops.c_str());
    abort_job(1);
  }
  lock.unlock();
  thread_.join();
}

void MpiEngine::submit(MpiTask task) {
  bool ring = false;
  {
    std::lock_guard lock(state_->mutex);
    MT_CHECK(!state_->stopping, "operation submitted to a stopped MPI engine");
    state_->in_flight.push_back(task.work);
    state_->queue.push_back(std::move(task));
    // One ring per wait is enough: later submitters find the flag cleared.
    ring = std::exchange(state_->in_mpi_wait, false);
  }
  state_->wake.notify_one();
  if (ring) state_->ring();
}

}  // namespace mt
