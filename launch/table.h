// Plain-text tables with aligned columns, for what rank 0 prints.
// defines: TextTable, format_cell
#pragma once

#include <string>
#include <vector>

namespace mt {

// One number printed with a printf format ("%.2f"), for a table cell.
std::string format_cell(const char* format, double value);

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
