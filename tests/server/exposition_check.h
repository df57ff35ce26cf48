#pragma once
// Checks a Prometheus text exposition line by line (used on Metrics::render and on /metrics).
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <set>
#include <sstream>
#include <string>

namespace peregrine::server {

// Every line of an exposition is a comment (# HELP / # TYPE) or `name{labels} value` with a
// number value; every sample's family was declared by a # TYPE line.
inline void expect_valid_exposition(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  std::set<std::string> families;
  int samples = 0;
  while (std::getline(in, line)) {
    ASSERT_FALSE(line.empty()) << "empty line in exposition";
    if (line.rfind("# ", 0) == 0) {
      std::istringstream c(line.substr(2));
      std::string kind, name, type;
      c >> kind >> name >> type;
      ASSERT_TRUE(kind == "HELP" || kind == "TYPE") << line;
      if (kind == "TYPE") {
        ASSERT_TRUE(type == "counter" || type == "gauge" || type == "histogram") << line;
        families.insert(name);
      }
      continue;
    }
    const size_t space = line.rfind(' ');
    ASSERT_NE(space, std::string::npos) << line;
    std::string name = line.substr(0, space);
    const std::string value = line.substr(space + 1);
    if (const size_t brace = name.find('{'); brace != std::string::npos) {
      ASSERT_EQ(name.back(), '}') << line;
      name = name.substr(0, brace);
    }
    for (char ch : name) ASSERT_TRUE(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == ':') << line;
    size_t used = 0;
    const double v = std::stod(value, &used);
    ASSERT_EQ(used, value.size()) << line;
    ASSERT_FALSE(std::isnan(v)) << line;
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (!families.count(family) && family.size() > s.size() && family.compare(family.size() - s.size(), s.size(), s) == 0) {
        family = family.substr(0, family.size() - s.size());
      }
    }
    ASSERT_TRUE(families.count(family)) << "sample without # TYPE: " << line;
    ++samples;
  }
  EXPECT_GT(samples, 10);
}

}  // namespace peregrine::server
