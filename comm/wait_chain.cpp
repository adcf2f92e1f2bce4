#include "comm/wait_chain.h"

#include <algorithm>
#include <deque>
#include <sstream>

namespace mt {

namespace {

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

std::vector<int> parse_ranks(const std::string& text) {
  std::vector<int> ranks;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) ranks.push_back(std::stoi(item));
  }
  return ranks;
}

std::string encode_messages(const std::vector<PeerMessage>& messages) {
  std::string text;
  for (const PeerMessage& m : messages) {
    if (!text.empty()) text += ',';
    text += (m.send ? 's' : 'r') + std::to_string(m.peer) + ':' + std::to_string(m.tag);
  }
  return text;
}

std::vector<PeerMessage> parse_messages(const std::string& text) {
  std::vector<PeerMessage> messages;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const std::size_t colon = item.find(':');
    if (item.size() < 2 || colon == std::string::npos) continue;
    messages.push_back(PeerMessage{item[0] == 's', std::stoi(item.substr(1, colon - 1)), std::stoi(item.substr(colon + 1))});
  }
  return messages;
}

// A send or a receive is one message; a batch is its messages.
std::vector<PeerMessage> messages_of(const PeerOp& op) {
  if (op.kind == CollectiveKind::Batch) return op.messages;
  if (op.kind == CollectiveKind::Send || op.kind == CollectiveKind::Recv) {
    return {PeerMessage{op.kind == CollectiveKind::Send, op.peer, op.tag}};
  }
  return {};
}

// The ranks `x`, blocked in `op`, waits for: the members that have not started the collective, or
// each point-to-point peer with no matching message in flight (a single op, or one of a batch).
// A rank with no answer is presumed not there.
std::vector<int> waited_for(int x, const PeerOp& op, const std::map<int, PeerStatus>& answers) {
  const std::string key = join_ranks(op.members);
  std::vector<int> ranks;
  if (is_point_to_point(op.kind)) {
    for (const PeerMessage& m : messages_of(op)) {
      if (m.peer < 0 || std::ranges::find(ranks, m.peer) != ranks.end()) continue;
      auto theirs = answers.find(m.peer);
      bool matched = false;
      if (theirs != answers.end()) {
        for (const PeerOp& o : theirs->second.in_flight) {
          if (join_ranks(o.members) != key) continue;
          for (const PeerMessage& n : messages_of(o)) matched = matched || (n.send != m.send && n.peer == x && n.tag == m.tag);
        }
      }
      if (!matched) ranks.push_back(m.peer);
    }
    return ranks;
  }
  for (int member : op.members) {
    if (member == x) continue;
    auto theirs = answers.find(member);
    if (theirs == answers.end()) {
      ranks.push_back(member);
      continue;
    }
    auto group = theirs->second.groups.find(key);
    const std::uint64_t started = group == theirs->second.groups.end() ? 0 : group->second.collectives;
    if (started <= op.sequence) ranks.push_back(member);
  }
  return ranks;
}

}  // namespace

std::string join_ranks(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) {
    if (!text.empty()) text += ',';
    text += std::to_string(r);
  }
  return text;
}

std::string PeerStatus::group_line(const std::vector<int>& members, std::uint64_t collectives, const std::string& last) {
  return "G\t" + join_ranks(members) + '\t' + std::to_string(collectives) + '\t' + last + '\n';
}

std::string PeerStatus::op_line(const PeerOp& op) {
  std::ostringstream line;
  line << "F\t" << op.what << '\t' << op.detail << '\t' << join_ranks(op.members) << '\t' << static_cast<int>(op.kind)
       << '\t' << op.sequence << '\t' << op.peer << '\t' << op.tag << '\t' << encode_messages(op.messages) << '\n';
  return line.str();
}

std::string PeerStatus::event_line(const std::string& event) { return "E\t" + event + '\n'; }

std::string PeerStatus::unpolled_line(double seconds) { return "P\t" + std::to_string(seconds) + '\n'; }

PeerStatus PeerStatus::parse(const std::string& text) {
  PeerStatus s;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const auto f = split_fields(line);
    if (f[0] == "G" && f.size() >= 4) s.groups[f[1]] = Group{std::stoull(f[2]), f[3]};
    if (f[0] == "F" && f.size() >= 8) {
      s.in_flight.push_back(PeerOp{f[1], f[2], parse_ranks(f[3]), static_cast<CollectiveKind>(std::stoi(f[4])),
                                   std::stoull(f[5]), std::stoi(f[6]), std::stoi(f[7]),
                                   f.size() >= 9 ? parse_messages(f[8]) : std::vector<PeerMessage>{}});
    }
    if (f[0] == "E" && f.size() >= 2) s.events.push_back(f[1]);
    if (f[0] == "P" && f.size() >= 2) s.unpolled_s = std::stod(f[1]);
  }
  return s;
}

WaitChain follow_wait_chain(int self, const PeerOp& expired, const std::map<int, PeerStatus>& answers,
                            const std::set<int>& asked, double paused_s) {
  WaitChain chain;
  std::set<int> followed{self};
  std::set<int> to_ask;
  std::deque<std::pair<int, std::vector<PeerOp>>> blocked{{self, {expired}}};
  while (!blocked.empty()) {
    const auto [x, ops] = std::move(blocked.front());
    blocked.pop_front();
    bool waits = false;
    for (const PeerOp& op : ops) {
      for (int member : op.members) {
        if (!asked.contains(member)) to_ask.insert(member);
      }
      for (int y : waited_for(x, op, answers)) {
        waits = true;
        chain.links.push_back(WaitLink{x, y, op.what});
        if (!followed.insert(y).second) continue;  // reached before (or a cycle): followed once
        auto theirs = answers.find(y);
        if (theirs == answers.end() || theirs->second.unpolled_s > paused_s) {
          chain.silent.push_back(y);
        } else if (theirs->second.in_flight.empty()) {
          chain.busy.push_back(y);
        } else {
          blocked.emplace_back(y, theirs->second.in_flight);
        }
      }
    }
    if (!waits) {
      // Every member has started x's ops. A member that answered only after a pause (stopped
      // inside the op, then resumed as the job ends) is why the transfer does not move.
      for (const PeerOp& op : ops) {
        for (int y : op.members) {
          auto theirs = answers.find(y);
          if (y == x || theirs == answers.end() || theirs->second.unpolled_s <= paused_s) continue;
          waits = true;
          chain.links.push_back(WaitLink{x, y, op.what});
          if (followed.insert(y).second) chain.silent.push_back(y);
        }
      }
    }
    if (!waits) chain.stuck.push_back(x);
  }
  std::ranges::sort(chain.silent);
  std::ranges::sort(chain.busy);
  chain.to_ask.assign(to_ask.begin(), to_ask.end());
  return chain;
}

}  // namespace mt
