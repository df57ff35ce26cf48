#include "tokenizer/utf8.h"


namespace peregrine::utf8 {

size_t lead_length(unsigned char c) {
  // High nibble -> length, exactly llama.cpp's table: continuation bytes count as 1.
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[c >> 4];
}

SeqCheck check_sequence(std::string_view s) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  if (b0 < 0x80) return {SeqStatus::Valid, 1};
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return {SeqStatus::Invalid, 1};
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= s.size()) return {SeqStatus::Incomplete, s.size()};
    const auto b = static_cast<unsigned char>(s[i]);
    const unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) return {SeqStatus::Invalid, i};
  }
  return {SeqStatus::Valid, need};
}


std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const SeqCheck c = check_sequence(s.substr(i));
    if (c.status == SeqStatus::Valid) {
      out.append(s.substr(i, c.length));
    } else {
      out.append(kReplacement);
    }
    i += c.length;
  }
  return out;
}

bool is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const SeqCheck c = check_sequence(s.substr(i));
    if (c.status != SeqStatus::Valid) return false;
    i += c.length;
  }
  return true;
}

}  // namespace peregrine::utf8
