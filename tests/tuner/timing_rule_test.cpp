// The tuner's rule for how long to time a candidate (judge_samples): more repetitions until the
// median is known to the precision asked, or until the candidate cannot beat the best so far.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "tuner/workbench.hpp"

namespace tilesmith::tuner {
namespace {

// n samples evenly spread over [center - half_width, center + half_width].
std::vector<float> spread_over(int n, double center, double half_width) {
  std::vector<float> samples;
  for (int i = 0; i < n; ++i)
    samples.push_back(static_cast<float>(center - half_width + 2 * half_width * i / (n - 1)));
  return samples;
}

TEST(TimingRule, StopsOnceTheMediansIntervalIsWithinThePrecision) {
  TimingOptions options;  // 1%
  // +-0.5% around 1 ms: the interval is narrower than 1% at once.
  EXPECT_EQ(judge_samples(spread_over(10, 1.0, 0.005), options), TimingVerdict::precise);
  // +-5%: ten samples leave the median's interval wider than 1% (ranks 1..9 of 10: +-4.4%)...
  EXPECT_EQ(judge_samples(spread_over(10, 1.0, 0.05), options), TimingVerdict::more);
  // ...and 200 samples narrow it (ranks 86..114 of 200: +-0.7%).
  EXPECT_EQ(judge_samples(spread_over(200, 1.0, 0.05), options), TimingVerdict::precise);
  // The order of the samples does not matter.
  std::vector<float> reversed = spread_over(10, 1.0, 0.005);
  std::reverse(reversed.begin(), reversed.end());
  EXPECT_EQ(judge_samples(reversed, options), TimingVerdict::precise);
}

TEST(TimingRule, StopsWhenTheCandidateCannotBeatTheBest) {
  TimingOptions options;
  options.best_ms = 0.8;
  // Around 1 ms, +-10%: its interval lies above 0.8 x 1.01 however wide it still is.
  EXPECT_EQ(judge_samples(spread_over(10, 1.0, 0.10), options), TimingVerdict::cannot_win);
  // Around 0.81 ms, +-10%: it might still win, so more.
  EXPECT_EQ(judge_samples(spread_over(10, 0.81, 0.10), options), TimingVerdict::more);
  // Faster than the best and precise: precise.
  EXPECT_EQ(judge_samples(spread_over(10, 0.5, 0.001), options), TimingVerdict::precise);
}

TEST(TimingRule, APrecisionOfZeroAlwaysAsksForMore) {
  TimingOptions options;
  options.precision = 0;
  options.best_ms = 0.1;
  EXPECT_EQ(judge_samples(spread_over(10, 1.0, 0.0), options), TimingVerdict::more);
  EXPECT_EQ(judge_samples({}, TimingOptions{}), TimingVerdict::more);
}

}  // namespace
}  // namespace tilesmith::tuner
