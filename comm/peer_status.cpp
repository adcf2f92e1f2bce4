#include "comm/peer_status.h"

#include <set>
#include <thread>

namespace mt {

namespace {
constexpr int kQuestionTag = 1;
constexpr int kAnswerTag = 2;
const int kQuestion = 0;  // what a question carries: nothing but its arrival
}  // namespace

PeerStatusChannel::PeerStatusChannel() : comm_(MpiComm::world().dup()) { post_question_receive(); }

PeerStatusChannel::~PeerStatusChannel() {
  if (question_request_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&question_request_);
    MPI_Wait(&question_request_, MPI_STATUS_IGNORE);
  }
  // Answers to a rank that stopped listening may never complete: cancel rather than wait.
  for (Outgoing& o : outgoing_) {
    int done = 0;
    MPI_Test(&o.request, &done, MPI_STATUS_IGNORE);
    if (!done) {
      MPI_Cancel(&o.request);
      MPI_Request_free(&o.request);
    }
  }
}

void PeerStatusChannel::post_question_receive() {
  MT_MPI_CHECK(MPI_Irecv(&question_, 1, MPI_INT, MPI_ANY_SOURCE, kQuestionTag, comm_.get(), &question_request_));
}

void PeerStatusChannel::answer(const std::function<std::string()>& status) {
  const auto now = std::chrono::steady_clock::now();
  unpolled_ = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_poll_);
  last_poll_ = now;
  for (;;) {
    int arrived = 0;
    MPI_Status from;
    MT_MPI_CHECK(MPI_Test(&question_request_, &arrived, &from));
    if (!arrived) break;
    Outgoing& reply = outgoing_.emplace_back(Outgoing{status(), MPI_REQUEST_NULL});
    MT_MPI_CHECK(MPI_Isend(reply.text.data(), static_cast<int>(reply.text.size()), MPI_CHAR, from.MPI_SOURCE,
                           kAnswerTag, comm_.get(), &reply.request));
    post_question_receive();
  }
  for (auto it = outgoing_.begin(); it != outgoing_.end();) {
    int done = 0;
    MT_MPI_CHECK(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE));
    it = done ? outgoing_.erase(it) : std::next(it);
  }
}

std::map<int, std::string> PeerStatusChannel::ask(const std::vector<int>& world_ranks, std::chrono::milliseconds limit,
                                                  const std::function<std::string()>& status) {
  return ask(world_ranks, limit, status, {});
}

std::map<int, std::string> PeerStatusChannel::ask(const std::vector<int>& world_ranks, std::chrono::milliseconds limit,
                                                  const std::function<std::string()>& status, const Onward& onward) {
  std::set<int> asked;
  auto send_questions = [&](const std::vector<int>& ranks) {
    for (int peer : ranks) {
      if (!asked.insert(peer).second) continue;
      Outgoing& question = outgoing_.emplace_back(Outgoing{"?", MPI_REQUEST_NULL});
      MT_MPI_CHECK(MPI_Isend(&kQuestion, 1, MPI_INT, peer, kQuestionTag, comm_.get(), &question.request));
    }
  };
  send_questions(world_ranks);
  std::map<int, std::string> answers;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (answers.size() < asked.size() && std::chrono::steady_clock::now() < deadline) {
    answer(status);  // the peers may be asking us at the same time
    int waiting = 0;
    MPI_Status probe;
    MT_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, kAnswerTag, comm_.get(), &waiting, &probe));
    if (!waiting) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    int length = 0;
    MT_MPI_CHECK(MPI_Get_count(&probe, MPI_CHAR, &length));
    std::string text(static_cast<std::size_t>(length), '\0');
    MT_MPI_CHECK(MPI_Recv(text.data(), length, MPI_CHAR, probe.MPI_SOURCE, kAnswerTag, comm_.get(), MPI_STATUS_IGNORE));
    // A late answer to an earlier question is dropped: it was not asked for now.
    if (!asked.contains(probe.MPI_SOURCE)) continue;
    if (onward) send_questions(onward(probe.MPI_SOURCE, text));
    answers[probe.MPI_SOURCE] = std::move(text);
  }
  return answers;
}

}  // namespace mt
