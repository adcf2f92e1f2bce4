#include "comm/watchdog.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "comm/peer_status.h"
#include "comm/wait_chain.h"
#include "runtime/error.h"

namespace mt {

namespace {

constexpr std::size_t kHistory = 8;

std::string seconds_text(std::chrono::nanoseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

}  // namespace

Watchdog::Watchdog(Options options) : options_(std::move(options)) {
  MT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  channel_ = std::make_unique<PeerStatusChannel>();
  // Every rank's host, for naming a culprit that no longer answers.
  int ranks = 0;
  MT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &ranks));
  constexpr int kHostChars = 64;
  std::string mine = this_host_name().substr(0, kHostChars - 1);
  mine.resize(kHostChars, '\0');
  std::string all(static_cast<std::size_t>(kHostChars) * static_cast<std::size_t>(ranks), '\0');
  MT_MPI_CHECK(MPI_Allgather(mine.data(), kHostChars, MPI_CHAR, all.data(), kHostChars, MPI_CHAR, MPI_COMM_WORLD));
  for (int r = 0; r < ranks; ++r) hosts_.emplace_back(all.c_str() + static_cast<std::size_t>(r) * kHostChars);
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
  OpRecord record = work->record();
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
  bool reported = false;  // to on_expiry: from then on the thread only answers the peers
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, reported ? std::chrono::milliseconds(20) : tick, [this] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    channel_->answer([this] { return status(); });
    std::optional<Tracked> expired = reported ? std::nullopt : first_expired(Clock::now());
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
      if (!options_.on_expiry) end_job(text, true);
      // A test keeps the report; the others' watchdogs may still ask this rank about its ops.
      options_.on_expiry(text);
      reported = true;
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

PeerOp Watchdog::peer_op(const Tracked& t, Clock::time_point now) {
  PeerOp op;
  op.members = t.group ? t.group->world_ranks : std::vector<int>{};
  op.what = std::string(t.prefix) + t.record.describe() + " on group \"" + (t.group ? t.group->label : "?") +
            "\" (world ranks " + join_ranks(op.members) + ")";
  op.detail = "for " + seconds_text(now - t.started) + ", called at " + t.record.called_from();
  op.kind = t.record.kind;
  op.sequence = t.record.sequence;
  // Peers in world ranks: the chain of waits crosses groups.
  auto world_rank_of = [&](int peer) {
    return peer >= 0 && static_cast<std::size_t>(peer) < op.members.size() ? op.members[static_cast<std::size_t>(peer)] : -1;
  };
  if (is_point_to_point(op.kind)) op.peer = world_rank_of(t.record.peer);
  op.tag = t.record.tag;
  for (const MessageRecord& m : t.record.messages) op.messages.push_back(PeerMessage{m.send, world_rank_of(m.peer), m.tag});
  return op;
}

std::string Watchdog::host_of(int world_rank) const {
  return world_rank >= 0 && static_cast<std::size_t>(world_rank) < hosts_.size() ? hosts_[static_cast<std::size_t>(world_rank)]
                                                                                  : std::string("?");
}

std::string Watchdog::status() {
  const Clock::time_point now = Clock::now();
  std::string out;
  std::lock_guard lock(mutex_);
  for (const auto& weak : groups_) {
    auto g = weak.lock();
    if (!g) continue;
    out += PeerStatus::group_line(g->world_ranks, g->collectives,
                                  g->last_collective ? g->last_collective->describe() + ", called at " +
                                                           g->last_collective->called_from()
                                                     : std::string("none"));
  }
  for (const Tracked& t : tracked_) {
    WorkPtr work = t.work.lock();
    if (!work || work->test()) continue;
    out += PeerStatus::op_line(peer_op(t, now));
  }
  for (const Event& e : history_) out += PeerStatus::event_line(seconds_text(now - e.when) + " ago: " + e.describe());
  out += PeerStatus::unpolled_line(std::chrono::duration<double>(channel_->unpolled()).count());
  return out;
}

std::string Watchdog::report(const Tracked& expired, Clock::time_point now, bool& someone_else_reports) {
  const OpRecord& op = expired.record;
  const PeerOp root = peer_op(expired, now);
  const std::vector<int>& members = root.members;
  const std::string label = expired.group ? expired.group->label : "?";
  std::vector<int> peers;
  for (int r : members) {
    if (r != world_rank_) peers.push_back(r);
  }
  // A watchdog thread looks for questions at least every 0.5 s (and every few ms while it asks): one
  // that did not for this long was not running (stopped, and resumed as the job is ended).
  const double paused_s = 2.0 + std::chrono::duration<double>(options_.answer_wait).count() / 2;
  // Ask the op's group, then onward along the chain of waits, all within one answer wait.
  std::map<int, PeerStatus> statuses{{world_rank_, PeerStatus::parse(status())}};
  std::set<int> asked(peers.begin(), peers.end());
  asked.insert(world_rank_);
  const std::map<int, std::string> answers =
      channel_->ask(peers, options_.answer_wait, [this] { return status(); }, [&](int rank, const std::string& text) {
        statuses[rank] = PeerStatus::parse(text);
        std::vector<int> more = follow_wait_chain(world_rank_, root, statuses, asked, paused_s).to_ask;
        asked.insert(more.begin(), more.end());
        return more;
      });
  const WaitChain chain = follow_wait_chain(world_rank_, root, statuses, asked, paused_s);

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
    const PeerStatus& s = statuses.at(peer);
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
    for (const PeerOp& f : s.in_flight) {
      if (peer < world_rank_ && f.what.find(same_op) != std::string::npos) someone_else_reports = true;
    }
    if (!arrived || is_point_to_point(op.kind)) {
      for (const PeerOp& f : s.in_flight) details << "\n    world rank " << peer << " waits in " << f.what << " " << f.detail;
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
  text << culprit_text(chain, statuses);
  text << details.str();
  text << "\n  this rank (world rank " << world_rank_ << " on " << this_host_name() << "), its last steps:";
  {
    std::lock_guard lock(mutex_);
    for (const Event& e : history_) text << "\n    " << seconds_text(now - e.when) << " ago: " << e.describe();
  }
  return text.str();
}

std::string Watchdog::culprit_text(const WaitChain& chain, const std::map<int, PeerStatus>& statuses) const {
  if (chain.links.empty()) return "";  // the op waits for no one: said above
  std::ostringstream text;
  std::vector<std::string> culprits;
  for (int r : chain.silent) {
    auto s = statuses.find(r);
    culprits.push_back("world rank " + std::to_string(r) + " (host " + host_of(r) + ") " +
                       (s == statuses.end() ? std::string("does not answer (stopped, dead, or stuck inside MPI)")
                                            : "did not run for " + seconds_text(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                                         std::chrono::duration<double>(s->second.unpolled_s))) +
                                                  " before it answered (stopped, or starved of CPU)"));
  }
  for (int r : chain.busy) {
    const PeerStatus& s = statuses.at(r);
    culprits.push_back("world rank " + std::to_string(r) + " (host " + host_of(r) +
                       ") is busy outside any collective; its last step: " +
                       (s.events.empty() ? std::string("none marked") : s.events.back()));
  }
  if (culprits.size() == 1) {
    text << "\n  culprit: " << culprits.front();
  } else if (!culprits.empty()) {
    text << "\n  culprits:";
    for (const std::string& c : culprits) text << "\n    " << c;
  } else if (!chain.stuck.empty()) {
    std::vector<int> stuck = chain.stuck;
    text << "\n  culprit: none: world rank" << (stuck.size() > 1 ? "s " : " ") << join_ranks(stuck)
         << " wait in ops every member has started (a network or MPI problem)";
  } else {
    text << "\n  culprit: none: the ranks wait for each other in a cycle (their ops were started in different orders)";
  }
  // The chain itself, bounded: a large job's report must stay readable.
  constexpr std::size_t kMaxLinks = 16;
  text << "\n  the waits that lead there:";
  for (std::size_t i = 0; i < chain.links.size() && i < kMaxLinks; ++i) {
    const WaitLink& l = chain.links[i];
    text << "\n    world rank " << l.from << " waits for world rank " << l.to << " in " << l.in;
  }
  if (chain.links.size() > kMaxLinks) text << "\n    ... and " << chain.links.size() - kMaxLinks << " more";
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
