#pragma once
// The demo models compiled into the binary (models/demo-target.gguf, and the draft model and
// prediction heads trained for it), if the build had them.
#include <cstddef>
#include <optional>
#include <span>

namespace peregrine::cli {

enum class DemoFile { Target, Draft, Heads };

std::optional<std::span<const std::byte>> embedded_demo_file(DemoFile which);
inline std::optional<std::span<const std::byte>> embedded_demo_model() { return embedded_demo_file(DemoFile::Target); }

}  // namespace peregrine::cli
