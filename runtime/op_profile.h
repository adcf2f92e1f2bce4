// Where a step's device time goes, op by op, for a GPU where no profiler runs (the lent machines
// have no Nsight Systems; `meshbench train --profile-ops` prints it). Off by default, and then an
// OpScope costs one relaxed load. In the profiling mode (set_op_profiling) every op call of the
// device layer drains its stream before and after itself, so the wall time between is that op's
// alone: the launch, the kernel and nothing queued before it. That serialises the host with the
// device, so profiled steps are slower than real ones: time steps with it off, then profile a few
// more. The drains use the raw stream wait, not Stream::synchronize: the device counters
// (runtime/device_counters.h) read the same with the profiling on or off.
// Only the outermost op on a thread is timed: an op that runs others (a fused entry point calling
// two kernels) counts once, under its own name. Process-wide, like the counters (one rank a process).
// defines: OpScope, OpTiming, OpProfilingPause, op_profiling, set_op_profiling, op_timings, reset_op_timings,
// op_type_name
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/cuda_api.h"

namespace mt {

class DeviceContext;

// Whether ops are being timed now.
bool op_profiling();
void set_op_profiling(bool on);

struct OpTiming {
  std::string name;  // the op's family and what tells its calls apart (a GEMM's shape)
  std::uint64_t calls = 0;
  double seconds = 0.0;  // wall time of its calls, each drained before and after
};

// Holds the timing off for its scope and then restores it: work inside a profiled step that is not
// the step's (validation after it) is left out.
class OpProfilingPause {
 public:
  OpProfilingPause() : was_on_(op_profiling()) { set_op_profiling(false); }
  ~OpProfilingPause() { set_op_profiling(was_on_); }
  OpProfilingPause(const OpProfilingPause&) = delete;
  OpProfilingPause& operator=(const OpProfilingPause&) = delete;

 private:
  bool was_on_;
};

// Every op timed since the last reset, most time first (equal times by name).
std::vector<OpTiming> op_timings();
void reset_op_timings();

// An op struct's name from its typeid().name(): "LayerNormForward" for mt::nn_math::LayerNormForward<float>.
std::string op_type_name(const char* mangled);

// Counts one op call (count_launch) and, while profiling, times it under `name`. `name` is only
// read while profiling: a call site whose name costs something to build passes a callable that
// returns it (see OpScope::named).
class OpScope {
 public:
  OpScope(DeviceContext& ctx, const char* name);
  // make() -> std::string, called only while profiling.
  template <class MakeName>
  static OpScope named(DeviceContext& ctx, MakeName&& make) {
    OpScope scope(ctx);
    if (scope.timed_) scope.start(make());
    return scope;
  }
  // May throw: a failed drain (a fault of this or an earlier kernel) is the op's error, as the
  // next wait would report it unprofiled; never while an exception is already on its way.
  ~OpScope() noexcept(false);
  OpScope(OpScope&& other) noexcept;
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;
  OpScope& operator=(OpScope&&) = delete;

 private:
  explicit OpScope(DeviceContext& ctx);  // counts, and decides whether this scope is timed
  void start(std::string name);

  cuda::StreamHandle stream_ = nullptr;
  bool timed_ = false;  // profiling, and the outermost op of this thread
  std::string name_;
  std::chrono::steady_clock::time_point began_{};
};

}  // namespace mt
