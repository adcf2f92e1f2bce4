// The communication thread of the MPI backend. Open MPI has no asynchronous progress of its own:
// a nonblocking collective advances only while some thread is inside MPI. This thread is that
// thread: it starts queued operations as nonblocking MPI calls, in submission order (so every
// rank starts collectives in the same order), and sits in MPI_Waitsome until one completes or a
// new operation arrives. A zero-byte message to itself (the doorbell) wakes it from MPI_Waitsome,
// so it neither polls on a timer nor spins while idle: with nothing in flight it sleeps on a
// condition variable.
// defines: MpiTask, MpiEngine
#pragma once

#include <mpi.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_runtime.h"

namespace mt {

struct MpiTask {
  // Posts the nonblocking MPI calls, appending their requests (runs on the engine thread).
  std::function<void(std::vector<MPI_Request>&)> start;
  // Runs once every request has completed (e.g. averaging, copying staged data back).
  std::function<void()> finish;
  WorkPtr work;
};

class MpiEngine {
 public:
  MpiEngine();
  ~MpiEngine();  // finishes what is in flight, then stops the thread
  MpiEngine(const MpiEngine&) = delete;
  MpiEngine& operator=(const MpiEngine&) = delete;

  void submit(MpiTask task);

 private:
  struct Active {
    MpiTask task;
    std::vector<MPI_Request> requests;
    int pending = 0;
  };
  void run();
  void start_queued(std::deque<MpiTask>& queued);
  void wait_some();
  void post_doorbell();
  void ring_doorbell();
  static void finish(Active& active, std::exception_ptr error);

  MpiComm doorbell_comm_;  // a private duplicate of MPI_COMM_SELF
  MPI_Request doorbell_request_ = MPI_REQUEST_NULL;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<MpiTask> queue_;
  bool stopping_ = false;
  bool in_mpi_wait_ = false;
  std::vector<Active> active_;  // engine thread only
  std::thread thread_;
};

}  // namespace mt
