// ISA names, the TESSERA_ISA setting and the ISA choice; the parsing is tested through
// isa_from_setting rather than the process environment, which active_isa() reads only once.
#include "tessera/core/cpu_features.h"

#include <gtest/gtest.h>

#include <string>

#include "tessera/core/error.h"
#include "testing/op_test_util.h"

namespace tessera {
namespace {

constexpr Isa kAll[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512};

// The message of the Error that isa_from_setting(value) throws, after checking it is kConfig.
std::string setting_error(const std::string& value) {
  try {
    isa_from_setting(value);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    return e.what();
  }
  ADD_FAILURE() << "isa_from_setting(\"" << value << "\") did not throw";
  return "";
}

TEST(Isa, NamesRoundTrip) {
  EXPECT_EQ(isa_name(Isa::kScalar), "scalar");
  EXPECT_EQ(isa_name(Isa::kAvx2), "avx2");
  EXPECT_EQ(isa_name(Isa::kAvx512), "avx512");
  for (Isa isa : kAll) EXPECT_EQ(isa_from_name(isa_name(isa)), isa);
  EXPECT_EQ(isa_from_name("AVX2"), std::nullopt);  // names are lower case, as printed
  EXPECT_EQ(isa_from_name(""), std::nullopt);
}

TEST(Isa, ScalarIsAlwaysSupported) {
  EXPECT_TRUE(isa_supported(Isa::kScalar));
  EXPECT_EQ(isa_from_setting("scalar"), Isa::kScalar);
}

TEST(Isa, BestIsTheWidestSupported) {
  const Isa best = best_isa();
  EXPECT_TRUE(isa_supported(best));
  if (isa_supported(Isa::kAvx512))
    EXPECT_EQ(best, Isa::kAvx512);
  else if (isa_supported(Isa::kAvx2))
    EXPECT_EQ(best, Isa::kAvx2);
  else
    EXPECT_EQ(best, Isa::kScalar);
}

TEST(Isa, SettingNamesASupportedIsa) {
  for (Isa isa : kAll)
    if (isa_supported(isa)) {
      EXPECT_EQ(isa_from_setting(isa_name(isa)), isa);
    }
}

TEST(Isa, UnknownSettingSaysWhatIsAllowed) {
  for (const std::string value : {"avx", "sse2", "AVX512", " scalar", "neon"}) {
    const std::string msg = setting_error(value);
    EXPECT_NE(msg.find("TESSERA_ISA=" + value), std::string::npos) << msg;
    EXPECT_NE(msg.find("scalar, avx2 or avx512"), std::string::npos) << msg;
  }
}

TEST(Isa, UnsupportedSettingSaysWhatTheCpuHas) {
  for (Isa isa : kAll) {
    if (isa_supported(isa)) continue;
    const std::string msg = setting_error(std::string(isa_name(isa)));
    EXPECT_NE(msg.find("TESSERA_ISA=" + std::string(isa_name(isa))), std::string::npos) << msg;
    EXPECT_NE(msg.find("supports scalar"), std::string::npos) << msg;
  }
  if (isa_supported(Isa::kAvx512)) GTEST_SKIP() << "this CPU supports every ISA";
}

TEST(Isa, ForEachIsaRunsEverySupportedIsaAndRestores) {
  const Isa before = active_isa();
  std::vector<Isa> seen;
  testing::for_each_isa([&] { seen.push_back(active_isa()); });
  std::vector<Isa> want;
  for (Isa isa : kAll)
    if (isa_supported(isa)) want.push_back(isa);
  EXPECT_EQ(seen, want);
  EXPECT_EQ(active_isa(), before);
}

}  // namespace
}  // namespace tessera
