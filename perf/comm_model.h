// Alpha-beta costs of the collectives meshtrain issues, on one kind of link: a ring (bandwidth
// optimal) and a binary tree (latency optimal for small messages), taking the faster, as NCCL's
// tuner does. Pure arithmetic.
// defines: ring_allreduce_s, tree_allreduce_s, allreduce_s, reduce_scatter_s, allgather_s, p2p_s,
//          ring_allreduce_steps, ring_allreduce_bytes
#pragma once

#include "perf/cluster.h"

namespace mt::perf {

// The ring allreduce of `bytes` on n ranks: 2(n-1) steps, each rank sends 2(n-1)/n x bytes.
double ring_allreduce_steps(int n);
double ring_allreduce_bytes(int n, double bytes);
double ring_allreduce_s(int n, double bytes, const Link& link);
// Reduce up a binary tree and broadcast down: 2 ceil(log2 n) steps, each moving the whole buffer
// (pipelined, so the bandwidth term is ~2 x bytes / bandwidth whatever n).
double tree_allreduce_s(int n, double bytes, const Link& link);
double allreduce_s(int n, double bytes, const Link& link);  // min of ring and tree; 0 for n == 1
// Ring reduce-scatter / allgather of a `bytes` buffer (each rank ends with or contributes bytes/n):
// n-1 steps, (n-1)/n x bytes sent per rank.
double reduce_scatter_s(int n, double bytes, const Link& link);
double allgather_s(int n, double bytes, const Link& link);
double p2p_s(double bytes, const Link& link);  // one message

}  // namespace mt::perf
