// The unit ops of every family (runtime/ops/<family>.h) on the CPU: the units in an OpenMP loop. Units own disjoint outputs, so the static schedule only decides who computes, never how.
#include "runtime/backend.h"

namespace mt::backend {
namespace {
template <class Op>
void run_units(const Op& op, int threads) {
  const std::int64_t units = op.count();
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t i = 0; i < units; ++i) op(i);
}
}  // namespace

#define MT_CPU_RUN(Op)                                                                         \
  void Cpu::run(const nn_math::Op<float>& op, int threads) { run_units(op, threads); }          \
  void Cpu::run(const nn_math::Op<bf16>& op, int threads) { run_units(op, threads); }
MT_CPU_UNIT_OPS(MT_CPU_RUN)
#undef MT_CPU_RUN

}  // namespace mt::backend
