#include "comm/watchdog.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "comm/peer_status.h"
#include "runtime/error.h"

namespace mt {

namespace {

constexpr std::size_t kHistory = 8;

std::string join_ranks(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) {
    if (!text.empty()) text += ',';
    text += std::to_string(r);
  }
  return text;
}

std::string seconds_text(std::chrono::nanoseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

std::vector<std::string> split_fields(const std::string& line) {
  std::vector<std::string> fields;
  std::size_t start = 0;
  for (;;) {
    const std::size_t tab = line.find('\t', start);
    fields.push_back(line.substr(start, tab - start));
    if (tab == std::string::npos) return fields;
    start = tab + 1;
  }
}

// A peer's answer, as status() writes it: one line per group (G), op in flight (F) and recent
// event (E), fields separated by tabs.
struct PeerStatus {
  struct Group {
    std::uint64_t collectives = 0;
    std::string last;  // description and place of the last collective started
  };
  std::map<std::string, Group> groups;  // by member list
  std::vector<std::string> in_flight;   // "allreduce #5 ... on group "dp" (world ranks 0,2) for 3.0 s, called at ..."
  std::vector<std::string> events;      // "2.1 s ago: step 7 of 20"

  static PeerStatus parse(const std::string& text) {
    PeerStatus s;
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
      const auto f = split_fields(line);
      if (f[0] == "G" && f.size() >= 4) s.groups[f[1]] = Group{std::stoull(f[2]), f[3]};
      if (f[0] == "F" && f.size() >= 2) s.in_flight.push_back(f[1]);
      if (f[0] == "E" && f.size() >= 2) s.events.push_back(f[1]);
    }
    return s;
  }
};

}  // namespace

Watchdog::Watchdog(Options options) : options_(std::move(options)) {
  MT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  channel_ = std::make_unique<PeerStatusChannel>();
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::chrono::milliseconds Watchdog::reporting_time() const {
  // A tick to notice, the peers' answers, and as long again when deferring to a lower rank.
  return std::chrono::seconds(1) + 3 * options_.answer_wait + std::chrono::seconds(5);
}

std::shared_ptr<GroupProgress> Watchdog::join(std::string label, std::vector<int> world_ranks) {
  auto group = std::make_shared<GroupProgress>();
  group->label = std::move(label);
  group->world_ranks = std::move(world_ranks);
  std::lock_guard lock(mutex_);
  std::erase_if(groups_, [](const std::weak_ptr<GroupProgress>& g) { return g.expired(); });
  groups_.push_back(group);
  return group;
}

void Watchdog::track(const WorkPtr& work, const std::shared_ptr<GroupProgress>& group, bool counted,
                     const char* prefix) {
  const Clock::time_point now = Clock::now();
  OpRecord record = work->desc().record();
  std::lock_guard lock(mutex_);
  if (counted) {
    if (is_point_to_point(record.kind)) {
      group->point_to_point = record.sequence + 1;
    } else {
      group->collectives = record.sequence + 1;
      group->last_collective = record;
    }
  }
  tracked_.push_back(Tracked{work, record, group, now, prefix});
  if (counted && !is_point_to_point(record.kind) && *prefix == '\0') {
    // Described only when reported: starting an op must stay cheap.
    if (history_.size() >= kHistory) history_.pop_front();
    history_.push_back(Event{now, {}, record, group->label});
  }
}

void Watchdog::mark(std::string text) {
  std::lock_guard lock(mutex_);
  if (history_.size() >= kHistory) history_.pop_front();
  history_.push_back(Event{Clock::now(), std::move(text), {}, {}});
}

void Watchdog::run() {
  // Ticks often enough to end a hang within a second of its deadline, rarely enough to cost nothing.
  const auto tick = std::clamp(options_.timeout / 4, std::chrono::milliseconds(20), std::chrono::milliseconds(500));
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, tick, [this] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    channel_->answer([this] { return status(); });
    std::optional<Tracked> expired = first_expired(Clock::now());
    if (expired) {
      bool someone_else_reports = false;
      const std::string text = report(*expired, Clock::now(), someone_else_reports);
      if (someone_else_reports) {
        // A lower rank waits for the same op and reports it; stay quiet unless it fails to end the job.
        const auto until = Clock::now() + 2 * options_.answer_wait + std::chrono::seconds(2);
        while (Clock::now() < until) {
          channel_->answer([this] { return status(); });
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
      if (options_.on_expiry) {
        options_.on_expiry(text);
        return;
      }
      end_job(text, true);
    }
    lock.lock();
  }
}

std::optional<Watchdog::Tracked> Watchdog::first_expired(Clock::time_point now) {
  std::lock_guard lock(mutex_);
  std::optional<Tracked> expired;
  std::erase_if(tracked_, [&](const Tracked& t) {
    WorkPtr work = t.work.lock();
    if (!work || work->test()) return true;
    if (!expired && now - t.started > options_.timeout) expired = t;
    return false;
  });
  return expired;
}

std::string Watchdog::status() {
  const Clock::time_point now = Clock::now();
  std::ostringstream out;
  std::lock_guard lock(mutex_);
  for (const auto& weak : groups_) {
    auto g = weak.lock();
    if (!g) continue;
    out << "G\t" << join_ranks(g->world_ranks) << '\t' << g->collectives << '\t'
        << (g->last_collective ? g->last_collective->describe() + ", called at " + g->last_collective->called_from()
                               : std::string("none"))
        << '\n';
  }
  for (const Tracked& t : tracked_) {
    WorkPtr work = t.work.lock();
    if (!work || work->test()) continue;
    out << "F\t" << t.prefix << t.record.describe() << " on group \"" << (t.group ? t.group->label : "?") << "\" for "
        << seconds_text(now - t.started) << ", called at " << t.record.called_from() << '\n';
  }
  for (const Event& e : history_) out << "E\t" << seconds_text(now - e.when) << " ago: " << e.describe() << '\n';
  return out.str();
}

std::string Watchdog::report(const Tracked& expired, Clock::time_point now, bool& someone_else_reports) {
  const OpRecord& op = expired.record;
  const std::vector<int> members = expired.group ? expired.group->world_ranks : std::vector<int>{};
  const std::string label = expired.group ? expired.group->label : "?";
  std::vector<int> peers;
  for (int r : members) {
    if (r != world_rank_) peers.push_back(r);
  }
  const std::map<int, std::string> answers = channel_->ask(peers, options_.answer_wait, [this] { return status(); });

  std::vector<int> not_arrived;
  std::vector<int> silent;
  std::ostringstream details;
  const std::string key = join_ranks(members);
  for (int peer : peers) {
    auto found = answers.find(peer);
    if (found == answers.end()) {
      silent.push_back(peer);
      continue;
    }
    const PeerStatus s = PeerStatus::parse(found->second);
    bool arrived = true;
    if (!is_point_to_point(op.kind)) {
      auto g = s.groups.find(key);
      const std::uint64_t started = g == s.groups.end() ? 0 : g->second.collectives;
      arrived = started > op.sequence;
      if (!arrived) {
        not_arrived.push_back(peer);
        details << "\n  world rank " << peer << " has not started it: its last collective on this group is "
                << (g == s.groups.end() ? std::string("none") : g->second.last);
      }
    }
    // A lower rank stuck on this very op reports it: the others stay quiet.
    const std::string same_op = op.describe() + " on group \"" + label + "\"";
    for (const std::string& f : s.in_flight) {
      if (peer < world_rank_ && f.find(same_op) != std::string::npos) someone_else_reports = true;
    }
    if (!arrived || is_point_to_point(op.kind)) {
      for (const std::string& f : s.in_flight) details << "\n    world rank " << peer << " waits in " << f;
      if (s.in_flight.empty()) details << "\n    world rank " << peer << " waits in no communication (computing, or stuck outside it)";
      if (!s.events.empty()) details << "\n    its last step: " << s.events.back();
    }
  }

  std::ostringstream text;
  text << "watchdog: " << expired.prefix << op.describe() << " on group \"" << label << "\" (world ranks " << key
       << "), called at " << op.called_from() << ", has not finished " << seconds_text(now - expired.started)
       << " after it started (--comm-timeout " << seconds_text(options_.timeout) << ")";
  if (!not_arrived.empty()) text << "; not arrived: world rank" << (not_arrived.size() > 1 ? "s " : " ") << join_ranks(not_arrived);
  if (!silent.empty()) {
    text << "; no answer within " << seconds_text(options_.answer_wait) << " from world rank"
         << (silent.size() > 1 ? "s " : " ") << join_ranks(silent) << " (dead, or stuck inside MPI)";
  }
  if (not_arrived.empty() && silent.empty() && !peers.empty() && !is_point_to_point(op.kind)) {
    text << "; every member has started it, so the transfer itself is stuck (a network or MPI problem)";
  }
  text << details.str();
  text << "\n  this rank (world rank " << world_rank_ << " on " << this_host_name() << "), its last steps:";
  {
    std::lock_guard lock(mutex_);
    for (const Event& e : history_) text << "\n    " << seconds_text(now - e.when) << " ago: " << e.describe();
  }
  return text.str();
}

void Watchdog::end_job(const std::string& report, bool print) {
  if (print) {
    std::fprintf(stderr, "meshtrain: error: [rank %d host %s]: %s\n", world_rank_, this_host_name().c_str(),
                 report.c_str());
    std::fflush(stderr);
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
  abort_job(1);
}

}  // namespace mt
