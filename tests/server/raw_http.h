#pragma once
// Raw HTTP/1.1 over a loopback TCP socket, for tests that must send exactly the bytes they mean
// (malformed framing, pipelining, trickling, resets) and read the server's answers by their own
// framing (Content-Length or chunked), with deadlines, never trusting an HTTP library to be
// lenient or strict on their behalf.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace peregrine::test {

struct RawResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;                                          // de-chunked
  std::string header(const std::string& lower_name) const {
    for (const auto& [n, v] : headers) {
      if (n == lower_name) return v;
    }
    return "";
  }
};

class RawConnection {
 public:
  using Clock = std::chrono::steady_clock;

  explicit RawConnection(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw std::runtime_error("socket() failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      close(fd_);
      throw std::runtime_error("connect() failed");
    }
  }
  ~RawConnection() {
    if (fd_ >= 0) close(fd_);
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  int fd() const { return fd_; }

  // Sends everything; false once the server has closed or reset the connection.
  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Sends what the server will take right now without blocking; returns the bytes sent, or -1
  // once the connection is closed or reset.
  ssize_t send_some(std::string_view bytes) {
    const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    return n;
  }

  // Reads one whole response within `timeout`; nullopt if it does not arrive complete in time.
  std::optional<RawResponse> read_response(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    size_t head_end;
    while ((head_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!fill(deadline)) return std::nullopt;
    }
    RawResponse r;
    const std::string head = buffer_.substr(0, head_end);
    buffer_.erase(0, head_end + 4);
    size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    if (status_line.size() < 12 || status_line.rfind("HTTP/1.", 0) != 0) return std::nullopt;
    r.status = std::stoi(status_line.substr(9, 3));
    while (line_end != std::string::npos) {
      const size_t start = line_end + 2;
      line_end = head.find("\r\n", start);
      const std::string line = head.substr(start, line_end == std::string::npos ? std::string::npos : line_end - start);
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      r.headers.emplace_back(name, line.substr(line.find_first_not_of(' ', colon + 1)));
    }
    if (r.header("transfer-encoding") == "chunked") {
      if (!read_chunked(r.body, deadline)) return std::nullopt;
    } else {
      const std::string length = r.header("content-length");
      const size_t n = length.empty() ? 0 : std::stoul(length);
      while (buffer_.size() < n) {
        if (!fill(deadline)) return std::nullopt;
      }
      r.body = buffer_.substr(0, n);
      buffer_.erase(0, n);
    }
    return r;
  }

  // True if the server closes (EOF or reset) within `timeout`; what it sent is kept.
  bool closed_within(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (fill(deadline)) {
    }
    return eof_;
  }

  // Closes with SO_LINGER 0: the server sees a reset at once.
  void reset() {
    linger l{1, 0};
    setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd_);
    fd_ = -1;
  }

  const std::string& unread() const { return buffer_; }

 private:
  // Reads what arrives before `deadline`; false on timeout, EOF or error.
  bool fill(Clock::time_point deadline) {
    if (eof_) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) return false;
    char buf[65536];
    const ssize_t n = recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    buffer_.append(buf, static_cast<size_t>(n));
    return true;
  }

  bool read_chunked(std::string& body, Clock::time_point deadline) {
    while (true) {
      size_t line_end;
      while ((line_end = buffer_.find("\r\n")) == std::string::npos) {
        if (!fill(deadline)) return false;
      }
      const size_t size = std::stoul(buffer_.substr(0, line_end), nullptr, 16);
      while (buffer_.size() < line_end + 2 + size + 2) {
        if (!fill(deadline)) return false;
      }
      body += buffer_.substr(line_end + 2, size);
      buffer_.erase(0, line_end + 2 + size + 2);
      if (size == 0) return true;
    }
  }

  int fd_ = -1;
  std::string buffer_;
  bool eof_ = false;
};

// "POST path" with a JSON body and exact framing; `extra` header lines end with \r\n.
inline std::string post_request(const std::string& path, const std::string& body, const std::string& extra = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" + extra +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

inline std::string get_request(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n" + extra + "\r\n";
}

}  // namespace peregrine::test
