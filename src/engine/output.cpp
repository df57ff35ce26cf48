#include "engine/output.h"

#include <algorithm>

namespace peregrine {
namespace {

// Index <= cut that does not split a UTF-8 character.
size_t utf8_boundary(const std::string& s, size_t cut) {
  while (cut > 0 && cut < s.size() && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return cut;
}

std::string take_all(Sequence& seq, bool flush) {
  std::string out = std::move(seq.held_text);
  seq.held_text.clear();
  if (flush && seq.detok) out += seq.detok->flush();
  return out;
}

}  // namespace

TokenOutcome process_token(Sequence& seq, TokenId token, const Tokenizer* tokenizer, int64_t context_length) {
  TokenOutcome out;
  const Request& r = seq.request;
  const bool stop_id = std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), token) != r.stop_token_ids.end();
  const bool eog = tokenizer != nullptr && !r.ignore_eos && tokenizer->is_end_of_generation(token);
  if (stop_id || eog) {
    out.text = take_all(seq, true);
    out.finish = RequestFinish::Stop;
    return out;
  }
  if (tokenizer != nullptr) {
    if (!seq.detok) {
      // A prompt of control tokens only (BOS) means the output starts the text (SentencePiece
      // then drops the first piece's leading space), as Tokenizer::decode does for a whole text.
      const bool starts_text =
          std::all_of(r.prompt.begin(), r.prompt.end(), [&](TokenId t) { return tokenizer->is_control(t); });
      seq.detok.emplace(*tokenizer, false, starts_text);
    }
    seq.held_text += seq.detok->push(token);
    size_t first = std::string::npos;
    for (const std::string& s : r.stop) {
      if (s.empty()) continue;
      const size_t at = seq.held_text.find(s);
      if (at < first) first = at;
    }
    if (first != std::string::npos) {
      out.text = seq.held_text.substr(0, first);
      seq.held_text.clear();
      out.finish = RequestFinish::Stop;
      return out;
    }
  }
  if (seq.grammar_done) {
    out.text = take_all(seq, true);
    out.finish = RequestFinish::Stop;
    return out;
  }
  if (seq.n_generated() >= r.max_tokens || static_cast<int64_t>(seq.tokens.size()) >= context_length) {
    out.text = take_all(seq, true);
    out.finish = RequestFinish::Length;
    return out;
  }
  // Hold back the longest tail that could still be the start of a stop string.
  size_t hold = 0;
  for (const std::string& s : r.stop) hold = std::max(hold, s.empty() ? 0 : s.size() - 1);
  hold = std::min(hold, seq.held_text.size());
  const size_t cut = utf8_boundary(seq.held_text, seq.held_text.size() - hold);
  out.text = seq.held_text.substr(0, cut);
  seq.held_text.erase(0, cut);
  return out;
}

TokenOutcome end_output(Sequence& seq, RequestFinish finish) {
  TokenOutcome out;
  out.text = take_all(seq, true);
  out.finish = finish;
  return out;
}

}  // namespace peregrine
