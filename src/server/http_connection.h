#pragma once
// One TCP connection of the HTTP server, on Boost.Asio: every handler of a connection runs on
// its own strand, so a connection is single-threaded while the server's few I/O threads serve
// thousands. It reads requests through RequestParser (the head first, then the body only if
// the handler's screen() lets it), answers them in order (pipelined requests wait in the input
// buffer), and enforces the deadlines: the whole request (head and body) must arrive within
// request_timeout (408), an idle keep-alive connection closes after idle_timeout, and a write
// that makes no progress for write_timeout ends the connection. Body bytes come out of a budget
// shared by every connection (503 when it is spent), taken before they are buffered. While a response is being
// produced the connection keeps reading, so a client that goes away (EOF or reset) is noticed
// at once and its work abandoned, streamed or not.
#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/body_budget.h"
#include "server/http_handler.h"
#include "server/http_request_parser.h"

namespace peregrine::server {

struct ConnectionSettings {
  HttpLimits limits;
  std::chrono::milliseconds request_timeout{30000};  // head and body of one request
  std::chrono::milliseconds idle_timeout{5000};      // waiting for the next request
  std::chrono::milliseconds write_timeout{30000};    // one write without completing
  std::chrono::milliseconds linger{2000};            // reading and dropping input before a close
  std::shared_ptr<BodyBudget> body_budget;           // request-body bytes held across connections
};

// Hands wake-ups from other threads (the engine's) to connection strands, until closed: the
// server closes it before its io_context goes away.
class WakeHub {
 public:
  void post(const boost::asio::any_io_executor& executor, std::function<void()> fn);
  void close();

 private:
  std::mutex mu_;
  bool open_ = true;
};

class Connection;

// The live connections, for the connection cap and for closing them all at shutdown.
class ConnectionRegistry {
 public:
  size_t size() const;
  void close_all();

 private:
  friend class Connection;
  void add(Connection* c, std::weak_ptr<Connection> weak);
  void remove(Connection* c);
  mutable std::mutex mu_;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> live_;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using Socket = boost::asio::ip::tcp::socket;
  using Clock = std::chrono::steady_clock;

  // `socket`'s executor must be a strand. `settings`, `handler` and `registry` outlive the
  // connection.
  Connection(Socket socket, const ConnectionSettings& settings, RequestHandler& handler, std::shared_ptr<WakeHub> hub,
             ConnectionRegistry& registry);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Registers the connection and starts reading (on its strand).
  void start();
  // Answers `response` to whatever arrives (the server is over its connection cap) and closes.
  void refuse_at_once(HttpResponse response);
  // From any thread: close now (server shutdown).
  void close_from_outside();

 private:
  enum class Phase { Idle, Head, Body, Respond, Closing, Closed };

  void read();
  void on_read(const boost::system::error_code& ec, size_t n);
  void on_input_closed();
  void parse();
  bool on_head();
  bool hold_body();
  void on_request();
  void on_wake();
  void begin_stream(HttpResponse head);
  bool stream_behind();
  size_t kernel_unsent();
  void send_whole(const HttpResponse& r);
  void queue(std::string_view bytes);
  void write();
  void on_written();
  void refuse(const HttpResponse& r);
  void client_gone();
  void linger_close();
  void close();
  void begin_idle();
  void arm(Clock::time_point deadline);
  void on_timer(const boost::system::error_code& ec);
  void finish_log();

  Socket socket_;
  const ConnectionSettings& settings_;
  RequestHandler& handler_;
  std::shared_ptr<WakeHub> hub_;
  ConnectionRegistry& registry_;
  boost::asio::steady_timer timer_;        // idle, request deadline, linger
  boost::asio::steady_timer write_timer_;  // write progress
  Phase phase_ = Phase::Idle;
  std::string remote_;

  std::array<char, 16384> read_buffer_{};
  std::string input_;  // received and not parsed yet (the rest of a request, or the next ones)
  bool reading_ = false;
  bool input_closed_ = false;
  std::optional<RequestParser> parser_;
  BodyHold body_hold_;  // the body being read: its share of the budget

  std::string output_;   // queued, not yet handed to a write
  std::string writing_;  // the write in progress
  bool write_pending_ = false;
  bool wake_deferred_ = false;  // a wake-up came while a streamed write was out
  std::optional<Clock::time_point> behind_since_;  // a lossy stream's backlog over its limit since

  // The request being answered.
  RequestLog log_;
  std::vector<std::pair<std::string, std::string>> extra_headers_;  // on every answer to it (CORS)
  std::unique_ptr<PendingResponse> pending_;
  bool head_only_ = false;
  bool streaming_ = false;
  int version_ = 11;
  bool keep_alive_ = true;
  bool response_queued_ = false;  // every byte of the response is in output_/writing_
};

}  // namespace peregrine::server
