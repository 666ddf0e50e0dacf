// Tenant isolation for the prefix cache. Without it, a tenant can confirm another's prompt text
// by timing or by `cached_tokens`: a guessed prefix that someone cached comes back cached. In an
// isolation mode the router derives a salt from who is asking and uses it as the request's
// `cache_salt`: the prompt is hashed with it (router index) and it is forwarded to the replica
// (replica prefix cache), so tenants never share KV blocks and never see each other's hits.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kvc {

enum class TenantIsolation {
  kOff,     // every request may share KV with every other (best hit rate)
  kApiKey,  // the tenant is the client's Bearer token
  kHeader,  // the tenant is a header set by a trusted gateway in front of the router
};

// "off", "api-key", "header"; nullopt for anything else.
std::optional<TenantIsolation> parse_tenant_isolation(std::string_view name);
const char* tenant_isolation_name(TenantIsolation mode);

// The cache_salt forwarded for `identity` (its API key or tenant name) in `mode`, folding in the
// client's own cache_salt (so a client can still split its own traffic, but never leave its
// tenant): 64 lower-case hex digits of SHA-256 over a domain tag, the mode and both values, each
// length-prefixed. A one-way function: replicas, which see the salt, never see an API key; and a
// fixed length, however long the tenant name or client salt.
std::string tenant_cache_salt(TenantIsolation mode, std::string_view identity,
                              std::string_view client_salt);

}  // namespace kvc
