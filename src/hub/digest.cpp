#include "hub/digest.h"

#include <openssl/evp.h>

#include <fstream>
#include <stdexcept>
#include <vector>

namespace peregrine::hub {

struct Digest::Ctx {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  ~Ctx() { EVP_MD_CTX_free(md); }
};

Digest::Digest(Kind kind) : kind_(kind), ctx_(std::make_unique<Ctx>()) {
  if (ctx_->md == nullptr) throw std::bad_alloc();
  reset();
}
Digest::~Digest() = default;
Digest::Digest(Digest&&) noexcept = default;
Digest& Digest::operator=(Digest&&) noexcept = default;

void Digest::reset() {
  const EVP_MD* md = kind_ == Kind::Sha256 ? EVP_sha256() : EVP_sha1();
  if (EVP_DigestInit_ex(ctx_->md, md, nullptr) != 1) throw std::runtime_error("OpenSSL: digest init failed");
}

void Digest::update(std::span<const char> bytes) {
  if (EVP_DigestUpdate(ctx_->md, bytes.data(), bytes.size()) != 1)
    throw std::runtime_error("OpenSSL: digest update failed");
}

std::string Digest::hex() {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx_->md, out, &n) != 1) throw std::runtime_error("OpenSSL: digest final failed");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (unsigned int i = 0; i < n; ++i) {
    s += kHex[out[i] >> 4];
    s += kHex[out[i] & 15];
  }
  return s;
}

Digest hub_file_digest(bool lfs, uint64_t size) {
  if (lfs) return Digest(Digest::Kind::Sha256);
  Digest d(Digest::Kind::Sha1);
  const std::string header = "blob " + std::to_string(size);
  d.update(std::span<const char>(header.data(), header.size() + 1));  // with its terminating NUL
  return d;
}

std::string hex_digest_of_file(const std::string& path, bool lfs) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error(path + ": cannot read");
  const auto size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  Digest d = hub_file_digest(lfs, size);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    d.update(std::span<const char>(buf.data(), static_cast<size_t>(in.gcount())));
  }
  return d.hex();
}

}  // namespace peregrine::hub
