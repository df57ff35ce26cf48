#include "tokenizer/normalize.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include <algorithm>
#include <stdexcept>

#include "tokenizer/utf8.h"

namespace peregrine::tokenizer {
namespace {

const icu::Normalizer2& nfc_instance() {
  static const icu::Normalizer2* instance = [] {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(status);
    if (U_FAILURE(status)) throw std::runtime_error(std::string("ICU NFC normalizer unavailable: ") + u_errorName(status));
    return n;
  }();
  return *instance;
}

void append_nfc(std::string_view run, std::string& out) {
  UErrorCode status = U_ZERO_ERROR;
  icu::StringByteSink<std::string> sink(&out);
  nfc_instance().normalizeUTF8(0, icu::StringPiece(run.data(), static_cast<int32_t>(run.size())), sink, nullptr, status);
  if (U_FAILURE(status)) throw std::runtime_error(std::string("NFC normalization failed: ") + u_errorName(status));
}

}  // namespace

std::string nfc(std::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    return std::string(text);  // ASCII is already NFC
  }
  std::string out;
  out.reserve(text.size());
  size_t run_start = 0, i = 0;
  while (i < text.size()) {
    const utf8::SeqCheck c = utf8::check_sequence(text.substr(i));
    if (c.status == utf8::SeqStatus::Valid) {
      i += c.length;
      continue;
    }
    append_nfc(text.substr(run_start, i - run_start), out);
    out.append(text.substr(i, c.length));  // invalid bytes pass through untouched
    i += c.length;
    run_start = i;
  }
  append_nfc(text.substr(run_start), out);
  return out;
}

}  // namespace peregrine::tokenizer
