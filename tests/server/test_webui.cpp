// Units behind the web page: the key cookie, the recent-latency window, the built-in files.
#include <gtest/gtest.h>

#include <random>

#include "server/auth.h"
#include "server/metrics.h"
#include "server/webui_assets.h"

namespace peregrine::server {
namespace {

TEST(WebUi, CookieValueFindsTheNamedCookieOnly) {
  EXPECT_EQ(cookie_value("peregrine_api_key=abc", "peregrine_api_key"), "abc");
  EXPECT_EQ(cookie_value("a=1; peregrine_api_key=x%20y; b=2", "peregrine_api_key"), "x%20y");
  EXPECT_EQ(cookie_value("a=1;peregrine_api_key=z", "peregrine_api_key"), "z");
  EXPECT_EQ(cookie_value("xperegrine_api_key=1; a=2", "peregrine_api_key"), std::nullopt);
  EXPECT_EQ(cookie_value("peregrine_api_key_2=1", "peregrine_api_key"), std::nullopt);
  EXPECT_EQ(cookie_value("peregrine_api_key", "peregrine_api_key"), std::nullopt);
  EXPECT_EQ(cookie_value("", "peregrine_api_key"), std::nullopt);
  EXPECT_EQ(cookie_value(";;; ", "peregrine_api_key"), std::nullopt);
}

TEST(WebUi, RecentWindowQuantilesOverTheLastValues) {
  RecentWindow w;
  EXPECT_EQ(w.quantile(0.5), 0.0);
  for (int i = 1; i <= 5; ++i) w.observe(i);
  EXPECT_EQ(w.size(), 5u);
  EXPECT_EQ(w.quantile(0.5), 3.0);
  EXPECT_EQ(w.quantile(0.0), 1.0);
  EXPECT_EQ(w.quantile(1.0), 5.0);
  // Past capacity only the newest values count: a shuffled 1000..1000+cap-1 after older noise.
  std::mt19937 rng(7);
  for (size_t i = 0; i < 3 * RecentWindow::kCapacity; ++i) w.observe(static_cast<double>(rng() % 10));
  std::vector<double> fresh;
  for (size_t i = 0; i < RecentWindow::kCapacity; ++i) fresh.push_back(1000.0 + static_cast<double>(i));
  std::shuffle(fresh.begin(), fresh.end(), rng);
  for (double v : fresh) w.observe(v);
  EXPECT_EQ(w.size(), RecentWindow::kCapacity);
  EXPECT_EQ(w.quantile(0.0), 1000.0);
  EXPECT_EQ(w.quantile(1.0), 1000.0 + RecentWindow::kCapacity - 1);
  EXPECT_EQ(w.quantile(0.5), 1000.0 + RecentWindow::kCapacity / 2);
}

TEST(WebUi, TheFilesAreBuiltInWithTheirContentTypes) {
  const WebAsset* index = find_web_asset("index.html");
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(index->content_type, "text/html; charset=utf-8");
  EXPECT_TRUE(index->bytes.starts_with("<!doctype html>"));
  EXPECT_NE(index->bytes.find("/webui/live.js"), std::string_view::npos);
  for (const char* name : {"app.js", "chat.js", "live.js"}) {
    const WebAsset* js = find_web_asset(name);
    ASSERT_NE(js, nullptr) << name;
    EXPECT_EQ(js->content_type, "text/javascript; charset=utf-8");
    EXPECT_GT(js->bytes.size(), 500u);
    EXPECT_EQ(js->bytes.find('\0'), std::string_view::npos);  // the file only, not the terminator
  }
  ASSERT_NE(find_web_asset("style.css"), nullptr);
  EXPECT_EQ(find_web_asset("style.css")->content_type, "text/css; charset=utf-8");
  EXPECT_EQ(find_web_asset("../CMakeLists.txt"), nullptr);
  EXPECT_EQ(find_web_asset(""), nullptr);
}

}  // namespace
}  // namespace peregrine::server
