// Learning-rate schedules against values worked out by hand from MaxText's definitions.
#include "tessera/train/schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "tessera/core/error.h"

namespace tessera::train {
namespace {

TEST(LrSchedule, CosineWithWarmup) {
  LrSchedule s{
      .type = "cosine", .lr = 1.0, .final_fraction = 0.1, .schedule_steps = 100, .warmup_fraction = 0.1};
  EXPECT_DOUBLE_EQ(s.at(0), 0.0);
  EXPECT_DOUBLE_EQ(s.at(5), 0.5);                 // halfway through 10 warmup steps
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);                // cosine starts at the peak
  EXPECT_NEAR(s.at(55), 0.1 + 0.9 * 0.5, 1e-12);  // halfway through 90 cosine steps
  EXPECT_NEAR(s.at(99), 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 89 / 90)), 1e-12);
  EXPECT_DOUBLE_EQ(s.at(100), 0.0);  // beyond learning_rate_schedule_steps
}

TEST(LrSchedule, WarmupStableDecay) {
  LrSchedule s{.type = "wsd",
               .lr = 2.0,
               .final_fraction = 0.0,
               .schedule_steps = 100,
               .warmup_fraction = 0.1,
               .wsd_decay_fraction = 0.2,
               .wsd_decay_style = "linear"};
  EXPECT_DOUBLE_EQ(s.at(10), 2.0);
  EXPECT_DOUBLE_EQ(s.at(79), 2.0);
  EXPECT_DOUBLE_EQ(s.at(80), 2.0);  // decay starts at S - 20
  EXPECT_DOUBLE_EQ(s.at(90), 1.0);
  s.wsd_decay_style = "cosine";
  EXPECT_NEAR(s.at(90), 1.0, 1e-12);
  EXPECT_NEAR(s.at(85), 2.0 * 0.5 * (1 + std::cos(std::numbers::pi * 0.25)), 1e-12);
}

TEST(LrSchedule, UnknownTypeIsAnError) {
  LrSchedule s{.type = "linear"};
  EXPECT_THROW(s.at(5), Error);
}

}  // namespace
}  // namespace tessera::train
