// Who a hung op really waits for. A member that has not started the op may itself be blocked in
// another op of another group, on a third rank: the watchdog follows these waits from rank to rank
// until it reaches one that does not answer (stopped, dead) or answers that it is in no op at all
// (busy outside any collective). Pure logic over the ranks' answers, so it is tested without MPI.
// defines: PeerMessage, PeerOp, PeerStatus, WaitLink, WaitChain, follow_wait_chain, join_ranks
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "comm/op_record.h"

namespace mt {

std::string join_ranks(const std::vector<int>& ranks);  // "0,2,3"

// One message of a point-to-point batch in flight, as its rank reports it.
struct PeerMessage {
  bool send = true;  // else a receive
  int peer = -1;     // the other side's world rank
  int tag = 0;
};

// An op a rank has in flight, as it reports it.
struct PeerOp {
  std::string what;          // "allreduce #5 ... on group "dp" (world ranks 0,2)"
  std::string detail;        // "for 3.0 s, called at parallel/grad_reducer.cpp:88"
  std::vector<int> members;  // world ranks of its group, in group order
  CollectiveKind kind = CollectiveKind::Barrier;
  std::uint64_t sequence = 0;
  int peer = -1;  // send/recv: the other side's world rank
  int tag = 0;
  std::vector<PeerMessage> messages;  // a batch's
};

// A rank's answer to "what are you doing?": one line per group (G), op in flight (F) and recent
// event (E), and how long it had not looked for questions (P), fields separated by tabs; a batch's
// messages ride in the op's last field ("s1:3,r0:8": send to world rank 1 tag 3, receive from 0 tag 8).
struct PeerStatus {
  struct Group {
    std::uint64_t collectives = 0;  // started on the group
    std::string last;               // description and place of the last collective started
  };
  std::map<std::string, Group> groups;  // by member list (join_ranks)
  std::vector<PeerOp> in_flight;
  std::vector<std::string> events;  // "2.1 s ago: began step 7 of 20", oldest first
  double unpolled_s = 0;  // before it answered: long for a rank that was stopped and resumed

  static std::string group_line(const std::vector<int>& members, std::uint64_t collectives, const std::string& last);
  static std::string op_line(const PeerOp& op);
  static std::string event_line(const std::string& event);
  static std::string unpolled_line(double seconds);
  static PeerStatus parse(const std::string& text);
};

struct WaitLink {
  int from = 0;
  int to = 0;
  std::string in;  // the op `from` waits in (PeerOp::what)
};

struct WaitChain {
  std::vector<WaitLink> links;  // breadth first from the asking rank
  std::vector<int> silent;      // waited for, and no answer (or one only after a pause): culprits
  std::vector<int> busy;        // waited for, answered, in no op: culprits
  std::vector<int> stuck;       // blocked in an op every member has started: a transfer is stuck
  std::vector<int> to_ask;      // members of the chain's ops not asked yet: their answers may extend it
  bool has_culprit() const { return !silent.empty() || !busy.empty(); }
};

// Follows the waits from `self`, blocked in `expired`. `answers` holds the ranks that answered
// (`self`'s own status included); `asked` every rank asked so far: an asked rank without an answer
// counts as silent, a rank never asked is put in `to_ask` (and counts as silent too, for a chain
// that has to end now). A rank that answered after not looking for questions for more than
// `paused_s` (stopped, and resumed as the job ends) counts as silent, also where it had started
// the op it is waited in: a rank blocked in ops every member has started waits for such members,
// and is `stuck` only when none paused. Each rank is followed once, so cycles end.
WaitChain follow_wait_chain(int self, const PeerOp& expired, const std::map<int, PeerStatus>& answers,
                            const std::set<int>& asked, double paused_s);

}  // namespace mt
