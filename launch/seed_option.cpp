#include "launch/seed_option.h"

#include <charconv>

namespace mt {

boost::program_options::typed_value<SeedValue>* seed_value(std::uint64_t fallback) {
  return boost::program_options::value<SeedValue>()->default_value(SeedValue{fallback}, std::to_string(fallback));
}

void validate(boost::any& out, const std::vector<std::string>& values, SeedValue*, int) {
  namespace po = boost::program_options;
  po::validators::check_first_occurrence(out);
  const std::string& text = po::validators::get_single_string(values);
  SeedValue seed;
  const char* end = text.data() + text.size();
  // from_chars takes digits only for an unsigned type: no sign, no space, no "0x".
  const auto [ptr, ec] = std::from_chars(text.data(), end, seed.value);
  if (text.empty() || ec != std::errc() || ptr != end) throw po::invalid_option_value(text);
  out = seed;
}

}  // namespace mt
