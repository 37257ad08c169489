// NCCL_PROTO parsing (coll/coll_engine.h parseProtocols): lists, exclusion,
// case, LL128 (accepted, ignored), and the lists Ferry must refuse.
#include <gtest/gtest.h>

#include "coll/coll_engine.h"

namespace ferry {
namespace {

struct Allowed {
  bool ll;
  bool simple;
};

Allowed parse(const char* text) {
  Allowed a{false, false};
  EXPECT_EQ(ncclSuccess, parseProtocols(text, &a.ll, &a.simple)) << text;
  return a;
}

TEST(CollProto, ListsAndExclusions) {
  EXPECT_TRUE(parse("").ll && parse("").simple);
  EXPECT_TRUE(parse("LL").ll && !parse("LL").simple);
  EXPECT_TRUE(!parse("simple").ll && parse("simple").simple);
  EXPECT_TRUE(parse("LL,LL128,Simple").ll && parse("LL,LL128,Simple").simple);
  EXPECT_TRUE(!parse("^LL").ll && parse("^LL").simple);
  EXPECT_TRUE(parse("^ll128").ll && parse("^ll128").simple);
  EXPECT_TRUE(parse("Simple,").simple && !parse("Simple,").ll);
}

TEST(CollProto, RefusesUnknownNamesAndEmptyChoices) {
  bool ll = false;
  bool simple = false;
  EXPECT_NE(ncclSuccess, parseProtocols("LL,Fast", &ll, &simple));
  EXPECT_NE(ncclSuccess, parseProtocols("LL128", &ll, &simple));
  EXPECT_NE(ncclSuccess, parseProtocols("^LL,Simple", &ll, &simple));
}

}  // namespace
}  // namespace ferry
