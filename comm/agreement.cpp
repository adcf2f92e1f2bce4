#include "comm/agreement.h"

#include <algorithm>
#include <exception>
#include <vector>

#include "runtime/error.h"

namespace mt {
namespace {

// Messages travel as one int32 per byte: the communicators move fp32 and int32 tensors.
std::vector<std::int32_t> encode(const std::string& text, std::size_t width) {
  std::vector<std::int32_t> out(width, 0);
  for (std::size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

std::string decode(const std::int32_t* data, std::size_t length) {
  std::string text(length, '\0');
  for (std::size_t i = 0; i < length; ++i) text[i] = static_cast<char>(data[i]);
  return text;
}

}  // namespace

std::vector<std::string> allgather_strings(Communicator& comm, DeviceContext& ctx, const std::string& mine) {
  const auto n = static_cast<std::size_t>(comm.size());
  Tensor length = Tensor::from_host(std::vector<std::int32_t>{static_cast<std::int32_t>(mine.size())}, {1}, ctx);
  Tensor lengths = Tensor::empty({static_cast<std::int64_t>(n)}, DType::I32, ctx);
  comm.allgather(length, lengths);
  const std::vector<std::int32_t> sizes = lengths.to_host<std::int32_t>();
  const std::int32_t widest = *std::max_element(sizes.begin(), sizes.end());
  std::vector<std::string> out(n);
  if (widest == 0) return out;
  const auto width = static_cast<std::size_t>(widest);
  Tensor local = Tensor::from_host(encode(mine, width), {widest}, ctx);
  Tensor all = Tensor::empty({static_cast<std::int64_t>(n * width)}, DType::I32, ctx);
  comm.allgather(local, all);
  const std::vector<std::int32_t> chars = all.to_host<std::int32_t>();
  for (std::size_t r = 0; r < n; ++r) out[r] = decode(chars.data() + r * width, static_cast<std::size_t>(sizes[r]));
  return out;
}

int agree_on_max(Communicator& comm, DeviceContext& ctx, int mine) {
  Tensor value = Tensor::from_host(std::vector<std::int32_t>{mine}, {1}, ctx);
  comm.allreduce(value, {.op = ReduceOp::Max});
  return value.to_host<std::int32_t>()[0];
}

void agree_on_error(Communicator& comm, DeviceContext& ctx, const std::optional<std::string>& mine) {
  const auto n = static_cast<std::size_t>(comm.size());
  std::string text;
  if (mine) {
    // An empty message still has to count as a failure.
    text = mine->empty() ? std::string("unknown error") : *mine;
  }
  const std::vector<std::string> messages = allgather_strings(comm, ctx, text);
  std::size_t failed = 0, first = n;
  for (std::size_t r = 0; r < n; ++r) {
    if (messages[r].empty()) continue;
    ++failed;
    first = std::min(first, r);
  }
  if (failed == 0) return;
  const bool unanimous = failed == n && std::all_of(messages.begin(), messages.end(),
                                                     [&](const std::string& m) { return m == messages[first]; });
  std::string message = messages[first];
  if (!unanimous) {
    const int world_rank = comm.world_ranks()[first];
    message = "rank " + std::to_string(world_rank) + ": " + message;
    if (failed > 1) message += " (and " + std::to_string(failed - 1) + " more rank(s) failed)";
  }
  MT_FAIL_AS(JobError, message);
}

void agree_on_first_rank_error(Communicator& comm, DeviceContext& ctx, const std::optional<std::string>& mine) {
  // Its length + 1 first (0: no error), then the text.
  const std::string text = mine ? (mine->empty() ? std::string("unknown error") : *mine) : std::string();
  Tensor length = Tensor::from_host(
      std::vector<std::int32_t>{comm.rank() == 0 && mine ? static_cast<std::int32_t>(text.size()) + 1 : 0}, {1}, ctx);
  comm.broadcast(length);
  const std::int32_t got = length.to_host<std::int32_t>()[0];
  if (got == 0) return;
  const auto size = static_cast<std::size_t>(got - 1);
  Tensor chars = Tensor::from_host(encode(comm.rank() == 0 ? text : std::string(), size + 1), {got}, ctx);
  comm.broadcast(chars);
  MT_FAIL_AS(JobError, decode(chars.to_host<std::int32_t>().data(), size));
}

namespace {
// What `body` threw, as a message; nullopt when it returned.
std::optional<std::string> error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.message();
  } catch (const std::exception& e) {
    return e.what();
  }
  return std::nullopt;
}
}  // namespace

void run_agreed(Communicator& comm, DeviceContext& ctx, const std::function<void()>& body) {
  agree_on_error(comm, ctx, error_of(body));
}

void run_on_first_rank_agreed(Communicator& comm, DeviceContext& ctx, const std::function<void()>& body) {
  agree_on_first_rank_error(comm, ctx, comm.rank() == 0 ? error_of(body) : std::nullopt);
}

}  // namespace mt
