// The communication watchdog. Every op a communicator starts gets a deadline (--comm-timeout);
// one thread per process checks them a few times a second. When one passes, the rank asks the
// other members of that op's group what they are doing (comm/peer_status.h), and onward along
// the chain of waits across groups (comm/wait_chain.h) to the culprit, a rank that does not answer
// or is in no op; then it prints one report: what it waited for (op, group, sequence number,
// bytes, where it was called), the culprit and the chain to it, which members had not started
// that op and what they were doing instead, which did not answer, and its own last steps; then
// it ends the job. A job that hangs thus always ends, within the timeout
// plus a few seconds, with the rank to blame named.
// defines: GroupProgress, Watchdog
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/op_record.h"

namespace mt {

class PeerStatusChannel;
struct PeerOp;
struct PeerStatus;
struct WaitChain;

// One communicator's count of the ops it has started, for the peers' questions (under the
// watchdog's mutex).
struct GroupProgress {
  std::string label;
  std::vector<int> world_ranks;
  std::uint64_t collectives = 0;  // started; the next one gets this number
  std::uint64_t point_to_point = 0;
  std::optional<OpRecord> last_collective;
};

class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::chrono::milliseconds timeout{std::chrono::minutes(10)};
    std::chrono::milliseconds answer_wait{std::chrono::seconds(3)};  // for the peers' answers
    // Receives the report; by default it is printed on stderr and the job is aborted. A test may
    // keep it instead (the watchdog then stops watching).
    std::function<void(const std::string& report)> on_expiry{};
  };

  // Collective over MPI_COMM_WORLD (the question channel duplicates it).
  explicit Watchdog(Options options);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  std::chrono::milliseconds timeout() const { return options_.timeout; }
  // How long past the deadline the watchdog may take to report and end the job.
  std::chrono::milliseconds reporting_time() const;

  std::shared_ptr<GroupProgress> join(std::string label, std::vector<int> world_ranks);
  // From the submitting thread, for every op. `counted`: the op counts as started by this rank
  // (its number is the group's latest); `prefix` goes before the op's description in reports
  // ("the desync check before ").
  void track(const WorkPtr& work, const std::shared_ptr<GroupProgress>& group, bool counted = true,
             const char* prefix = "");
  // A milestone of this rank ("step 12 of 100"), reported with its age as one of its last steps.
  void mark(std::string text);

  // Ends the job: prints `report` as this rank's error when `print`, then aborts. Ranks that do
  // not print give the printing one a moment first.
  [[noreturn]] void end_job(const std::string& report, bool print);

 private:
  struct Tracked {
    std::weak_ptr<Work> work;
    OpRecord record;
    std::shared_ptr<GroupProgress> group;
    Clock::time_point started;
    const char* prefix;
  };
  struct Event {  // a milestone (text) or an op started (op, group)
    Clock::time_point when;
    std::string text;
    std::optional<OpRecord> op;
    std::string group;
    std::string describe() const { return op ? "started " + op->describe() + " on group \"" + group + "\"" : text; }
  };

  void run();
  std::optional<Tracked> first_expired(Clock::time_point now);
  static PeerOp peer_op(const Tracked& t, Clock::time_point now);
  std::string host_of(int world_rank) const;
  std::string status();  // this rank's answer to a peer's question
  std::string report(const Tracked& expired, Clock::time_point now, bool& someone_else_reports);
  // The rank(s) at the end of the chain of waits, in one line each, and the chain.
  std::string culprit_text(const WaitChain& chain, const std::map<int, PeerStatus>& statuses) const;

  Options options_;
  int world_rank_ = 0;
  std::vector<std::string> hosts_;  // by world rank
  std::unique_ptr<PeerStatusChannel> channel_;  // the watchdog thread's only
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<std::weak_ptr<GroupProgress>> groups_;
  std::deque<Tracked> tracked_;
  std::deque<Event> history_;  // the last few ops started and milestones
  std::thread thread_;
};

}  // namespace mt
