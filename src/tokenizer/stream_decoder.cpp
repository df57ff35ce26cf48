#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace peregrine {

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool render_special, bool at_text_start)
    : tok_(tok), render_special_(render_special), first_(at_text_start && tok.add_space_prefix()) {}

std::string StreamDecoder::push(TokenId id) {
  std::string bytes = tok_.token_to_bytes(id, render_special_);
  // Same leading-space rule as Tokenizer::decode: only the very first token, at most one space.
  if (first_ && !bytes.empty() && bytes[0] == ' ') bytes.erase(0, 1);
  first_ = false;
  pending_ += bytes;

  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const utf8::SeqCheck c = utf8::check_sequence(std::string_view(pending_).substr(i));
    if (c.status == utf8::SeqStatus::Incomplete) break;  // wait for the rest of the character
    if (c.status == utf8::SeqStatus::Valid) {
      out.append(pending_, i, c.length);
    } else {
      out.append(utf8::kReplacement);
    }
    i += c.length;
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8::sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace peregrine
