// Compares peregrine's Hugging Face tokenizer.json loader and chat templates with the expected
// outputs expected.mjs wrote from the reference implementations. Usage:
//   hf_oracle_check CASES.json...
// Prints every mismatch and a closing "N passed, M failed" line; exits 1 on any failure.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "format/hf_checkpoint.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

// Ordered: tool definitions and call arguments reach the template in the order the case wrote them.
using json = nlohmann::ordered_json;
using namespace peregrine;

struct Tally {
  int passed = 0, failed = 0;
  void check(bool ok, const std::string& what) {
    if (ok) {
      ++passed;
    } else {
      ++failed;
      std::cout << "MISMATCH " << what << "\n";
    }
  }
};

std::string ids_text(const std::vector<TokenId>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

void check_error_case(const json& c, Tally& t) {
  const std::string dir = c["dir"], want = c["expect_error"];
  try {
    Tokenizer::from_metadata(read_hf_tokenizer_only(dir), dir);
    t.check(false, c["name"].get<std::string>() + ": loaded, expected the error '" + want + "'");
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    const bool ok = msg.find(want) != std::string::npos && msg.find("tokenizer.json") != std::string::npos &&
                    msg.find('\n') == std::string::npos;
    t.check(ok, c["name"].get<std::string>() + ": error '" + msg + "', expected one line naming tokenizer.json with '" +
                    want + "'");
  }
}

void check_chat(const json& c, const Metadata& meta, Tally& t) {
  const auto source = meta.get_string_opt("tokenizer.chat_template");
  if (c["chat"].empty()) return;
  if (!source) {
    t.check(false, c["name"].get<std::string>() + ": no tokenizer.chat_template in the loaded metadata");
    return;
  }
  const ChatTemplate tpl = ChatTemplate::parse(*source);
  int n = 0;
  for (const json& chat : c["chat"]) {
    std::vector<ChatMessage> messages;
    for (const json& m : chat["messages"]) {
      ChatMessage message(m["role"], m["content"]);
      message.tool_call_id = m.value("tool_call_id", "");
      for (const json& c : m.value("tool_calls", json::array())) {
        message.tool_calls.push_back({c["id"], c["function"]["name"], c["function"]["arguments"].dump()});
      }
      messages.push_back(std::move(message));
    }
    const std::string what = c["name"].get<std::string>() + " chat " + std::to_string(n++);
    std::string got, error;
    try {
      got = tpl.render(messages, chat["add_generation_prompt"], chat["bos_token"].get<std::string>(),
                       chat["eos_token"].get<std::string>(), chat.value("tools", json()));
    } catch (const ChatTemplateError& e) {
      error = e.what();
    }
    if (chat.contains("error")) {
      t.check(!error.empty(), what + ": rendered, the reference raised '" + chat["error"].get<std::string>() + "'");
    } else {
      const std::string want = chat["expected"];
      t.check(error.empty() && got == want,
              what + ": got " + json(error.empty() ? got : "error: " + error).dump() + "\n  expected " + json(want).dump());
    }
  }
}

void check_case_file(const std::string& path, Tally& t) {
  std::ifstream in(path);
  const json c = json::parse(in);
  if (c.contains("expect_error")) return check_error_case(c, t);
  const std::string dir = c["dir"];
  const Metadata meta = read_hf_tokenizer_only(dir);
  const Tokenizer tok = Tokenizer::from_metadata(meta, dir);
  for (const json& e : c["encode"]) {
    const std::vector<TokenId> want = e["ids"].get<std::vector<TokenId>>();
    const std::vector<TokenId> got = tok.encode(e["text"].get<std::string>(), e["add_special"], true);
    t.check(got == want, c["name"].get<std::string>() + " " + e["text"].dump() + (e["add_special"] ? " +special" : "") +
                             ":\n  got      " + ids_text(got) + "\n  expected " + ids_text(want));
  }
  check_chat(c, meta, t);
}

}  // namespace

int main(int argc, char** argv) {
  Tally t;
  for (int i = 1; i < argc; ++i) {
    try {
      check_case_file(argv[i], t);
    } catch (const std::exception& e) {
      t.check(false, std::string(argv[i]) + ": " + e.what());
    }
  }
  std::cout << "hf oracle: " << t.passed << " passed, " << t.failed << " failed\n";
  return t.failed == 0 && t.passed > 0 ? 0 : 1;
}
