#include "tokenizer/spm.h"

#include <algorithm>
#include <queue>
#include <string>
#include <utility>

#include "tokenizer/symbol_merge.h"
#include "tokenizer/utf8.h"

namespace peregrine::tokenizer {
namespace {

struct Bigram {
  int left;
  int right;
  float score;
  size_t size;  // bytes of the merged piece, to detect stale entries
};

// Highest score first; on ties the leftmost pair (llama.cpp's comparator).
struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

class SpmSession {
 public:
  SpmSession(const Vocab& vocab, std::string_view text) : vocab_(vocab), text_(text) {}

  void run(std::vector<Id>& out) {
    for (size_t offs = 0; offs < text_.size();) {
      const size_t len = std::min(utf8::lead_length(static_cast<unsigned char>(text_[offs])),
                                  text_.size() - offs);
      const int index = static_cast<int>(symbols_.size());
      offs += len;
      symbols_.push_back({index - 1, offs == text_.size() ? -1 : index + 1, offs - len, len});
    }
    for (int i = 1; i < static_cast<int>(symbols_.size()); ++i) try_add_bigram(i - 1, i);

    merge_best_pairs(symbols_, queue_, [this](int l, int r) { try_add_bigram(l, r); });
    for (int i = symbols_.empty() ? -1 : 0; i != -1; i = symbols_[static_cast<size_t>(i)].next) {
      resegment(symbols_[static_cast<size_t>(i)], out);
    }
  }

 private:
  std::string_view piece(const Symbol& s) const { return text_.substr(s.offset, s.size); }

  void try_add_bigram(int left, int right) {
    if (left == -1 || right == -1) return;
    const Symbol& l = symbols_[static_cast<size_t>(left)];
    const Symbol& r = symbols_[static_cast<size_t>(right)];
    const std::string_view merged = text_.substr(l.offset, l.size + r.size);
    const Id id = vocab_.find(merged);
    if (id < 0) return;
    queue_.push({left, right, vocab_.scores[static_cast<size_t>(id)], merged.size()});
    rev_merge_.insert_or_assign(std::string(merged), std::make_pair(left, right));
  }

  // A final piece that is not itself a token is split back along the merges that built it;
  // what remains unknown goes out as byte tokens.
  void resegment(const Symbol& s, std::vector<Id>& out, int depth = 0) {
    const std::string_view text = piece(s);
    if (const Id id = vocab_.find(text); id >= 0) {
      out.push_back(id);
      return;
    }
    const auto it = rev_merge_.find(text);
    // The depth guard only protects against a malformed vocabulary sending us in circles.
    if (it == rev_merge_.end() || depth > 256) {
      for (char c : text) {
        const Id byte_id = spm_byte_token(vocab_, static_cast<unsigned char>(c));
        // A vocabulary without byte tokens cannot spell this byte: fall back to <unk>.
        if (byte_id >= 0) {
          out.push_back(byte_id);
        } else if (vocab_.unk >= 0) {
          out.push_back(vocab_.unk);
        }
      }
      return;
    }
    const auto [l, r] = it->second;
    resegment(symbols_[static_cast<size_t>(l)], out, depth + 1);
    resegment(symbols_[static_cast<size_t>(r)], out, depth + 1);
  }

  const Vocab& vocab_;
  std::string_view text_;
  std::vector<Symbol> symbols_;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue_;
  StringMap<std::pair<int, int>> rev_merge_;
};

}  // namespace

Id spm_byte_token(const Vocab& vocab, unsigned char byte) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const char name[6] = {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>'};
  if (const Id id = vocab.find(std::string_view(name, 6)); id >= 0) return id;
  const char raw = static_cast<char>(byte);
  return vocab.find(std::string_view(&raw, 1));
}

void spm_encode(const Vocab& vocab, std::string_view text, std::vector<Id>& out) {
  SpmSession(vocab, text).run(out);
}

}  // namespace peregrine::tokenizer
