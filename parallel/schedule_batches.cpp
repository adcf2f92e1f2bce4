#include "parallel/schedule_batches.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "runtime/error.h"

namespace mt {
namespace {

// One message of a posted batch: which pair's list it sits in, at which position, on which side.
struct BatchMessage {
  std::pair<int, int> pair;  // (sender, receiver)
  std::size_t index;
  bool send;
};

// A send some stage waits on whose receive the peer has not posted: the peer and how many
// receives from the sender it must have posted.
struct MissingReceive {
  int sender;
  int receiver;
  std::size_t count;
};

// The lists run with grouped batches, one step at a time, until every stage is done or stuck.
class GroupedRun {
 public:
  explicit GroupedRun(Schedule& schedule)
      : s_(schedule), stages_(static_cast<std::size_t>(schedule.stages)), next_(stages_, 0), batch_(stages_),
        posted_(stages_, false) {}

  // Runs until nothing moves; true when every stage finished.
  bool run() {
    bool moved = true;
    while (moved) {
      moved = false;
      for (std::size_t s = 0; s < stages_; ++s) moved = advance(s) || moved;
    }
    for (std::size_t s = 0; s < stages_; ++s)
      if (next_[s] < s_.actions[s].size()) return false;
    return true;
  }

  // When stuck: the first stuck stage's first send whose receive is not posted, if any.
  std::optional<MissingReceive> missing_receive() const {
    for (std::size_t s = 0; s < stages_; ++s) {
      for (const BatchMessage& m : batch_[s]) {
        if (m.send && received_size(m.pair) <= m.index) return MissingReceive{m.pair.first, m.pair.second, m.index + 1};
      }
    }
    return std::nullopt;
  }

  // Moves the receiver's next receives from the sender (up to count posted in all) to the end of
  // the batch it waits in, and posts them.
  void pull(const MissingReceive& miss) {
    const auto r = static_cast<std::size_t>(miss.receiver);
    auto& list = s_.actions[r];
    const std::size_t end = run_end(r);
    std::vector<Action> moved;
    const auto pair = std::pair{miss.sender, miss.receiver};
    std::size_t have = received_size(pair);
    for (std::size_t i = end; i < list.size() && have + moved.size() < miss.count;) {
      const Action& a = list[i];
      if (is_receive(a.kind) && s_.peer(static_cast<int>(r), a).stage == miss.sender) {
        moved.push_back(a);
        list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    MT_CHECK(have + moved.size() == miss.count, "stage ", miss.receiver, " has too few receives from stage ", miss.sender);
    list.insert(list.begin() + static_cast<std::ptrdiff_t>(end), moved.begin(), moved.end());
    for (const Action& a : moved) post(r, a);
  }

  std::string stuck_report() const {
    std::ostringstream out;
    for (std::size_t s = 0; s < stages_; ++s) {
      if (next_[s] >= s_.actions[s].size()) continue;
      out << " s" << s << " waits in [";
      for (std::size_t i = next_[s]; i < run_end(s); ++i) out << (i > next_[s] ? " " : "") << to_string(s_.actions[s][i], true);
      out << "];";
    }
    return out.str();
  }

 private:
  std::size_t run_end(std::size_t s) const {
    const auto& list = s_.actions[s];
    std::size_t end = next_[s];
    while (end < list.size() && !is_compute(list[end].kind)) ++end;
    return end;
  }

  std::size_t received_size(const std::pair<int, int>& pair) const {
    const auto it = received_.find(pair);
    return it == received_.end() ? 0 : it->second.size();
  }

  void post(std::size_t s, const Action& a) {
    const int stage = static_cast<int>(s);
    const int peer = s_.peer(stage, a).stage;
    const int tag = s_.tag(stage, a);
    if (peer == stage) {  // a copy: never blocks, but needs its send first
      if (is_send(a.kind)) {
        self_sent_.insert(tag);
      } else {
        const auto it = self_sent_.find(tag);
        MT_CHECK(it != self_sent_.end(), "stage ", stage, ": ", to_string(a, true), " before its own send");
        self_sent_.erase(it);
      }
      return;
    }
    const std::pair<int, int> pair = is_send(a.kind) ? std::pair{stage, peer} : std::pair{peer, stage};
    auto& side = is_send(a.kind) ? sent_[pair] : received_[pair];
    side.push_back(tag);
    batch_[s].push_back({pair, side.size() - 1, is_send(a.kind)});
  }

  bool matched(const BatchMessage& m) {
    const auto& sent = sent_[m.pair];
    const auto& received = received_[m.pair];
    if (sent.size() <= m.index || received.size() <= m.index) return false;
    MT_CHECK(sent[m.index] == received[m.index], "stage ", m.pair.first, " sends tag ", sent[m.index], " to stage ",
             m.pair.second, " where that stage's receive number ", m.index, " from it has tag ", received[m.index]);
    return true;
  }

  // Runs stage s as far as it goes; true if it moved.
  bool advance(std::size_t s) {
    const auto& list = s_.actions[s];
    bool moved = false;
    while (next_[s] < list.size()) {
      if (is_compute(list[next_[s]].kind)) {
        ++next_[s];
        moved = true;
        continue;
      }
      const std::size_t end = run_end(s);
      if (!posted_[s]) {  // the whole run at once
        for (std::size_t i = next_[s]; i < end; ++i) post(s, list[i]);
        posted_[s] = true;
        moved = true;
      }
      if (!std::all_of(batch_[s].begin(), batch_[s].end(), [&](const BatchMessage& m) { return matched(m); })) break;
      batch_[s].clear();
      posted_[s] = false;
      next_[s] = end;
      moved = true;
    }
    return moved;
  }

  Schedule& s_;
  std::size_t stages_;
  std::vector<std::size_t> next_;                 // per stage: the next action (the start of its run)
  std::vector<std::vector<BatchMessage>> batch_;  // per stage: the messages of the batch it posted
  std::vector<bool> posted_;
  std::map<std::pair<int, int>, std::vector<int>> sent_, received_;  // tags, in issue order
  std::multiset<int> self_sent_;
};

}  // namespace

void check_grouped_messages(const Schedule& schedule) {
  Schedule copy = schedule;  // the run never changes it, but shares its code with the repair
  GroupedRun run(copy);
  MT_CHECK(run.run(), "the schedule deadlocks with grouped messages (", schedule_kind_name(schedule.kind),
           " P=", schedule.stages, " M=", schedule.micro_batches, " v=", schedule.virtual_stages, "):",
           run.stuck_report());
}

void move_receives_until_batches_complete(Schedule& schedule) {
  GroupedRun run(schedule);
  while (!run.run()) {
    const std::optional<MissingReceive> miss = run.missing_receive();
    MT_CHECK(miss.has_value(), "no receive move ends the grouped deadlock (", schedule_kind_name(schedule.kind),
             " P=", schedule.stages, " M=", schedule.micro_batches, "):", run.stuck_report());
    run.pull(*miss);
  }
}

}  // namespace mt
