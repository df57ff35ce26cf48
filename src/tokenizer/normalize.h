#pragma once
// Unicode normalization of input text, for tokenizers whose tokenizer.json asks for it (Qwen's
// NFC). ICU does the normalization.
#include <string>
#include <string_view>

namespace peregrine::tokenizer {

// NFC of every valid UTF-8 run of `text`; invalid bytes are kept as they are (the tokenizer
// spells them with byte tokens) and never merged with their neighbours.
std::string nfc(std::string_view text);

}  // namespace peregrine::tokenizer
