#include "perf/comm_model.h"

#include <algorithm>
#include <cmath>

namespace mt::perf {

double ring_allreduce_steps(int n) { return 2.0 * (n - 1); }
double ring_allreduce_bytes(int n, double bytes) { return n <= 1 ? 0.0 : 2.0 * (n - 1) / n * bytes; }

double ring_allreduce_s(int n, double bytes, const Link& link) {
  if (n <= 1) return 0.0;
  return ring_allreduce_steps(n) * link.latency + ring_allreduce_bytes(n, bytes) / link.bandwidth;
}

double tree_allreduce_s(int n, double bytes, const Link& link) {
  if (n <= 1) return 0.0;
  const double depth = std::ceil(std::log2(static_cast<double>(n)));
  return 2.0 * depth * link.latency + 2.0 * bytes / link.bandwidth;
}

double allreduce_s(int n, double bytes, const Link& link) {
  if (n <= 1) return 0.0;
  return std::min(ring_allreduce_s(n, bytes, link), tree_allreduce_s(n, bytes, link));
}

double reduce_scatter_s(int n, double bytes, const Link& link) {
  if (n <= 1) return 0.0;
  return (n - 1) * link.latency + static_cast<double>(n - 1) / n * bytes / link.bandwidth;
}

double allgather_s(int n, double bytes, const Link& link) { return reduce_scatter_s(n, bytes, link); }

double p2p_s(double bytes, const Link& link) { return link.latency + bytes / link.bandwidth; }

}  // namespace mt::perf
