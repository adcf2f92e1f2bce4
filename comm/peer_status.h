// Asking the other ranks what they are doing, while something hangs. Each rank's watchdog thread
// answers questions on a private duplicate of MPI_COMM_WORLD (a non-blocking receive it tests
// once per tick), so a rank stuck in compute or in another collective still answers; one that is
// dead or wedged inside MPI does not, and the asker says so after a bounded wait.
// defines: PeerStatusChannel
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <list>
#include <map>
#include <string>
#include <vector>

#include "comm/mpi_runtime.h"

namespace mt {

class PeerStatusChannel {
 public:
  // Collective over MPI_COMM_WORLD (duplicates it). Call every other method from one thread.
  PeerStatusChannel();
  ~PeerStatusChannel();
  PeerStatusChannel(const PeerStatusChannel&) = delete;
  PeerStatusChannel& operator=(const PeerStatusChannel&) = delete;

  // Answers the questions that have arrived with `status()`; never blocks.
  void answer(const std::function<std::string()>& status);
  // How long this rank went without looking for questions before the current look: a rank that was
  // stopped (kill -STOP) and resumed, or starved, tells so in its answer through this.
  std::chrono::milliseconds unpolled() const { return unpolled_; }
  // Asks `world_ranks` and waits at most `limit` for their answers (answering others meanwhile).
  // Ranks that did not answer are missing from the result.
  std::map<int, std::string> ask(const std::vector<int>& world_ranks, std::chrono::milliseconds limit,
                                 const std::function<std::string()>& status);
  // The same, and as each answer arrives, `onward(rank, answer)` names more ranks to ask (ranks
  // already asked are skipped) within the same `limit`: a silent rank costs no more than the wait.
  using Onward = std::function<std::vector<int>(int world_rank, const std::string& answer)>;
  std::map<int, std::string> ask(const std::vector<int>& world_ranks, std::chrono::milliseconds limit,
                                 const std::function<std::string()>& status, const Onward& onward);

 private:
  void post_question_receive();

  MpiComm comm_;
  std::chrono::steady_clock::time_point last_poll_ = std::chrono::steady_clock::now();
  std::chrono::milliseconds unpolled_{0};
  int question_ = 0;  // receive buffer of the posted question (its content is unused)
  MPI_Request question_request_ = MPI_REQUEST_NULL;
  struct Outgoing {
    std::string text;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  std::list<Outgoing> outgoing_;  // answers and questions in flight; list: buffers must not move
};

}  // namespace mt
