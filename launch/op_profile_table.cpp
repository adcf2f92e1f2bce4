#include "launch/op_profile_table.h"

#include "launch/table.h"

namespace mt {

std::string op_profile_table(const std::vector<OpPerStep>& ops, double step_s, std::size_t top,
                             const std::string& outside_label) {
  TextTable table({"op", "calls/step", "ms/step", "of step"});
  const auto add = [&](const std::string& name, const std::string& calls, double seconds) {
    table.add_row({name, calls, format_cell("%.3f", 1e3 * seconds), format_cell("%.1f%%", 100.0 * seconds / step_s)});
  };
  double in_ops = 0;
  OpPerStep rest{format_cell("(%.0f more ops)", static_cast<double>(ops.size()) - static_cast<double>(top))};
  for (std::size_t i = 0; i < ops.size(); ++i) {
    in_ops += ops[i].seconds;
    if (i < top) {
      add(ops[i].name, format_cell("%.1f", ops[i].calls), ops[i].seconds);
    } else {
      rest.calls += ops[i].calls;
      rest.seconds += ops[i].seconds;
    }
  }
  if (ops.size() > top) add(rest.name, format_cell("%.1f", rest.calls), rest.seconds);
  add(outside_label, "", step_s - in_ops);
  return table.render();
}

}  // namespace mt
