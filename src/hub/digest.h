#pragma once
// SHA-256 and SHA-1 over bytes fed in pieces (OpenSSL's EVP), for checking downloads: the hub
// names an LFS file by its SHA-256 and any other file by its git blob id,
// sha1("blob " + decimal size + "\0" + bytes).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace peregrine::hub {

class Digest {
 public:
  enum class Kind { Sha256, Sha1 };
  explicit Digest(Kind kind);
  ~Digest();
  Digest(Digest&&) noexcept;
  Digest& operator=(Digest&&) noexcept;

  // Starts again, as if newly made.
  void reset();
  void update(std::span<const char> bytes);
  void update(std::string_view bytes) { update(std::span<const char>(bytes.data(), bytes.size())); }
  // Lowercase hex of the digest; the object must be reset before further use.
  std::string hex();

 private:
  struct Ctx;
  Kind kind_;
  std::unique_ptr<Ctx> ctx_;
};

// A digest that checks a file the hub lists: SHA-256 of the bytes for an LFS file, else the git blob
// id, whose header needs the file's size first.
Digest hub_file_digest(bool lfs, uint64_t size);

// The digest of a whole file on disk, as hub_file_digest computes it (for tests and checks).
std::string hex_digest_of_file(const std::string& path, bool lfs);

}  // namespace peregrine::hub
