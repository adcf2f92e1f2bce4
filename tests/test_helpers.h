// Small helpers shared by the GoogleTest files.
// defines: error_of, contains, read_text, expect_near
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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

// Every element of got within tol x (the largest |want| + |want[i]|) of want: an error relative to
// the tensor's scale, so that near-zero elements are not held to a relative bound they cannot meet.
// Reports the first difference and the count; records the worst relative error in the XML report.
inline void expect_near(const std::vector<float>& got, const std::vector<float>& want, double tol,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0.0;
  for (float w : want) scale = std::max(scale, static_cast<double>(std::abs(w)));
  EXPECT_GT(scale, 0.0) << what;
  std::size_t bad = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    worst = std::max(worst, err / (scale + std::abs(want[i])));
    if (!(err <= tol * (scale + std::abs(want[i]))) && bad++ == 0)
      ADD_FAILURE() << what << ": first difference at " << i << ": " << got[i] << " vs " << want[i];
  }
  EXPECT_EQ(bad, 0u) << what << ": of " << want.size() << " elements";
  char margin[32];
  std::snprintf(margin, sizeof margin, "%.3g", worst);
  ::testing::Test::RecordProperty(what, margin);
}

// The whole of a text file ("" when it cannot be read).
inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace mt::testing
