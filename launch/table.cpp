#include "launch/table.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>

namespace mt {

std::string format_cell(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

std::string format_groups(const std::vector<std::vector<int>>& groups) {
  std::string out;
  for (const std::vector<int>& group : groups) {
    out += out.empty() ? "{" : " {";
    for (std::size_t i = 0; i < group.size(); ++i) out += (i ? "," : "") + std::to_string(group[i]);
    out += "}";
  }
  return out;
}

std::string TextTable::render() const {
  std::vector<std::size_t> width(header_.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (std::size_t i = 0; i < row.size() && i < width.size(); ++i) width[i] = std::max(width[i], row[i].size());
  };
  measure(header_);
  for (const auto& row : rows_) measure(row);
  std::ostringstream out;
  auto print = [&](const std::vector<std::string>& row) {
    for (std::size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      out << cell;
      if (i + 1 < width.size()) out << std::string(width[i] - cell.size() + 2, ' ');
    }
    out << '\n';
  };
  print(header_);
  std::vector<std::string> rule;
  for (std::size_t w : width) rule.emplace_back(w, '-');
  print(rule);
  for (const auto& row : rows_) print(row);
  return out.str();
}

}  // namespace mt
