// A seed on the command line: a whole number in [0, 2^64). Boost reads a std::uint64_t option
// through a cast that takes "-1" as 2^64 - 1, so a typo'd negative seed would quietly pick another
// run's data order and initialization; this type refuses it (and anything but digits).
// defines: SeedValue, seed_value
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace mt {

struct SeedValue {
  std::uint64_t value = 0;
};

// The option's value semantic, with `fallback` as its default.
boost::program_options::typed_value<SeedValue>* seed_value(std::uint64_t fallback);

// Boost's hook for parsing a SeedValue (found by argument-dependent lookup).
void validate(boost::any& out, const std::vector<std::string>& values, SeedValue*, int);

}  // namespace mt
