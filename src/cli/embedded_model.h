#pragma once
// The demo models compiled into the binary (models/demo-target.gguf, and the draft model and
// prediction heads trained for it), if the build had them.
#include <cstddef>
#include <optional>
#include <span>
#include <string_view>

namespace peregrine::cli {

// The embedded file of that name: "target", or a proposer's ("draft", "heads": the file its
// registry entry reads, engine/proposer_registry.h); nullopt when the build has none.
std::optional<std::span<const std::byte>> embedded_demo_file(std::string_view name);
inline std::optional<std::span<const std::byte>> embedded_demo_model() { return embedded_demo_file("target"); }

}  // namespace peregrine::cli
