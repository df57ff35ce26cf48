#pragma once
// Tests that ctest runs once per kernel path, with PEREGRINE_ISA set to each (tests/CMakeLists.txt):
// on a CPU that cannot run the forced path they skip and say why, instead of failing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "kernels/isa.h"

namespace peregrine::test {

// Why this CPU cannot run the path PEREGRINE_ISA forces; nothing when it can or none is forced
// (an unknown name is not a reason to skip: active_isa() reports it as an error).
inline std::optional<std::string> forced_isa_unavailable() {
  const char* env = std::getenv("PEREGRINE_ISA");
  if (!env || !*env) return std::nullopt;
  for (Isa isa : kAllIsas) {
    if (isa_name(isa) != env || isa_supported(isa)) continue;
    return "PEREGRINE_ISA=" + std::string(env) + ": this CPU cannot run the " + env + " kernel path (it needs " +
           std::string(isa_requirements(isa)) + "), so this run is skipped";
  }
  return std::nullopt;
}

// A name for this run's scratch files: ctest runs the same test once per forced path, possibly at
// the same time, and the runs must not share (and delete) each other's files.
inline std::string forced_isa_run_name() {
  const char* env = std::getenv("PEREGRINE_ISA");
  return env && *env ? std::string("isa_") + env : std::string("isa_default");
}

}  // namespace peregrine::test

// In a test body or SetUp(): skips the test when PEREGRINE_ISA forces a path this CPU lacks.
#define PEREGRINE_SKIP_IF_FORCED_ISA_UNAVAILABLE()                         \
  if (const auto why = ::peregrine::test::forced_isa_unavailable(); why) { \
    GTEST_SKIP() << *why;                                                  \
  }
