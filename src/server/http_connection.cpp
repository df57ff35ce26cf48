#include "server/http_connection.h"

#include <sys/ioctl.h>

#include <algorithm>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>
#include <utility>

namespace peregrine::server {
namespace net = boost::asio;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

void WakeHub::post(const net::any_io_executor& executor, std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (open_) net::post(executor, std::move(fn));
}

void WakeHub::close() {
  std::lock_guard<std::mutex> lock(mu_);
  open_ = false;
}

size_t ConnectionRegistry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.size();
}

void ConnectionRegistry::close_all() {
  std::vector<std::shared_ptr<Connection>> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [c, weak] : live_) {
      if (auto shared = weak.lock()) live.push_back(std::move(shared));
    }
  }
  for (auto& c : live) c->close_from_outside();
}

void ConnectionRegistry::add(Connection* c, std::weak_ptr<Connection> weak) {
  std::lock_guard<std::mutex> lock(mu_);
  live_.emplace(c, std::move(weak));
}

void ConnectionRegistry::remove(Connection* c) {
  std::lock_guard<std::mutex> lock(mu_);
  live_.erase(c);
}

Connection::Connection(Socket socket, const ConnectionSettings& settings, RequestHandler& handler,
                       std::shared_ptr<WakeHub> hub, ConnectionRegistry& registry)
    : socket_(std::move(socket)),
      settings_(settings),
      handler_(handler),
      hub_(std::move(hub)),
      registry_(registry),
      timer_(socket_.get_executor()),
      write_timer_(socket_.get_executor()) {
  error_code ec;
  const tcp::endpoint peer = socket_.remote_endpoint(ec);
  remote_ = ec ? std::string("-") : peer.address().to_string();
  socket_.set_option(tcp::no_delay(true), ec);
}

Connection::~Connection() { registry_.remove(this); }

void Connection::start() {
  registry_.add(this, weak_from_this());
  net::dispatch(socket_.get_executor(), [self = shared_from_this()] {
    self->begin_idle();
    self->read();
  });
}

void Connection::refuse_at_once(HttpResponse response) {
  registry_.add(this, weak_from_this());
  net::dispatch(socket_.get_executor(), [self = shared_from_this(), response = std::move(response)] {
    self->log_.remote = self->remote_;
    self->refuse(response);
  });
}

void Connection::close_from_outside() {
  net::post(socket_.get_executor(), [self = shared_from_this()] { self->close(); });
}

void Connection::begin_idle() {
  phase_ = Phase::Idle;
  arm(Clock::now() + settings_.idle_timeout);
}

// ---- reading ----

void Connection::read() {
  if (reading_ || input_closed_ || phase_ == Phase::Closed) return;
  // Back-pressure: a head never needs more than the header limit; pipelined requests wait.
  if (phase_ != Phase::Closing && input_.size() >= settings_.limits.header_bytes + read_buffer_.size()) return;
  reading_ = true;
  socket_.async_read_some(net::buffer(read_buffer_),
                          [self = shared_from_this()](const error_code& ec, size_t n) { self->on_read(ec, n); });
}

void Connection::on_read(const error_code& ec, size_t n) {
  reading_ = false;
  if (phase_ == Phase::Closed) return;
  if (ec) {
    input_closed_ = true;
    on_input_closed();
    return;
  }
  if (phase_ == Phase::Closing) {  // dropping what still arrives before the close
    read();
    return;
  }
  input_.append(read_buffer_.data(), n);
  if (phase_ == Phase::Respond) {  // a pipelined request: it waits; keep watching the socket
    read();
    return;
  }
  parse();
}

// EOF or a reset: the client is gone (a half-closed client is treated the same, as Go and
// nginx do, since a close looks the same from here).
void Connection::on_input_closed() {
  if (phase_ == Phase::Respond) {
    // Every byte of the response is queued: the request is finished whatever the client does
    // now (it may have read the whole answer and closed before our write's completion ran). The
    // write decides: done, the connection closes (on_written); failed, the client is gone.
    if (response_queued_) {
      keep_alive_ = false;
      return;
    }
    client_gone();
    return;
  }
  close();
}

void Connection::parse() {
  while (phase_ == Phase::Idle || phase_ == Phase::Head || phase_ == Phase::Body) {
    if (!parser_) parser_.emplace(settings_.limits);
    if (phase_ == Phase::Body && !hold_body()) return;
    input_.erase(0, parser_->feed(input_));
    if (phase_ == Phase::Idle && parser_->got_some()) {
      phase_ = Phase::Head;
      log_ = RequestLog{};
      log_.remote = remote_;
      extra_headers_.clear();
      arm(Clock::now() + settings_.request_timeout);  // the whole request, head and body
    }
    switch (parser_->state()) {
      case RequestParser::State::NeedMore:
        read();
        return;
      case RequestParser::State::HeaderDone:
        if (!on_head()) return;
        parser_->read_body();
        phase_ = Phase::Body;
        body_hold_ = BodyHold(settings_.body_budget);
        if (!hold_body()) return;  // before any of the body is read
        if (parser_->state() == RequestParser::State::NeedMore && parser_->request().expect_continue) {
          queue(kContinue);  // the client waits for this before it sends the body
          write();
        }
        break;
      case RequestParser::State::Complete:
        on_request();
        return;
      case RequestParser::State::Failed:
        refuse(error_response(parser_->error()));
        return;
    }
  }
}

// Takes from the body budget what the body may buffer next (past its first kUncountedBodyBytes):
// a declared length whole, before any of it is read; a chunked body, the input about to be fed
// (at most the body limit). Refuses 503 (and closes, the body unread) when the budget cannot
// cover it.
bool Connection::hold_body() {
  if (parser_->state() != RequestParser::State::NeedMore) return true;  // refused already, or no body
  const std::optional<uint64_t> declared = parser_->content_length();
  const size_t wanted = declared ? static_cast<size_t>(*declared)
                                 : std::min(parser_->body_bytes() + input_.size(), settings_.limits.body_bytes);
  if (body_hold_.grow_to(wanted > kUncountedBodyBytes ? wanted - kUncountedBodyBytes : 0)) return true;
  const size_t capacity = settings_.body_budget->capacity();
  refuse(error_response(ApiError(503,
                                 "The server is holding request bodies of " + std::to_string(capacity >> 20) +
                                     " MiB, its limit (--max-inflight-body-bytes); retry later",
                                 "server_error", std::nullopt, "body_budget_exhausted")));
  return false;
}

// The head is in: the handler may refuse before any of the body is read.
bool Connection::on_head() {
  const HttpRequest& head = parser_->request();
  log_.method = head.method;
  log_.target = head.target;
  log_.user_agent = std::string(head.field("User-Agent").value_or(""));
  version_ = head.version;
  keep_alive_ = head.keep_alive;
  head_only_ = head.method == "HEAD";
  extra_headers_ = handler_.response_headers(head);
  if (std::optional<HttpResponse> refusal = handler_.screen(head)) {
    if (head.has_body) {
      refuse(*refusal);  // the body stays unread: answer, then close
    } else {
      phase_ = Phase::Respond;
      timer_.cancel();
      parser_.reset();
      send_whole(*refusal);
    }
    return false;
  }
  return true;
}

void Connection::on_request() {
  phase_ = Phase::Respond;
  timer_.cancel();
  HttpRequest request = parser_->take_request();
  parser_.reset();
  if (body_hold_.bytes() > 0) request.body_hold = std::make_shared<BodyHold>(std::move(body_hold_));
  if (handler_.draining()) keep_alive_ = false;
  const Wakeup wakeup = [weak = weak_from_this(), hub = hub_, executor = socket_.get_executor()] {
    hub->post(executor, [weak] {
      if (auto self = weak.lock()) self->on_wake();
    });
  };
  Reply reply = handler_.handle(std::move(request), log_, wakeup);
  if (auto* whole = std::get_if<HttpResponse>(&reply)) {
    send_whole(*whole);
    return;
  }
  pending_ = std::move(std::get<std::unique_ptr<PendingResponse>>(reply));
  if (std::optional<HttpResponse> head = pending_->stream_head()) begin_stream(std::move(*head));
  read();  // notice a client that goes away while its response is produced
  on_wake();
}

void Connection::begin_stream(HttpResponse head) {
  streaming_ = true;
  log_.status = head.status;
  head.headers.insert(head.headers.end(), extra_headers_.begin(), extra_headers_.end());
  if (version_ == 10) keep_alive_ = false;  // no chunked framing: the close ends the body
  queue(serialize_stream_head(head, version_, keep_alive_));
}

// ---- writing ----

void Connection::on_wake() {
  if (!pending_ || phase_ != Phase::Respond || response_queued_) return;
  if (streaming_ && stream_behind()) return;
  // While a streamed write is out, news waits for it: a slow reader then gets fewer, larger
  // chunks instead of a backlog growing in memory (the live view builds a frame per poll).
  if (streaming_ && write_pending_) {
    wake_deferred_ = true;
    return;
  }
  PendingResponse::Step step = pending_->poll();
  if (step.head && !streaming_) begin_stream(*step.head);
  if (!streaming_) {
    if (step.whole) send_whole(*step.whole);
    return;
  }
  if (!step.data.empty()) queue(version_ == 11 ? chunk(step.data) : step.data);
  if (step.done) {
    if (version_ == 11) queue(kLastChunk);
    response_queued_ = true;
  }
  write();
}

// Bytes written to the socket that the client has not acknowledged yet (Linux: SIOCOUTQ).
size_t Connection::kernel_unsent() {
  int n = 0;
  if (ioctl(socket_.native_handle(), TIOCOUTQ, &n) != 0 || n < 0) return 0;
  return static_cast<size_t>(n);
}

// A lossy stream (the live view) whose client is behind: this wake-up's data is skipped, and a
// client that stays behind past the limit's time is dropped (its slot freed at once, not after
// the kernel buffer, up to megabytes, fills and the write timeout runs out).
bool Connection::stream_behind() {
  const std::optional<PendingResponse::BacklogLimit> limit = pending_->backlog_limit();
  if (!limit) return false;
  const size_t queued = kernel_unsent() + output_.size() + (write_pending_ ? writing_.size() : 0);
  if (queued <= limit->max_bytes) {
    behind_since_.reset();
    return false;
  }
  const Clock::time_point now = Clock::now();
  if (!behind_since_) behind_since_ = now;
  if (now - *behind_since_ > limit->max_stall) client_gone();
  return true;
}

void Connection::send_whole(const HttpResponse& r) {
  log_.status = r.status;
  if (extra_headers_.empty()) {
    queue(serialize_response(r, version_, keep_alive_, head_only_));
  } else {
    HttpResponse with_extra = r;
    with_extra.headers.insert(with_extra.headers.end(), extra_headers_.begin(), extra_headers_.end());
    queue(serialize_response(with_extra, version_, keep_alive_, head_only_));
  }
  response_queued_ = true;
  write();
}

void Connection::queue(std::string_view bytes) { output_.append(bytes); }

void Connection::write() {
  if (write_pending_ || phase_ == Phase::Closed) return;
  if (output_.empty()) {
    if (response_queued_ && phase_ == Phase::Respond) on_written();
    return;
  }
  writing_.swap(output_);
  output_.clear();
  write_pending_ = true;
  write_timer_.expires_after(settings_.write_timeout);
  write_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
    // A client that stops reading does not hold the connection (or its work) forever.
    if (!ec && self->write_pending_ && self->write_timer_.expiry() <= Clock::now()) self->client_gone();
  });
  net::async_write(socket_, net::buffer(writing_), [self = shared_from_this()](const error_code& ec, size_t) {
    self->write_pending_ = false;
    self->write_timer_.cancel();
    if (ec) {
      self->client_gone();
      return;
    }
    self->writing_.clear();
    if (std::exchange(self->wake_deferred_, false)) {
      self->on_wake();  // polls, then writes
    } else {
      self->write();
    }
  });
}

// Every byte of the response went out.
void Connection::on_written() {
  finish_log();
  pending_.reset();
  streaming_ = false;
  behind_since_.reset();
  response_queued_ = false;
  head_only_ = false;
  if (!keep_alive_) {
    linger_close();
    return;
  }
  begin_idle();
  parse();  // a pipelined request may be waiting already
}

void Connection::finish_log() {
  if (pending_) pending_->note(log_);
  handler_.completed(log_);
}

// ---- ending ----

// Answers and closes: the request's framing is broken, or its body is not going to be read.
void Connection::refuse(const HttpResponse& r) {
  phase_ = Phase::Respond;
  timer_.cancel();
  parser_.reset();
  body_hold_.release();
  keep_alive_ = false;
  send_whole(r);
}

void Connection::client_gone() {
  if (phase_ == Phase::Closed) return;
  if (phase_ == Phase::Respond) {
    if (pending_) pending_->abandon();  // cancels the generation: its KV blocks are freed now
    // 499 (nginx's "client closed request") unless the response had started.
    if (!streaming_) log_.status = 499;
    finish_log();
  }
  close();
}

// Half-close, then read and drop until the client closes or the linger time is up: closing with
// unread input would reset the connection, and the client could lose the response.
void Connection::linger_close() {
  if (input_closed_) {  // nothing more can arrive
    close();
    return;
  }
  phase_ = Phase::Closing;
  error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  input_.clear();
  arm(Clock::now() + settings_.linger);
  read();
}

void Connection::close() {
  if (phase_ == Phase::Closed) return;
  phase_ = Phase::Closed;
  parser_.reset();
  body_hold_.release();
  if (pending_) {
    pending_->abandon();
    pending_.reset();
  }
  timer_.cancel();
  write_timer_.cancel();
  error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
}

void Connection::arm(Clock::time_point deadline) {
  timer_.expires_at(deadline);
  timer_.async_wait([self = shared_from_this()](const error_code& ec) { self->on_timer(ec); });
}

void Connection::on_timer(const error_code& ec) {
  if (ec == net::error::operation_aborted || phase_ == Phase::Closed) return;
  if (timer_.expiry() > Clock::now()) return;  // re-armed since this wait began
  switch (phase_) {
    case Phase::Head:
    case Phase::Body: {
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g", std::chrono::duration<double>(settings_.request_timeout).count());
      refuse(error_response(ApiError(408, std::string("the request did not arrive in full within ") + limit + " s",
                                     "invalid_request_error", std::nullopt, "request_timeout")));
      return;
    }
    case Phase::Idle:
    case Phase::Closing:
      close();
      return;
    default:
      return;
  }
}

}  // namespace peregrine::server
