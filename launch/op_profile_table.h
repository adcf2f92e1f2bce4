// The table of where a profiled step's time went, op by op (runtime/op_profile.h), as
// `meshbench train --profile-ops` and `meshtrain train --profile-ops` print it.
// defines: OpPerStep, op_profile_table
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace mt {

// One op's share of a profiled step: its calls and drained seconds per step (on one rank, or the
// mean over the ranks).
struct OpPerStep {
  std::string name;
  double calls = 0, seconds = 0;
};

// The `top` ops (given most time first) with their calls, ms and share of `step_s`, the rest summed
// in one row, and one row for the time no op held (the host between ops; under mpirun also the
// communication waits and a pipeline's bubble, which no op of the device layer holds).
std::string op_profile_table(const std::vector<OpPerStep>& ops, double step_s, std::size_t top,
                             const std::string& outside_label);

}  // namespace mt
