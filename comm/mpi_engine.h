// The communication thread of the MPI backend. Open MPI has no asynchronous progress of its own:
// a nonblocking collective advances only while some thread is inside MPI. This thread is that
// thread: it starts queued operations as nonblocking MPI calls, in submission order (so every
// rank starts collectives in the same order), and sits in MPI_Waitsome until one completes or a
// new operation arrives. A zero-byte message to itself (the doorbell) wakes it from MPI_Waitsome,
// so it neither polls on a timer nor spins while idle: with nothing in flight it sleeps on a
// condition variable.
//
// Shutdown never hangs a failing job: while an exception unwinds past an engine that still has
// operations in flight (a peer that never came, a timeout), the thread is left behind so the error
// can reach the top level, which aborts the job; otherwise the engine waits for what is in flight
// for at most its shutdown timeout, then names the operations and aborts.
// defines: MpiTask, MpiEngine
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_runtime.h"

namespace mt {

struct MpiTask {
  // Posts the nonblocking MPI calls, appending their requests (runs on the engine thread).
  std::function<void(std::vector<MPI_Request>&)> start;
  // Runs once every request has completed (e.g. averaging, copying staged data back). Both are
  // dropped, with the tensors and staging they hold, before `work` completes.
  std::function<void()> finish;
  WorkPtr work;
};

class MpiEngine {
 public:
  explicit MpiEngine(std::chrono::milliseconds shutdown_timeout = std::chrono::minutes(10));
  ~MpiEngine();
  MpiEngine(const MpiEngine&) = delete;
  MpiEngine& operator=(const MpiEngine&) = delete;

  void submit(MpiTask task);

 private:
  struct State;
  static void run(const std::shared_ptr<State>& state);

  std::shared_ptr<State> state_;  // shared with the thread, which may outlive this object
  std::chrono::milliseconds shutdown_timeout_;
  std::thread thread_;
};

}  // namespace mt
