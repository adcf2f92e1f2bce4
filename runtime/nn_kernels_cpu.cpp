// CPU side of the transformer ops: the units of each functor (runtime/nn_functors.h) in an OpenMP
// loop. Units own disjoint outputs, so the static schedule only decides who computes, never how.
#include "runtime/nn_backend.h"

namespace mt::backend {
namespace {
template <class Op>
void run_units(const Op& op, int threads) {
  const std::int64_t units = op.count();
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t i = 0; i < units; ++i) op(i);
}
}  // namespace

#define MT_NN_CPU_RUN(Op)                                                                         \
  void CpuNn::run(const nn_math::Op<float>& op, int threads) { run_units(op, threads); }          \
  void CpuNn::run(const nn_math::Op<bf16>& op, int threads) { run_units(op, threads); }
MT_NN_OPS(MT_NN_CPU_RUN)
#undef MT_NN_CPU_RUN

}  // namespace mt::backend
