// Speculative decoding through the real `peregrine serve` (embedded demo model, its distilled draft
// and its n-gram lookup): many requests at once, so proposals, verifications and plain decoding
// share steps, must give what a server without speculation gives.
// - greedy requests: the same text for every proposer (the exact rule keeps the argmax);
// - seeded sampling: every proposer proposes one-hot tokens (the draft model its argmax), which
//   the coupled rule accepts (verifier.h), so the text equals plain sampling's seed for seed,
//   alone or batched, however many drafts the engine chose per step; "speculative": false too;
// - stop strings and max_tokens cut where they cut without speculation (finish_reason too);
// - a streamed request's deltas add up to the non-streamed text; /metrics counts the proposals.
#include <gtest/gtest.h>

#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server_process.h"
#include "server_test_util.h"

namespace peregrine::server {
namespace {

using nlohmann::json;
using test::metric;
using test::ServerProcess;
using test::sse_payloads;

// One request's choices: text and finish reason of each, in index order.
struct Outcome {
  std::vector<std::string> texts, finish;
  bool operator==(const Outcome&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Outcome& o) {
  for (size_t i = 0; i < o.texts.size(); ++i) os << "[" << o.finish[i] << "] " << json(o.texts[i]).dump() << " ";
  return os;
}

Outcome complete(const ServerProcess& server, const json& body) {
  auto c = server.client();
  c->set_read_timeout(120);
  auto r = c->Post("/v1/completions", body.dump(), "application/json");
  Outcome o;
  if (!r || r->status != 200) {
    ADD_FAILURE() << "request failed: " << (r ? r->body : httplib::to_string(r.error())) << " for " << body.dump();
    return o;
  }
  const json j = json::parse(r->body);
  for (const auto& ch : j["choices"]) {
    o.texts.push_back(ch["text"]);
    o.finish.push_back(ch["finish_reason"]);
  }
  return o;
}

// All requests sent at once (one thread each), so the engine batches them together.
std::vector<Outcome> complete_all(const ServerProcess& server, const std::vector<json>& bodies) {
  std::vector<std::future<Outcome>> pending;
  for (const auto& b : bodies) pending.push_back(std::async(std::launch::async, [&] { return complete(server, b); }));
  std::vector<Outcome> out;
  for (auto& p : pending) out.push_back(p.get());
  return out;
}

json request(const std::string& prompt, int max_tokens, json extra = json::object()) {
  json b = {{"model", "demo-target"}, {"prompt", prompt}, {"max_tokens", max_tokens}};
  b.update(extra);
  return b;
}

const std::vector<std::string> kPrompts = {
    "Once upon a time", "It is a truth universally acknowledged", "Mr. Darcy said", "", "The carriage",
    "She was very happy because"};

// Greedy requests of several lengths, stop strings and n = 2.
std::vector<json> greedy_requests() {
  std::vector<json> out;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    out.push_back(request(kPrompts[i], 24 + 13 * static_cast<int>(i), {{"temperature", 0}}));
  }
  out.push_back(request("Once upon a time", 80, {{"temperature", 0}, {"stop", json::array({"carriage", "xyz"})}}));
  out.push_back(request("The little dog", 40, {{"temperature", 0}, {"n", 2}}));
  return out;
}

// Seeded sampling with filters; choice i of n uses seed + i.
std::vector<json> sampled_requests() {
  std::vector<json> out;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    out.push_back(request(kPrompts[i], 48,
                          {{"temperature", 0.8}, {"top_p", 0.95}, {"seed", 100 + static_cast<int>(i)}, {"n", i % 2 + 1}}));
  }
  out.push_back(request("Lily and Tom", 60, {{"temperature", 1.0}, {"top_k", 40}, {"seed", 9}, {"stop", "\n"}}));
  return out;
}

class SpeculativeServing : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    plain_ = std::make_unique<ServerProcess>(test::serve_flags());
    draft_ = std::make_unique<ServerProcess>(test::serve_flags({"--spec", "draft", "--spec-tokens", "4"}));
    ngram_ = std::make_unique<ServerProcess>(test::serve_flags({"--spec", "ngram", "--spec-tokens", "3"}));
  }
  static void TearDownTestSuite() {
    plain_.reset();
    draft_.reset();
    ngram_.reset();
  }
  static std::unique_ptr<ServerProcess> plain_, draft_, ngram_;
};
std::unique_ptr<ServerProcess> SpeculativeServing::plain_;
std::unique_ptr<ServerProcess> SpeculativeServing::draft_;
std::unique_ptr<ServerProcess> SpeculativeServing::ngram_;

TEST_F(SpeculativeServing, GreedyTextIsThePlainServersForEveryProposer) {
  const auto bodies = greedy_requests();
  const auto plain = complete_all(*plain_, bodies);
  const auto draft = complete_all(*draft_, bodies);
  const auto ngram = complete_all(*ngram_, bodies);
  for (size_t i = 0; i < bodies.size(); ++i) {
    ASSERT_FALSE(plain[i].texts.empty()) << bodies[i].dump();
    EXPECT_EQ(draft[i], plain[i]) << "draft proposer, request " << bodies[i].dump();
    EXPECT_EQ(ngram[i], plain[i]) << "n-gram proposer, request " << bodies[i].dump();
  }
  // The stop-string request stopped (its text does not contain the stop strings).
  const Outcome& stopped = plain[kPrompts.size()];
  EXPECT_EQ(stopped.finish[0], "stop") << stopped;
  EXPECT_EQ(stopped.texts[0].find("carriage"), std::string::npos) << stopped;
}

TEST_F(SpeculativeServing, SeededSamplingIsExactAndRepeatable) {
  const auto bodies = sampled_requests();
  const auto plain = complete_all(*plain_, bodies);
  const auto ngram = complete_all(*ngram_, bodies);
  const auto draft_a = complete_all(*draft_, bodies);
  // The draft's runs again, each request alone this time: batch company must not matter.
  std::vector<Outcome> draft_b;
  for (const auto& b : bodies) draft_b.push_back(complete(*draft_, b));
  for (size_t i = 0; i < bodies.size(); ++i) {
    EXPECT_EQ(ngram[i], plain[i]) << "n-gram proposals are one-hot: same text per seed, " << bodies[i].dump();
    EXPECT_EQ(draft_a[i], plain[i]) << "the draft proposes its argmax (one-hot): same text per seed, " << bodies[i].dump();
    EXPECT_EQ(draft_b[i], plain[i]) << "alone or batched, " << bodies[i].dump();
  }
  // Turned off per request, the draft server samples exactly as the plain one.
  std::vector<json> off = bodies;
  for (auto& b : off) b["speculative"] = false;
  const auto draft_off = complete_all(*draft_, off);
  for (size_t i = 0; i < bodies.size(); ++i) EXPECT_EQ(draft_off[i], plain[i]) << off[i].dump();
}

TEST_F(SpeculativeServing, StreamedDeltasAddUpAndMetricsCountProposals) {
  const json body = request("Once upon a time", 64, {{"temperature", 0}});
  const Outcome whole = complete(*plain_, body);
  json streamed = body;
  streamed["stream"] = true;
  auto c = draft_->client();
  c->set_read_timeout(120);
  auto r = c->Post("/v1/completions", streamed.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::string text, finish;
  for (const auto& p : sse_payloads(r->body)) {
    text += p["choices"][0]["text"].get<std::string>();
    if (!p["choices"][0]["finish_reason"].is_null()) finish = p["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, whole.texts.at(0));
  EXPECT_EQ(finish, whole.finish.at(0));

  auto m = c->Get("/metrics");
  ASSERT_TRUE(m);
  const double proposed = metric(m->body, "peregrine_spec_draft_tokens_total");
  const double accepted = metric(m->body, "peregrine_spec_accepted_tokens_total");
  EXPECT_GT(proposed, 0) << m->body;
  EXPECT_GT(accepted, 0) << "the distilled draft agrees with the target often";
  EXPECT_LE(accepted, proposed);
  EXPECT_GT(metric(m->body, "peregrine_spec_draft_passes_total"), 0);
  // The plain server proposed nothing.
  auto pm = plain_->client()->Get("/metrics");
  ASSERT_TRUE(pm);
  EXPECT_EQ(metric(pm->body, "peregrine_spec_draft_tokens_total"), 0) << pm->body;
}

}  // namespace
}  // namespace peregrine::server
