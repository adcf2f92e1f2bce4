// Plain-text tables with aligned columns, for what rank 0 prints.
// defines: TextTable, format_cell, format_groups
#pragma once

#include <string>
#include <vector>

namespace mt {

// One number printed with a printf format ("%.2f"), for a table cell.
std::string format_cell(const char* format, double value);

// Rank groups as "{0,1} {2,3}" (the cp groups `devices` and `train` print).
std::string format_groups(const std::vector<std::vector<int>>& groups);

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) : header_(std::move(header)) {}
  void add_row(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string render() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace mt
