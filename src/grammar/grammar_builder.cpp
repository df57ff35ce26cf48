#include "grammar/grammar_builder.h"

#include <map>
#include <string>

namespace peregrine {
namespace {

using Kind = GrammarElement::Kind;
using Sequence = std::vector<GrammarElement>;

class Builder {
 public:
  explicit Builder(std::string_view source) : source_(source) {}

  Grammar build(const std::vector<GbnfRule>& rules, std::string_view start_rule) {
    for (const GbnfRule& r : rules) {
      if (auto it = named_.find(r.name); it != named_.end()) {
        fail(r.offset, "rule '" + r.name + "' is defined twice");
      }
      named_.emplace(r.name, new_rule(r.name));
    }
    for (const GbnfRule& r : rules) define(named_.at(r.name), r.body);
    auto root = named_.find(std::string(start_rule));
    if (root == named_.end())
      throw GrammarError("grammar: there is no rule named '" + std::string(start_rule) + "' to start from");
    g_.root = root->second;
    mark_nullable();
    check_left_recursion();
    return std::move(g_);
  }

 private:
  [[noreturn]] void fail(size_t offset, const std::string& what) const {
    throw GrammarError("grammar: " + source_position(source_, offset) + ": " + what);
  }

  uint32_t new_rule(std::string name) {
    if (g_.rules.size() >= kMaxGrammarRules) {
      throw GrammarError("grammar: more than " + std::to_string(kMaxGrammarRules) +
                         " rules after expanding repetitions");
    }
    g_.rules.push_back({std::move(name), {}, false});
    return static_cast<uint32_t>(g_.rules.size() - 1);
  }
  uint32_t anonymous_rule(uint32_t owner) {
    return new_rule(g_.rules[owner].name + "-" + std::to_string(++anonymous_));
  }

  void add_alternative(uint32_t rule, const Sequence& seq) {
    if (g_.elements.size() + seq.size() + 1 > kMaxGrammarElements) {
      throw GrammarError("grammar: more than " + std::to_string(kMaxGrammarElements) +
                         " elements after expanding repetitions");
    }
    g_.rules[rule].alternatives.push_back(static_cast<uint32_t>(g_.elements.size()));
    g_.elements.insert(g_.elements.end(), seq.begin(), seq.end());
    g_.elements.push_back({Kind::End, 0});
  }

  void define(uint32_t rule, const GbnfNode& choice) {
    for (const GbnfNode& alt : choice.items) {
      Sequence seq;
      lower(alt, rule, seq);
      add_alternative(rule, seq);
    }
  }

  GrammarElement bytes(const ByteSet& set) {
    auto [it, added] = set_index_.emplace(set, static_cast<uint32_t>(g_.byte_sets.size()));
    if (added) g_.byte_sets.push_back(set);
    return {Kind::Bytes, it->second};
  }

  // One element for a class: a byte set when every code point is one byte, else a rule whose
  // alternatives are the UTF-8 patterns (shared by every use of the same class).
  GrammarElement char_class(const std::vector<CodeRange>& ranges, uint32_t owner) {
    if (ranges.back().hi <= 0x7F) {
      ByteSet set;
      for (const CodeRange& r : ranges) set.add_range(static_cast<uint8_t>(r.lo), static_cast<uint8_t>(r.hi));
      return bytes(set);
    }
    if (auto it = class_rules_.find(ranges); it != class_rules_.end()) return {Kind::Rule, it->second};
    const uint32_t rule = anonymous_rule(owner);
    ByteSet single;
    std::vector<Sequence> multi;
    for (const Utf8Sequence& s : utf8_sequences(ranges)) {
      if (s.size() == 1) {
        single.add_range(s[0].lo, s[0].hi);
        continue;
      }
      Sequence seq;
      for (const ByteRange& br : s) {
        ByteSet set;
        set.add_range(br.lo, br.hi);
        seq.push_back(bytes(set));
      }
      multi.push_back(std::move(seq));
    }
    if (!single.empty()) add_alternative(rule, {bytes(single)});
    for (const Sequence& seq : multi) add_alternative(rule, seq);
    class_rules_.emplace(ranges, rule);
    return {Kind::Rule, rule};
  }

  void lower(const GbnfNode& node, uint32_t owner, Sequence& seq) {
    switch (node.kind) {
      case GbnfNode::Kind::Sequence:
        for (const GbnfNode& item : node.items) lower(item, owner, seq);
        return;
      case GbnfNode::Kind::Choice:
        if (node.items.size() == 1) return lower(node.items.front(), owner, seq);
        {
          const uint32_t rule = anonymous_rule(owner);
          define(rule, node);
          seq.push_back({Kind::Rule, rule});
        }
        return;
      case GbnfNode::Kind::Literal:
        for (char c : node.text) {
          ByteSet set;
          set.add(static_cast<uint8_t>(c));
          seq.push_back(bytes(set));
        }
        return;
      case GbnfNode::Kind::Class:
        seq.push_back(char_class(node.ranges, owner));
        return;
      case GbnfNode::Kind::Ref: {
        auto it = named_.find(node.text);
        if (it == named_.end()) fail(node.offset, "rule '" + node.text + "' is not defined");
        seq.push_back({Kind::Rule, it->second});
        return;
      }
      case GbnfNode::Kind::Repeat:
        return repeat(node, owner, seq);
    }
  }

  void repeat(const GbnfNode& node, uint32_t owner, Sequence& seq) {
    Sequence body;
    lower(node.items.front(), owner, body);
    if (body.empty()) return;  // repeating the empty string
    GrammarElement unit = body.front();
    if (body.size() > 1) {
      const uint32_t rule = anonymous_rule(owner);
      add_alternative(rule, body);
      unit = {Kind::Rule, rule};
    }
    for (uint32_t k = 0; k < node.min; ++k) {
      if (g_.elements.size() + seq.size() >= kMaxGrammarElements) {
        throw GrammarError("grammar: more than " + std::to_string(kMaxGrammarElements) +
                           " elements after expanding repetitions");
      }
      seq.push_back(unit);
    }
    if (node.max == kUnbounded) {
      const uint32_t star = anonymous_rule(owner);  // star ::= unit star | ""
      add_alternative(star, {unit, {Kind::Rule, star}});
      add_alternative(star, {});
      seq.push_back({Kind::Rule, star});
    } else if (node.max > node.min) {
      uint32_t optional = anonymous_rule(owner);  // o1 ::= unit | ""
      add_alternative(optional, {unit});
      add_alternative(optional, {});
      for (uint32_t k = node.min + 1; k < node.max; ++k) {
        const uint32_t outer = anonymous_rule(owner);  // o(k+1) ::= unit o(k) | ""
        add_alternative(outer, {unit, {Kind::Rule, optional}});
        add_alternative(outer, {});
        optional = outer;
      }
      seq.push_back({Kind::Rule, optional});
    }
  }

  void mark_nullable() {
    for (bool changed = true; changed;) {
      changed = false;
      for (GrammarRule& r : g_.rules) {
        if (r.nullable) continue;
        for (uint32_t pos : r.alternatives) {
          if (nullable_from(pos)) {
            r.nullable = changed = true;
            break;
          }
        }
      }
    }
  }
  bool nullable_from(uint32_t pos) const {
    for (;; ++pos) {
      const GrammarElement& e = g_.elements[pos];
      if (e.kind == Kind::End) return true;
      if (e.kind == Kind::Bytes || !g_.rules[e.value].nullable) return false;
    }
  }

  // Rules reachable from `rule` without consuming a byte.
  std::vector<uint32_t> left_edges(uint32_t rule) const {
    std::vector<uint32_t> out;
    for (uint32_t pos : g_.rules[rule].alternatives) {
      for (;; ++pos) {
        const GrammarElement& e = g_.elements[pos];
        if (e.kind != Kind::Rule) break;
        out.push_back(e.value);
        if (!g_.rules[e.value].nullable) break;
      }
    }
    return out;
  }

  // Depth-first search over left edges; a back edge is a loop that consumes nothing.
  void check_left_recursion() const {
    enum : uint8_t { kNew, kOnPath, kDone };
    std::vector<uint8_t> state(g_.rules.size(), kNew);
    std::vector<std::vector<uint32_t>> edges(g_.rules.size());
    for (uint32_t r = 0; r < g_.rules.size(); ++r) edges[r] = left_edges(r);
    for (uint32_t start = 0; start < g_.rules.size(); ++start) {
      if (state[start] != kNew) continue;
      std::vector<std::pair<uint32_t, size_t>> path{{start, 0}};
      state[start] = kOnPath;
      while (!path.empty()) {
        auto& [rule, next] = path.back();
        if (next == edges[rule].size()) {
          state[rule] = kDone;
          path.pop_back();
          continue;
        }
        const uint32_t to = edges[rule][next++];
        if (state[to] == kOnPath) report_loop(path, to);
        if (state[to] == kNew) {
          state[to] = kOnPath;
          path.push_back({to, 0});
        }
      }
    }
  }

  [[noreturn]] void report_loop(const std::vector<std::pair<uint32_t, size_t>>& path, uint32_t to) const {
    std::string cycle;
    bool on = false;
    for (const auto& [rule, next] : path) {
      on = on || rule == to;
      if (on) cycle += g_.rules[rule].name + " -> ";
    }
    cycle += g_.rules[to].name;
    throw GrammarError("grammar: rule '" + g_.rules[to].name +
                       "' can reach itself without consuming input (left recursion, or a repetition of something "
                       "that can be empty): " +
                       cycle);
  }

  std::string_view source_;
  Grammar g_;
  std::map<std::string, uint32_t> named_;
  std::map<ByteSet, uint32_t> set_index_;
  std::map<std::vector<CodeRange>, uint32_t> class_rules_;
  uint32_t anonymous_ = 0;
};

}  // namespace

Grammar build_grammar(const std::vector<GbnfRule>& rules, std::string_view source, std::string_view start_rule) {
  return Builder(source).build(rules, start_rule);
}

}  // namespace peregrine
