// Small helpers shared by the GoogleTest files.
// defines: error_of, contains, read_text
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "runtime/error.h"

namespace mt::testing {

// The message of the error of type E (an mt::Error by default) that fn throws, or a test failure
// when it throws none.
template <class E = Error, class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.message();
  }
  ADD_FAILURE() << "expected an exception of type " << ::testing::internal::GetTypeName<E>();
  return "";
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The whole of a text file ("" when it cannot be read).
inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace mt::testing
