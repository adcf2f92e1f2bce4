#include "runtime/op_profile.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cxxabi.h>
#include <exception>
#include <memory>
#include <map>
#include <mutex>
#include <utility>

#include "runtime/context.h"
#include "runtime/device_counters.h"

namespace mt {
namespace {

// Relaxed: a switch flipped between steps, never used to order other memory.
std::atomic<bool> profiling{false};

std::mutex timings_mutex;
std::map<std::string, OpTiming>& timings() {
  static std::map<std::string, OpTiming> by_name;
  return by_name;
}

// How many timed ops this thread is inside (0 or 1: only the outermost is timed).
thread_local int timed_depth = 0;

void drain(cuda::StreamHandle stream) {
  if (stream != nullptr) cuda::synchronize_stream(stream);  // the raw wait: not a counted host sync
}

}  // namespace

bool op_profiling() { return profiling.load(std::memory_order_relaxed); }

void set_op_profiling(bool on) { profiling.store(on, std::memory_order_relaxed); }

std::vector<OpTiming> op_timings() {
  std::vector<OpTiming> out;
  {
    std::lock_guard lock(timings_mutex);
    for (const auto& [name, timing] : timings()) out.push_back(timing);
  }
  std::stable_sort(out.begin(), out.end(), [](const OpTiming& a, const OpTiming& b) { return a.seconds > b.seconds; });
  return out;
}

void reset_op_timings() {
  std::lock_guard lock(timings_mutex);
  timings().clear();
}

OpScope::OpScope(DeviceContext& ctx) : stream_(ctx.stream().handle()) {
  count_launch();
  timed_ = timed_depth == 0 && op_profiling();
  if (timed_) ++timed_depth;
}

OpScope::OpScope(DeviceContext& ctx, const char* name) : OpScope(ctx) {
  if (timed_) start(name);
}

OpScope::OpScope(OpScope&& other) noexcept
    : stream_(other.stream_), timed_(std::exchange(other.timed_, false)), name_(std::move(other.name_)),
      began_(other.began_) {}

void OpScope::start(std::string name) {
  name_ = std::move(name);
  drain(stream_);  // what was queued before is not this op's
  began_ = std::chrono::steady_clock::now();
}

OpScope::~OpScope() noexcept(false) {
  if (!timed_) return;
  --timed_depth;
  if (std::uncaught_exceptions() > 0) return;  // the op failed: no wait, no timing, no second error
  drain(stream_);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began_).count();
  std::lock_guard lock(timings_mutex);
  OpTiming& t = timings()[name_];
  t.name = name_;
  ++t.calls;
  t.seconds += seconds;
}

std::string op_type_name(const char* mangled) {
  int status = 0;
  const std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                                         std::free);
  std::string name = status == 0 && demangled ? demangled.get() : mangled;
  name = name.substr(0, name.find('<'));  // "mt::nn_math::LayerNormForward<float>" -> its family's struct
  const std::size_t colon = name.rfind("::");
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

}  // namespace mt
