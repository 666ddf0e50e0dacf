#include "http/auth.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "tests/testing/temp_dir.h"

namespace kvc::http {
namespace {

Request with_auth(std::string value) {
  Request r;
  r.headers = {{"Host", "x"}, {"Authorization", std::move(value)}};
  return r;
}

// The scheme is case-insensitive (RFC 9110 11.1): lowercase "bearer" used to get a 401.
TEST(BearerToken, SchemeInAnyCase) {
  for (const char* value : {"Bearer k1", "bearer k1", "BEARER k1", "bEaReR k1", "Bearer   k1",
                            "Bearer\tk1", "Bearer k1  "}) {
    EXPECT_EQ(bearer_token(with_auth(value)), "k1") << value;
  }
}

TEST(BearerToken, OtherSchemesAndMalformedValuesHaveNoToken) {
  for (const char* value :
       {"", "Bearer", "Bearer ", "Basic azE=", "Bearerk1", "Token k1", "Bearer k1 k2", " Bearer"}) {
    EXPECT_EQ(bearer_token(with_auth(value)), std::nullopt) << value;
  }
  Request none;
  EXPECT_EQ(bearer_token(none), std::nullopt);
}

TEST(ApiKeys, MatchesOnlyAConfiguredKeyExactly) {
  const std::vector<std::string> keys = {"alpha-key", "beta-key"};
  EXPECT_TRUE(key_matches("alpha-key", keys));
  EXPECT_TRUE(key_matches("beta-key", keys));
  for (const char* wrong : {"", "alpha", "alpha-key2", "ALPHA-KEY", "beta-ke", "gamma-key"}) {
    EXPECT_FALSE(key_matches(wrong, keys)) << wrong;
  }
  EXPECT_FALSE(key_matches("alpha-key", {}));
}

TEST(ApiKeys, ValidKeysArePrintableWithoutSpaces) {
  EXPECT_TRUE(validate_api_key("sk-0123456789abcdef").ok());
  for (const std::string& bad :
       {std::string(), std::string("a b"), std::string("a\nb"), std::string("a\tb"),
        std::string("a\0b", 3), std::string("\x7f")}) {
    EXPECT_FALSE(validate_api_key(bad).ok()) << bad;
  }
}

// A Secret mounted as a file: keys one per line, comments and CRLF line ends tolerated.
TEST(ApiKeys, ReadFromAFile) {
  const kvc::testing::TempDir dir;
  const std::string path = dir.file("api_keys");
  auto write = [&](const std::string& text) { std::ofstream(path, std::ios::binary) << text; };
  write("# current key first\r\nkey-one\r\n\n  key-two  \n");
  auto keys = read_api_keys_file(path);
  ASSERT_TRUE(keys.ok()) << keys.error().message;
  EXPECT_EQ(*keys, (std::vector<std::string>{"key-one", "key-two"}));
  write("# nothing but a comment\n\n");
  EXPECT_FALSE(read_api_keys_file(path).ok());
  write("good\nhas space\n");
  auto bad = read_api_keys_file(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find(":2:"), std::string::npos) << bad.error().message;
  std::remove(path.c_str());
  EXPECT_FALSE(read_api_keys_file(path).ok()) << "a missing file";
}

}  // namespace
}  // namespace kvc::http
