#include "router/tenant.h"

#include <openssl/sha.h>

#include <array>
#include <cstdint>

namespace kvc {
namespace {

void append_field(std::string& out, std::string_view field) {
  const uint64_t n = field.size();
  for (int i = 0; i < 8; ++i)
    out += static_cast<char>((n >> (8 * i)) & 0xff);
  out.append(field);
}

}  // namespace

std::optional<TenantIsolation> parse_tenant_isolation(std::string_view name) {
  if (name == "off") return TenantIsolation::kOff;
  if (name == "api-key") return TenantIsolation::kApiKey;
  if (name == "header") return TenantIsolation::kHeader;
  return std::nullopt;
}

const char* tenant_isolation_name(TenantIsolation mode) {
  switch (mode) {
    case TenantIsolation::kOff:
      return "off";
    case TenantIsolation::kApiKey:
      return "api-key";
    case TenantIsolation::kHeader:
      return "header";
  }
  return "?";
}

std::string tenant_cache_salt(TenantIsolation mode, std::string_view identity,
                              std::string_view client_salt) {
  std::string message;
  append_field(message, "kvcascade tenant cache salt v1");
  append_field(message, tenant_isolation_name(mode));
  append_field(message, identity);
  append_field(message, client_salt);
  std::array<unsigned char, SHA256_DIGEST_LENGTH> digest{};
  SHA256(reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest.data());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * digest.size());
  for (unsigned char b : digest) {
    hex += kHex[b >> 4];
    hex += kHex[b & 0xf];
  }
  return hex;
}

}  // namespace kvc
