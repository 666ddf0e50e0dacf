#include "router/tenant.h"

#include <set>
#include <string>

#include <gtest/gtest.h>

namespace kvc {
namespace {

// The salt is part of every block hash: changing its derivation would make every tenant's cache
// cold after an upgrade, and routers of two versions would disagree. Pinned to known answers
// (SHA-256 over length-prefixed fields, computed independently with Python's hashlib).
TEST(TenantSalt, KnownAnswers) {
  EXPECT_EQ(tenant_cache_salt(TenantIsolation::kApiKey, "key-of-a", ""),
            "58ce818d558be4419cfd806da3ac13207856ce6241e0b9d4c399c9cc01402b0f");
  EXPECT_EQ(tenant_cache_salt(TenantIsolation::kHeader, "acme", "experiment-1"),
            "36c10d92cd781f0a8d46167f1d929a3f2ea7435fb182db92223f0211a98637be");
}

TEST(TenantSalt, DistinctInputsGiveDistinctSalts) {
  std::set<std::string> salts;
  for (TenantIsolation mode : {TenantIsolation::kApiKey, TenantIsolation::kHeader}) {
    for (const auto& [identity, salt] : std::initializer_list<std::pair<const char*, const char*>>{
             {"ab", "c"}, {"a", "bc"}, {"abc", ""}, {"", "abc"}, {"a", ""}, {"b", ""}}) {
      const std::string s = tenant_cache_salt(mode, identity, salt);
      EXPECT_EQ(s.size(), 64u);
      EXPECT_EQ(s.find_first_not_of("0123456789abcdef"), std::string::npos) << s;
      salts.insert(s);
    }
  }
  EXPECT_EQ(salts.size(), 12u);  // fields are length-prefixed: ("ab","c") != ("a","bc")
  // The same tenant gets the same salt every time (routers agree without sharing state).
  EXPECT_EQ(tenant_cache_salt(TenantIsolation::kHeader, "acme", ""),
            tenant_cache_salt(TenantIsolation::kHeader, "acme", ""));
}

TEST(TenantSalt, ModeNames) {
  for (TenantIsolation mode :
       {TenantIsolation::kOff, TenantIsolation::kApiKey, TenantIsolation::kHeader}) {
    EXPECT_EQ(parse_tenant_isolation(tenant_isolation_name(mode)), mode);
  }
  EXPECT_EQ(parse_tenant_isolation("apikey"), std::nullopt);
}

}  // namespace
}  // namespace kvc
