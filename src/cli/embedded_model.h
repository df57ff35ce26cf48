#pragma once
// The demo model compiled into the binary (models/demo-target.gguf), if the build had one.
#include <cstddef>
#include <optional>
#include <span>

namespace peregrine::cli {

std::optional<std::span<const std::byte>> embedded_demo_model();

}  // namespace peregrine::cli
