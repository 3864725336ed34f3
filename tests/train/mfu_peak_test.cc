// MfuPeak: a step faster than the peak calibrates again and raises the peak to the largest of the
// three figures; a peak the user gave stays and is reported once.
#include "tessera/train/mfu_peak.h"

#include <gtest/gtest.h>

#include <limits>

namespace tessera::train {
namespace {

TEST(MfuPeak, AStepAtOrBelowThePeakChangesNothing) {
  int calls = 0;
  MfuPeak peak(200e9, [&] { return ++calls, 300e9; });
  EXPECT_EQ(peak.observe(0, 150e9), "");
  EXPECT_EQ(peak.observe(1, 200e9), "");
  EXPECT_EQ(peak.observe(2, std::numeric_limits<double>::infinity()), "");  // a step of 0 s
  EXPECT_EQ(peak.observe(3, std::numeric_limits<double>::quiet_NaN()), "");
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(peak.flops(), 200e9);
}

TEST(MfuPeak, AFasterStepCalibratesAgainAndTakesTheLargest) {
  int calls = 0;
  double next = 330e9;
  MfuPeak peak(234.8e9, [&] { return ++calls, next; });
  const std::string line = peak.observe(120, 289e9);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(peak.flops(), 330e9);  // the new calibration
  EXPECT_NE(line.find("step 120 executed 289.0 GFLOP/s, above the calibrated peak of 234.8"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("now divide by 330.0 GFLOP/s"), std::string::npos) << line;
  EXPECT_EQ(peak.observe(121, 320e9), "");  // below the raised peak: no calibration
  EXPECT_EQ(calls, 1);
  next = 100e9;  // the machine slowed again while calibrating: the step's own rate is the peak
  EXPECT_NE(peak.observe(122, 340e9), "");
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(peak.flops(), 340e9);
  next = 335e9;  // never lower than before
  EXPECT_NE(peak.observe(123, 341e9), "");
  EXPECT_EQ(peak.flops(), 341e9);
}

TEST(MfuPeak, AGivenPeakStaysAndIsReportedOnce) {
  MfuPeak peak(100e9, nullptr);
  const std::string line = peak.observe(3, 150e9);
  EXPECT_NE(line.find("above device_peak_tflops (100.0 GFLOP/s)"), std::string::npos) << line;
  EXPECT_EQ(peak.observe(4, 160e9), "");
  EXPECT_EQ(peak.flops(), 100e9);
}

}  // namespace
}  // namespace tessera::train
